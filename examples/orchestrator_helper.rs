//! The orchestration patterns people write by hand, on three in-process workers:
//! parallel code review, parallel test runs, a sequential pipeline, and
//! decompose-and-execute.
//!
//! `cargo run --example orchestrator_helper [-- AGENT_CMD]` (default `tr a-z A-Z`, so it
//! runs anywhere; pass `"claude -p"` for the real thing).

use conductor::{
    AgentCommand, Client, Orchestrator, Progress, Root, Slot, Task, TaskResult, Worker,
    WorkerOptions,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let agent = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "tr a-z A-Z".to_string());
    let dir = tempfile::tempdir()?;
    let root = Root::new(dir.path().join("root"));
    let project = std::env::current_dir()?;

    let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
    let mut serving = Vec::new();
    let slots: Vec<Slot> = (0..3).map(Slot).collect();
    for &slot in &slots {
        let opts = WorkerOptions::new(
            root.clone(),
            slot,
            project.clone(),
            AgentCommand::parse(&agent)?,
        );
        let mut worker = Worker::start(opts)?;
        let stopped = stopped.clone();
        serving.push(std::thread::spawn(move || worker.run(&stopped)));
    }
    let orch = Orchestrator::new(Client::new(root), slots);
    let show = |p: Progress<'_>| {
        if let Progress::Finished {
            index,
            slot,
            result,
        } = p
        {
            let verdict = result.error.as_deref().unwrap_or("ok");
            eprintln!("  #{index} on worker {slot}: {verdict}");
        }
    };

    println!("== parallel code review");
    let files = [
        "src/worker.rs",
        "src/dirlock.rs",
        "src/client.rs",
        "src/agent.rs",
    ];
    let reviews = orch.run_all(
        files
            .iter()
            .map(|f| Task::new(format!("review {f} for bugs; list each with a line number")))
            .collect(),
        show,
    )?;
    for (f, r) in files.iter().zip(&reviews) {
        println!("{f}: {}", r.output.trim());
    }

    println!("== parallel tests");
    let suites = ["unit", "integration", "doc"];
    let runs = orch.run_all(
        suites
            .iter()
            .map(|s| Task::new(format!("run the {s} tests and summarise failures")))
            .collect(),
        show,
    )?;
    let failed = runs.iter().filter(|r| !r.success).count();
    println!("{} suites, {failed} failed", runs.len());

    println!("== sequential pipeline");
    type Stage = Box<dyn FnOnce(Option<&TaskResult>) -> Task>;
    let stages: Vec<Stage> = vec![
        Box::new(|_| Task::new("design a cache for the status table")),
        Box::new(|design| {
            Task::new(format!(
                "implement this design: {}",
                design.unwrap().output.trim()
            ))
        }),
        Box::new(|code| {
            Task::new(format!(
                "review this change: {}",
                code.unwrap().output.trim()
            ))
        }),
    ];
    let steps = orch.run_pipeline(stages, show)?;
    for (i, s) in steps.iter().enumerate() {
        println!("step {}: {}", i + 1, s.output.trim());
    }
    if steps.iter().all(|s| s.success) {
        println!("pipeline finished: {} steps", steps.len());
    } else {
        println!("pipeline stopped at step {}", steps.len());
    }

    println!("== decompose and execute");
    let plan = orch.run_all(
        vec![Task::new("split the release into subtasks, one per line:\nupdate changelog\nbump version\ntag release")],
        show,
    )?;
    let subtasks: Vec<Task> = plan[0]
        .output
        .lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| Task::new(format!("do this: {}", l.trim())))
        .collect();
    let done = orch.run_all(subtasks, show)?;
    for d in &done {
        println!("- {}", d.output.trim());
    }

    drop(stop); // every worker stops when the sender is gone
    for s in serving {
        s.join().expect("worker thread")?;
    }
    Ok(())
}
