//! What one `submit --batch` process asks of the kernel a task (issue 39.3), counted from
//! outside with `strace -ff` (see `benches/census`; `cargo bench --bench versus --
//! --syscalls-batch` prints the same with more tasks).

use conductor::Slot;

use crate::harness::{bin, TestRoot, WorkerProc};
// One copy of the census in the test binary: `lean_path` loads it.
use crate::lean_path::census;
use crate::prereq::{self, require};

/// A batch submitter shares the cores with the workers running its tasks: what does not
/// depend on the task (the root's trust check, `config.json`, the queue's directories,
/// whether a worker serves) is done once a batch. Before, a task cost 58 calls and 9
/// opens (one failing) in the submitter; now 24 and 6 (BENCHMARKS.md, "The batch
/// submitter's own calls"). The bounds leave room for a line's share of what a batch
/// does once; the checks once a line again (~17 `statx`, a look at every slot) break
/// them.
#[test]
fn a_batch_submitter_checks_the_root_once_not_once_a_task() {
    require!(prereq::strace());
    let t = TestRoot::new();
    let _workers: Vec<WorkerProc> = (0..2)
        .map(|i| WorkerProc::start(&t, Slot(i), "cat", &[], &[]))
        .collect();
    let conductor = bin("conductor");
    let work = t.dir.path().join("census");
    let few = census::census_of_batch(&conductor, &work, t.path(), 4);
    let many = census::census_of_batch(&conductor, &work, t.path(), 24);
    let per = many.per_task(&few, 20);
    println!("{per}");
    assert!(per.calls <= 30.0, "{per}\ncalls a task: at most 30");
    assert!(per.openat <= 7.0, "{per}\nopenat a task: at most 7");
    assert!(
        per.failed_openat <= 0.1,
        "{per}\nfailing openat a task: none (config.json is read once)"
    );
}
