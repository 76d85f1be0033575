//! The system calls of a queued task on the workers' side (issue 39.3): two
//! `conductor-worker`s, each under `strace -f -ff`, serve one `submit --batch` of N tasks
//! on a durable root (`init`'s: fsync on); their calls a task, the agent's left out.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::census::Census;

/// The workers' census of a batch of `tasks` through `queue/pending`, in `dir`.
pub fn census_of_queue(bins: &Path, agent: &str, dir: &Path, tasks: usize) -> Census {
    let work = dir.join(format!("census-queue-{tasks}"));
    std::fs::create_dir_all(&work).unwrap();
    let root_dir = work.join("root");
    let root = conductor::Root::new(&root_dir);
    conductor::Client::new(root.clone()).init_queue().unwrap();
    let prefix = work.join("trace");
    let mut tracers: Vec<(Child, u32)> = (0..2u32)
        .map(|i| {
            let tracer = Command::new("strace")
                .args(["-f", "-ff", "-o"])
                .arg(format!("{}-{i}", prefix.display()))
                .arg(bins.join("conductor-worker"))
                .arg(i.to_string())
                .arg(&work)
                .args(["--agent", agent, "--root"])
                .arg(&root_dir)
                .env("CONDUCTOR_HOME", work.join("home"))
                .env_remove("CONDUCTOR_WORKER")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("strace a worker");
            // strace's own first child is not the worker: its pid is what it publishes.
            let slot = conductor::Slot(i);
            let deadline = Instant::now() + Duration::from_secs(60);
            let pid = loop {
                let status = conductor::Status::read(&root.worker(slot).status());
                if let Some(pid) = status.ok().flatten().and_then(|s| s.worker_pid) {
                    if conductor::pool::serving(&root, slot, pid) {
                        break pid;
                    }
                }
                assert!(Instant::now() < deadline, "worker {i} did not start");
                std::thread::sleep(Duration::from_millis(5));
            };
            (tracer, pid)
        })
        .collect();
    let list = work.join("prompts.txt");
    let prompts: String = (0..tasks).map(|i| format!("task {i}\n")).collect();
    std::fs::write(&list, prompts).unwrap();
    let out = Command::new(bins.join("conductor"))
        .args(["submit", "--batch", "-f"])
        .arg(&list)
        .arg("--root")
        .arg(&root_dir)
        .env("CONDUCTOR_HOME", work.join("home"))
        .output()
        .expect("submit --batch");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let queue = conductor::queue::Queue::new(root);
    for id in String::from_utf8_lossy(&out.stdout).lines() {
        queue
            .wait_for_result(&conductor::TaskId::from(id), Duration::from_secs(120))
            .expect("result");
    }
    for (tracer, pid) in &mut tracers {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = tracer.wait();
    }
    let mut census = Census::default();
    for i in 0..2 {
        let c = Census::of_traces(Path::new(&format!("{}-{i}", prefix.display())))
            .expect("read the traces");
        census.add(&c);
    }
    let _ = std::fs::remove_dir_all(&work);
    census
}
