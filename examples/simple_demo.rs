//! Three tasks fanned out over three workers, results printed in order.
//!
//! `cargo run --example simple_demo [-- AGENT_CMD]` (default agent: `tr a-z A-Z`).
//! Workers run in-process on a private temporary root.

use std::time::Duration;

use conductor::{AgentCommand, Client, Root, Slot, Task, Worker, WorkerOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let agent = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "tr a-z A-Z".to_string());
    let dir = tempfile::tempdir()?;
    let root = Root::new(dir.path().join("root"));
    let client = Client::new(root.clone());

    let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
    let mut serving = Vec::new();
    for i in 0..3 {
        let opts = WorkerOptions::new(
            root.clone(),
            Slot(i),
            dir.path().into(),
            AgentCommand::parse(&agent)?,
        );
        let mut worker = Worker::start(opts)?;
        println!("{}", worker.describe());
        let stopped = stopped.clone();
        serving.push(std::thread::spawn(move || worker.run(&stopped)));
    }

    let prompts = [
        "write a haiku about files",
        "review this diff",
        "summarise the logs",
    ];
    let ids = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| client.write_task(Slot(i as u32), &Task::new(*p)))
        .collect::<Result<Vec<_>, _>>()?;
    for (i, id) in ids.iter().enumerate() {
        let r = client.wait_for_result(Slot(i as u32), id, Duration::from_secs(60))?;
        match r.error {
            None => println!("worker {i}, task {id}: {}", r.output.trim_end()),
            Some(e) => println!("worker {i}, task {id} failed: {e}"),
        }
    }

    drop(stop); // a dropped sender tells every worker to stop
    for s in serving {
        s.join().expect("worker thread")?;
    }
    Ok(())
}
