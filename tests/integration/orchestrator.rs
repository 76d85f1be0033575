//! `conductor run`, presets, retries and the library's orchestration patterns.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use conductor::agent::AgentCommand;
use conductor::orchestrator::{Orchestrator, Progress};
use conductor::preset::Preset;
use conductor::worker::{Worker, WorkerOptions};
use conductor::{Outcome, Root, Slot, Task, TaskId, TaskResult};
use serde_json::Value;

use crate::harness::{
    agent, assert_nothing_left, bin, run_conductor, run_conductor_env, wait_until, Bg, TestRoot,
};

const BOUND: Duration = Duration::from_secs(60);

/// A worker running in this process (the library's worker loop on a thread).
struct InProcWorker {
    stop: Option<crossbeam_channel::Sender<()>>,
    serving: Option<JoinHandle<conductor::Result<()>>>,
}

impl InProcWorker {
    fn start(
        root: &Root,
        slot: Slot,
        project: &Path,
        agent_cmd: &str,
        preset: Preset,
    ) -> InProcWorker {
        let mut opts = WorkerOptions::new(
            root.clone(),
            slot,
            project.to_path_buf(),
            AgentCommand::parse(agent_cmd).unwrap(),
        );
        opts.preset = preset;
        let mut worker = Worker::start(opts).expect("start worker");
        let (stop, stopped) = crossbeam_channel::bounded::<()>(1);
        let serving = std::thread::spawn(move || worker.run(&stopped));
        InProcWorker {
            stop: Some(stop),
            serving: Some(serving),
        }
    }
}

impl Drop for InProcWorker {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(h) = self.serving.take() {
            h.join().expect("worker thread").expect("worker loop");
        }
    }
}

fn conductor(t: &TestRoot) -> Command {
    let mut c = Command::new(bin("conductor"));
    c.env("CONDUCTOR_HOME", t.path())
        .env_remove("CONDUCTOR_WORKER");
    c
}

#[test]
fn run_fans_nine_prompts_over_all_three_workers() {
    let t = TestRoot::new();
    let prompts: Vec<String> = (1..=9).map(|i| format!("prompt number {i}")).collect();
    let out = conductor(&t)
        .args([
            "run",
            "--workers",
            "3",
            "--agent",
            "tr a-z A-Z",
            "--json",
            "--root",
        ])
        .arg(t.path())
        .args(&prompts)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let results = doc["results"].as_array().unwrap();
    assert_eq!(results.len(), 9);
    for (i, r) in results.iter().enumerate() {
        assert_eq!(
            r["output"],
            format!("PROMPT NUMBER {}", i + 1),
            "results come back in input order"
        );
        assert_eq!(r["success"], true);
    }
    let mut used: Vec<u64> = results
        .iter()
        .map(|r| r["worker"].as_u64().unwrap())
        .collect();
    used.sort();
    used.dedup();
    assert_eq!(used, vec![0, 1, 2], "every worker is used");
    assert_eq!(doc["succeeded"], 9);
    assert_eq!(doc["failed"], 0);
    assert_nothing_left(t.path());
}

#[test]
fn run_prints_each_result_and_fails_when_a_task_fails() {
    let t = TestRoot::new();
    let out = conductor(&t)
        .args(["run", "--workers", "2", "--root"])
        .arg(t.path())
        .args(["--agent", "sh -c 'read p; case $p in bad*) echo \"no good: $p\" >&2; exit 4;; *) echo \"ok: $p\";; esac'"])
        .args(["good one", "bad apple", "good two"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("[1/3]") && stdout.contains("ok: good one"),
        "{stdout}"
    );
    assert!(
        stdout.contains("[2/3]")
            && stdout.contains("FAILED")
            && stdout.contains("exit status 4: no good: bad apple"),
        "{stdout}"
    );
    assert!(stdout.contains("ok: good two"), "{stdout}");
    // Not a terminal: plain progress lines on stderr, and a summary.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("3 task(s): 2 succeeded, 1 failed"),
        "{stderr}"
    );
    assert!(stderr.contains("[worker "), "{stderr}");
    assert_nothing_left(t.path());
}

#[test]
fn run_reads_prompts_from_a_file_in_lines_or_blocks() {
    let t = TestRoot::new();
    let file = t.dir.path().join("prompts.txt");
    fs::write(
        &file,
        "first line\n\nsecond block\nspans two lines\n\n\nthird\n",
    )
    .unwrap();
    let blocks = conductor(&t)
        .args([
            "run",
            "--workers",
            "2",
            "--agent",
            "cat",
            "--json",
            "--blocks",
            "-f",
        ])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        blocks.status.success(),
        "{}",
        String::from_utf8_lossy(&blocks.stderr)
    );
    let doc: Value = serde_json::from_slice(&blocks.stdout).unwrap();
    let outputs: Vec<&str> = doc["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["output"].as_str().unwrap())
        .collect();
    assert_eq!(
        outputs,
        ["first line", "second block\nspans two lines", "third"]
    );

    let mut lines = conductor(&t)
        .args([
            "run",
            "--workers",
            "2",
            "--agent",
            "cat",
            "--json",
            "-f",
            "-",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    lines
        .stdin
        .take()
        .unwrap()
        .write_all(b"one\ntwo\n\nthree\n")
        .unwrap();
    let out = lines.wait_with_output().unwrap();
    assert!(out.status.success());
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["results"].as_array().unwrap().len(), 3);
}

#[test]
fn ctrl_c_stops_the_run_and_leaves_no_process() {
    let t = TestRoot::new();
    let mut run = conductor(&t)
        .args(["run", "--workers", "2", "--json", "--root"])
        .arg(t.path())
        .arg("--agent")
        .arg(agent("slow.sh"))
        .args(["a", "b", "c", "d"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Both workers are running a task.
    let client = conductor::Client::new(Root::new(t.path()));
    wait_until(BOUND, "two agents running", || {
        (0..2).all(|i| {
            matches!(client.read_status(Slot(i)), Ok(Some(s)) if s.status == conductor::WorkerState::Working)
        })
    });
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(run.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let deadline = Instant::now() + BOUND;
    let status = loop {
        if let Some(st) = run.try_wait().unwrap() {
            break st;
        }
        assert!(
            Instant::now() < deadline,
            "conductor run did not stop after Ctrl-C"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(130));
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut run.stdout.take().unwrap(), &mut stdout).unwrap();
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    let outcomes: Vec<&str> = doc["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(
        outcomes.iter().filter(|o| **o == "interrupted").count(),
        2,
        "{outcomes:?}"
    );
    assert_eq!(
        outcomes.iter().filter(|o| **o == "cancelled").count(),
        2,
        "{outcomes:?}"
    );
    assert_nothing_left(t.path());
}

#[test]
fn a_run_on_its_own_root_wakes_its_workers_by_pipe_and_they_go_with_it() {
    let t = TestRoot::new();
    let tmp = t.path().join("tmp");
    fs::create_dir(&tmp).unwrap();
    let mut run = conductor(&t)
        .env("TMPDIR", &tmp)
        .args(["run", "--workers", "2", "--json", "--agent"])
        .arg(agent("slow.sh"))
        .args(["a", "b"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let root = private_root(&tmp);
    let client = conductor::Client::new(Root::new(&root));
    let mut workers = Vec::new();
    wait_until(BOUND, "both tasks running", || {
        workers = (0..2)
            .filter_map(|i| match client.read_status(Slot(i)) {
                Ok(Some(s)) if s.status == conductor::WorkerState::Working => s.worker_pid,
                _ => None,
            })
            .collect();
        workers.len() == 2
    });
    // Woken through the run's pipes: no file events, so no inotify instance (whose
    // close costs each worker ~20 ms at exit).
    for &pid in &workers {
        assert_eq!(
            conductor::procfs::inotify_instances(pid),
            0,
            "worker {pid} watches files"
        );
    }
    // The run killed outright: its end of the pipes closes, and its workers stop,
    // their agents with them, instead of serving a root nobody will read or delete.
    run.kill().unwrap();
    run.wait().unwrap();
    assert_nothing_left(&root);
}

/// A `conductor run --workers 1` of two `step.sh` tasks (each runs until the file its
/// prompt names exists), once its first task runs and the second waits in the busy
/// worker's inbox.
struct TwoSteps {
    run: Bg,
    root: PathBuf,
    client: conductor::Client,
    first: PathBuf,
    second: PathBuf,
    /// The id of the task running.
    running: TaskId,
}

impl TwoSteps {
    /// On the run's private root (its workers woken through pipes).
    fn start(t: &TestRoot) -> TwoSteps {
        Self::start_on(t, None)
    }

    /// On `root` when given (`--root`: its workers watch their files and tell the run by
    /// pipe), else on the run's private root.
    fn start_on(t: &TestRoot, root: Option<&Path>) -> TwoSteps {
        let tmp = t.path().join("tmp");
        fs::create_dir(&tmp).unwrap();
        let (first, second) = (t.path().join("go-first"), t.path().join("go-second"));
        let step = agent("step.sh");
        let mut args = vec![
            "run",
            "--workers",
            "1",
            "--json",
            "--agent",
            step.to_str().unwrap(),
            first.to_str().unwrap(),
            second.to_str().unwrap(),
        ];
        if let Some(root) = root {
            args.extend(["--root", root.to_str().unwrap()]);
        }
        let run = Bg::spawn_env(t, &args, &[("TMPDIR", tmp.to_str().unwrap())]);
        let root = match root {
            Some(root) => root.to_path_buf(),
            None => private_root(&tmp),
        };
        let client = conductor::Client::new(Root::new(&root));
        // The worker told the run it started the first: the second waits in its inbox,
        // to be taken the moment the first ends rather than after a round trip.
        let mut running = None;
        wait_until(
            BOUND,
            "the second task waiting while the first runs",
            || {
                running = client
                    .read_status(Slot(0))
                    .ok()
                    .flatten()
                    .filter(|s| s.status == conductor::WorkerState::Working)
                    .and_then(|s| s.task_id);
                let waiting = client.read_task(Slot(0)).ok().flatten().and_then(|t| t.id);
                running.is_some() && waiting.is_some() && waiting != running
            },
        );
        TwoSteps {
            run,
            root,
            client,
            first,
            second,
            running: running.unwrap(),
        }
    }

    /// Let both tasks end once they run.
    fn release(&self) {
        fs::write(&self.first, "").unwrap();
        fs::write(&self.second, "").unwrap();
    }

    /// The run ends, both tasks succeeded.
    fn both_succeed(mut self) {
        assert!(self.run.wait_exit().success(), "{}", self.run.stderr());
        let v: serde_json::Value = serde_json::from_str(&self.run.stdout()).unwrap();
        assert_eq!(v["succeeded"], 2, "{}", self.run.stdout());
    }
}

/// The private root of the `conductor run` whose `TMPDIR` is `tmp`, once it exists.
fn private_root(tmp: &Path) -> PathBuf {
    let mut root = None;
    wait_until(BOUND, "the run's private root", || {
        root = fs::read_dir(tmp)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.to_string_lossy().contains("conductor-run-"));
        root.is_some()
    });
    root.unwrap()
}

#[test]
fn a_woken_run_gives_a_busy_worker_its_next_task_before_the_first_ends() {
    let t = TestRoot::new();
    let steps = TwoSteps::start(&t);
    steps.release();
    steps.both_succeed();
}

#[test]
fn a_pause_now_in_a_woken_run_puts_the_task_back_though_the_next_waited_in_its_inbox() {
    let t = TestRoot::new();
    // Stopped at its worker's next beat, the first goes back to the inbox: the run
    // takes the second out of the way when the worker asks.
    pause_now_puts_the_first_back(&t, TwoSteps::start(&t));
}

/// `pause --now` of the slot running the first of `steps` (the second waiting in its
/// inbox): the first goes back to the inbox, the run having taken the second out of the
/// way; once resumed, both run and succeed.
fn pause_now_puts_the_first_back(t: &TestRoot, steps: TwoSteps) {
    let root_arg = steps.root.to_str().unwrap();
    run_conductor(t, &["pause", "--now", "--slot", "0", "--root", root_arg], 0);
    wait_until(BOUND, "the first task back in its inbox", || {
        steps
            .client
            .read_task(Slot(0))
            .ok()
            .flatten()
            .and_then(|t| t.id)
            == Some(steps.running.clone())
    });
    steps.release();
    run_conductor(t, &["resume", "--all", "--root", root_arg], 0);
    steps.both_succeed();
}

/// Issue 39: a run on a root given (`--root`, which others may use too) keeps its
/// workers' file watches but is told of each start by pipe, so the next task waits in
/// the busy worker's inbox and is taken the moment the first ends (before, it was
/// delivered only after the first's result: a round trip between every two tasks).
#[test]
fn a_run_on_a_given_root_gives_a_busy_worker_its_next_task_before_the_first_ends() {
    let t = TestRoot::new();
    let steps = TwoSteps::start_on(&t, Some(t.path()));
    // Its worker still watches the root's files: others may put tasks there.
    let worker = steps
        .client
        .read_status(Slot(0))
        .unwrap()
        .unwrap()
        .worker_pid
        .unwrap();
    assert!(
        conductor::procfs::inotify_instances(worker) > 0,
        "the worker of a shared root watches no files"
    );
    steps.release();
    steps.both_succeed();
}

#[test]
fn a_pause_now_in_a_run_on_a_given_root_puts_the_task_back_though_the_next_waited_in_its_inbox() {
    let t = TestRoot::new();
    // Seen by its watcher (or its beat), the pause stops the first, which goes back to
    // the inbox: the run takes the second out of the way when the worker asks by pipe.
    pause_now_puts_the_first_back(&t, TwoSteps::start_on(&t, Some(t.path())));
}

/// A `conductor run --root R` killed outright: its workers, told through their stdin's
/// end, stop with it (their agents too) instead of serving R for nobody. Before, they
/// went on serving it.
#[test]
fn a_run_on_a_given_root_killed_outright_takes_its_workers_with_it() {
    let t = TestRoot::new();
    let mut run = conductor(&t)
        .args(["run", "--workers", "2", "--json", "--agent"])
        .arg(agent("slow.sh"))
        .args(["a", "b", "--root"])
        .arg(t.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until(BOUND, "both tasks running", || {
        (0..2).all(|i| {
            matches!(t.client.read_status(Slot(i)),
                Ok(Some(s)) if s.status == conductor::WorkerState::Working)
        })
    });
    run.kill().unwrap();
    run.wait().unwrap();
    assert_nothing_left(t.path());
}

/// Someone cancels the task waiting in a busy worker's inbox (a root given with
/// `--root` is shared): the run reports it cancelled and the other one done, though no
/// worker told it of the cancelled one's result.
#[test]
fn a_run_on_a_given_root_reports_a_task_cancelled_while_it_waited_in_an_inbox() {
    let t = TestRoot::new();
    let mut steps = TwoSteps::start_on(&t, Some(t.path()));
    let waiting = steps
        .client
        .read_task(Slot(0))
        .unwrap()
        .unwrap()
        .id
        .unwrap()
        .to_string();
    let root_arg = steps.root.to_str().unwrap().to_string();
    run_conductor(&t, &["cancel", &waiting, "--root", &root_arg], 0);
    steps.release();
    assert!(!steps.run.wait_exit().success(), "a task was cancelled");
    let v: serde_json::Value = serde_json::from_str(&steps.run.stdout()).unwrap();
    assert_eq!(v["succeeded"], 1, "{}", steps.run.stdout());
    let outcomes: Vec<&str> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["outcome"].as_str().unwrap_or(""))
        .collect();
    assert!(outcomes.contains(&"cancelled"), "{outcomes:?}");
}

/// Whether a byte arrives on `fd` within `bound`; reads what is there.
fn told_within(fd: &std::os::fd::OwnedFd, bound: Duration) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
    let ms = PollTimeout::try_from(bound.as_millis() as i32).unwrap();
    if poll(&mut fds, ms).unwrap() == 0 {
        return false;
    }
    let mut byte = [0u8; 64];
    nix::unistd::read(fd, &mut byte).unwrap() > 0
}

#[test]
fn a_woken_worker_tells_its_owner_when_it_starts_a_task_and_when_it_ends_it() {
    let t = TestRoot::new();
    let hold = t.path().join("go");
    let cmd = conductor::pool::WorkerCommand {
        program: bin("conductor-worker"),
        leading_args: Vec::new(),
        dir: t.path().to_path_buf(),
        extra_args: vec!["--agent".into(), agent("step.sh").into()],
    };
    let slot = Slot(0);
    let (mut pool, pipes) =
        conductor::pool::WorkerPool::spawn_woken(t.client.root(), &[slot], &cmd).unwrap();
    let told = pipes.told.as_ref().unwrap();
    pool.wait_ready(BOUND).unwrap();
    // Drain what its start said, if anything.
    while told_within(told, Duration::ZERO) {}
    let task = Task::new(hold.display().to_string());
    t.client.write_task(slot, &task).unwrap();
    pipes.wake(slot);
    // The agent waits for `go`, which does not exist yet: a byte now says it started
    // (its inbox is free for the next task), not that it ended.
    assert!(told_within(told, BOUND), "no word of the task's start");
    assert!(t.client.read_task(slot).unwrap().is_none(), "claimed");
    fs::write(&hold, "").unwrap();
    assert!(told_within(told, BOUND), "no word of the task's end");
    drop(pool);
}

#[test]
fn an_agent_of_a_woken_run_hands_work_to_the_runs_queue_and_gets_it_back() {
    // Tasks the run did not deliver wake no one: its idle worker finds them by looking.
    let t = TestRoot::new();
    let tmp = t.path().join("tmp");
    fs::create_dir(&tmp).unwrap();
    let env = [
        ("TMPDIR".to_string(), tmp.display().to_string()),
        (
            "CONDUCTOR_BIN".to_string(),
            bin("conductor").display().to_string(),
        ),
    ];
    let delegate = agent("delegate.sh").display().to_string();
    let r = run_conductor_env(
        &t,
        &[
            "run",
            "--workers",
            "2",
            "--json",
            "--agent",
            &delegate,
            "delegate",
        ],
        &env,
        0,
    );
    let doc: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(
        doc["results"][0]["output"].as_str().map(str::trim),
        Some("got: done half"),
        "{doc}"
    );
}

#[test]
fn claude_preset_lifts_the_json_and_retry_resumes_the_session() {
    let t = TestRoot::new();
    let fake = agent("fake_claude.sh").display().to_string();
    let root = Root::new(t.path());
    let _w = InProcWorker::start(&root, Slot(0), t.dir.path(), &fake, Preset::Claude);
    let id = t
        .client
        .write_task(Slot(0), &Task::new("review the diff").with_id("rev1"))
        .unwrap();
    let r = t.client.wait_for_result(Slot(0), &id, BOUND).unwrap();
    assert!(r.success, "{:?}", r.error);
    assert_eq!(r.output, "answer to: review the diff");
    let session = r.session_id.clone().expect("sessionId");
    assert_eq!(r.cost_usd, Some(0.0042));
    assert_eq!(r.num_turns, Some(2));
    assert_eq!(r.is_error, Some(false));
    // On disk the way readers see it.
    let raw: Value =
        serde_json::from_slice(&fs::read(t.client.worker(Slot(0)).result_for(&id)).unwrap())
            .unwrap();
    assert_eq!(raw["sessionId"], session.as_str());
    assert_eq!(raw["costUsd"], 0.0042);

    let out = conductor(&t)
        .args(["retry", "0", "rev1", "--resume", "--wait"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "resumed answer to: review the diff\n"
    );
    let retried = t
        .client
        .read_result_for(Slot(0), &TaskId::from("rev1-r1"))
        .unwrap()
        .unwrap();
    assert_eq!(retried.session_id.as_deref(), Some(session.as_str()));

    // Claude's own error report fails the task.
    let id = t
        .client
        .write_task(Slot(0), &Task::new("fail loudly"))
        .unwrap();
    let r = t.client.wait_for_result(Slot(0), &id, BOUND).unwrap();
    assert!(!r.success);
    assert!(r.error.unwrap().contains("error_during_execution"));
}

#[test]
fn retry_runs_the_recorded_task_under_a_new_id() {
    let t = TestRoot::new();
    let root = Root::new(t.path());
    let _w = InProcWorker::start(&root, Slot(0), t.dir.path(), "tr a-z A-Z", Preset::Command);
    let id = t
        .client
        .write_task(Slot(0), &Task::new("again please").with_id("job"))
        .unwrap();
    t.client.wait_for_result(Slot(0), &id, BOUND).unwrap();
    for expected in ["job-r1", "job-r2"] {
        let out = conductor(&t).args(["retry", "0", "job"]).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), expected);
        let r = t
            .client
            .wait_for_result(Slot(0), &TaskId::from(expected), BOUND)
            .unwrap();
        assert_eq!(r.output, "AGAIN PLEASE");
    }
    // --resume without a session is refused with the reason.
    let out = conductor(&t)
        .args(["retry", "0", "job", "--resume"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--preset claude"));
    // A task that never ran cannot be retried.
    let out = conductor(&t)
        .args(["retry", "0", "never"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no record of task never"));
}

#[test]
fn library_fan_out_returns_results_in_input_order_with_progress() {
    let t = TestRoot::new();
    let root = Root::new(t.path());
    let _w: Vec<InProcWorker> = (0..3)
        .map(|i| InProcWorker::start(&root, Slot(i), t.dir.path(), "tr a-z A-Z", Preset::Command))
        .collect();
    let orch = Orchestrator::new(t.client.clone(), vec![Slot(0), Slot(1), Slot(2)]);
    let tasks: Vec<Task> = (0..9).map(|i| Task::new(format!("task {i}"))).collect();
    let mut started = Vec::new();
    let mut finished = Vec::new();
    let results = orch
        .run_all(tasks, |p| match p {
            Progress::Started { index, slot, .. } => started.push((index, slot)),
            Progress::Finished { index, .. } => finished.push(index),
        })
        .unwrap();
    let outputs: Vec<&str> = results.iter().map(|r| r.output.as_str()).collect();
    assert_eq!(
        outputs,
        (0..9).map(|i| format!("TASK {i}")).collect::<Vec<_>>()
    );
    assert_eq!(started.len(), 9);
    finished.sort();
    assert_eq!(finished, (0..9).collect::<Vec<_>>());
    let mut slots: Vec<u32> = started.iter().map(|(_, s)| s.0).collect();
    slots.sort();
    slots.dedup();
    assert_eq!(slots, vec![0, 1, 2]);
}

#[test]
fn library_pipeline_feeds_each_stage_and_stops_at_the_first_failure() {
    let t = TestRoot::new();
    let root = Root::new(t.path());
    let agent_cmd =
        "sh -c 'read p; case $p in *fail*) echo broken >&2; exit 1;; *) echo \"$p+\";; esac'";
    let _w = InProcWorker::start(&root, Slot(0), t.dir.path(), agent_cmd, Preset::Command);
    let orch = Orchestrator::new(t.client.clone(), vec![Slot(0)]);
    type Stage = Box<dyn FnOnce(Option<&TaskResult>) -> Task>;
    let stages: Vec<Stage> = vec![
        Box::new(|_| Task::new("start")),
        Box::new(|prev| Task::new(prev.unwrap().output.trim().to_string())),
        Box::new(|prev| Task::new(format!("{} then fail", prev.unwrap().output.trim()))),
        Box::new(|_| panic!("the stage after a failure must not run")),
    ];
    let results = orch.run_pipeline(stages, |_| {}).unwrap();
    assert_eq!(results.len(), 3);
    assert_eq!(results[0].output, "start+\n");
    assert_eq!(results[1].output, "start++\n");
    assert!(!results[2].success);
    assert_eq!(results[2].outcome, Some(Outcome::Failure));
}

/// Where cargo put this package's examples: `cargo test` builds them; a filtered run
/// (`cargo test --test integration`) may not have, so build it then.
fn example(name: &str) -> PathBuf {
    let deps = std::env::current_exe().unwrap();
    let path = deps
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join(name);
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let built = Command::new(cargo)
            .args(["build", "--example", name])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo");
        assert!(built.success(), "building example {name}");
    }
    path
}

#[test]
fn examples_run_with_a_plain_unix_agent() {
    for (name, expect) in [
        ("simple_demo", "WRITE A HAIKU ABOUT FILES"),
        ("orchestrator_helper", "pipeline finished"),
    ] {
        let out = Command::new(example(name))
            .env_remove("CONDUCTOR_WORKER")
            .env_remove("CONDUCTOR_HOME")
            .output()
            .unwrap_or_else(|e| panic!("run example {name}: {e}"));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{name}: {}\n{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains(expect), "{name}: {stdout}");
    }
}

#[test]
fn run_keeps_each_worker_log_private_under_umask_022() {
    use std::os::unix::fs::PermissionsExt;
    let t = TestRoot::new();
    // A worker's log quotes prompts and agent output: owner-only, whatever the umask.
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "umask 022; exec \"$@\"", "sh"])
        .arg(bin("conductor"))
        .args(["run", "--workers", "2", "--agent", "cat", "--root"])
        .arg(t.path())
        .args(["one", "two"])
        .env("CONDUCTOR_HOME", t.path())
        .env_remove("CONDUCTOR_WORKER");
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for slot in 0..2 {
        let log = t.path().join(format!("workers/{slot}/worker.log"));
        let mode = fs::metadata(&log).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{} is {mode:o}", log.display());
    }
    assert_nothing_left(t.path());
}

/// Issue 23: no timer is ever on the path of a task that is ready to run. With the
/// recheck an hour long, a fan-out that waited for it even once (a slot freed when its
/// result's event had already been consumed) would not end within the bound.
#[test]
fn a_freed_slot_takes_its_next_task_without_waiting_for_a_timer() {
    let t = TestRoot::new();
    let root = Root::new(t.path());
    let _w: Vec<InProcWorker> = (0..2)
        .map(|i| InProcWorker::start(&root, Slot(i), t.dir.path(), "cat", Preset::Command))
        .collect();
    let orch = Orchestrator::new(t.client.clone(), vec![Slot(0), Slot(1)])
        .with_recheck(Duration::from_secs(3600));
    let (done, finished) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let tasks: Vec<Task> = (0..200).map(|i| Task::new(format!("t{i}"))).collect();
        let _ = done.send(orch.run_all(tasks, |_| {}));
    });
    let results = finished
        .recv_timeout(Duration::from_secs(120))
        .expect("a ready task waited for the recheck timer")
        .unwrap();
    assert_eq!(results.len(), 200);
    assert!(results
        .iter()
        .enumerate()
        .all(|(i, r)| r.output == format!("t{i}")));
}

/// A stop that comes after a task was delivered but before any worker claimed it: the
/// task is taken back from the inbox and comes back `cancelled`, and `run_all` ends.
/// Before, a stop channel whose sender was gone was ready on every select: the loop
/// spun at a full core, never reached its recheck, and waited for ever on a task no
/// worker held (seen after Ctrl-C in `views_tmux::after_ctrl_c_…`, one run in ten).
#[test]
fn a_stop_after_a_delivery_takes_the_unclaimed_task_back_and_ends() {
    let t = TestRoot::new();
    let slot = Slot(0);
    t.client.create_worker(slot).unwrap();
    // A worker that holds its gate but never claims: the task stays in the inbox.
    let _gate =
        conductor::gate::Gate::acquire(&t.client.worker(slot).worker_gate(), "test").unwrap();
    let (stop_tx, stop) = crossbeam_channel::bounded::<()>(1);
    let orch = Orchestrator::new(t.client.clone(), vec![slot]).with_stop(stop);
    let (done, finished) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let tasks = vec![Task::new("delivered"), Task::new("never delivered")];
        let _ = done.send(orch.run_all(tasks, |_| {}));
    });
    let inbox = t.client.worker(slot).task();
    wait_until(BOUND, "the first task in the inbox", || inbox.exists());
    // As `conductor run`'s interrupt thread does: one message, then the sender goes.
    stop_tx.send(()).unwrap();
    drop(stop_tx);
    let results = finished
        .recv_timeout(BOUND)
        .expect("run_all never ended after the stop")
        .unwrap();
    let outcomes: Vec<Option<Outcome>> = results.iter().map(|r| r.outcome).collect();
    assert_eq!(
        outcomes,
        [Some(Outcome::Cancelled), Some(Outcome::Cancelled)]
    );
    assert!(!inbox.exists(), "the unclaimed task was left in the inbox");
}
