//! Task worktrees (`--worktree`, issue 26) with real git: each test has its own temp
//! repository and root, workers running `tests/agents/edit.sh`, which edits files.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use conductor::{Slot, TaskId};
use serde_json::Value;

use crate::harness::{agent, bin, git, git_repo, wait_until, TestRoot, WorkerProc};

const BOUND: Duration = Duration::from_secs(60);

/// A repository at `<temp>/repo` on branch main with one commit: a.txt, b.txt.
pub(crate) fn repo(t: &TestRoot) -> PathBuf {
    git_repo(t, &[("a.txt", "base\n"), ("b.txt", "bee\n")])
}

pub(crate) fn edit_agent() -> String {
    agent("edit.sh").display().to_string()
}

pub(crate) struct Ran {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

pub(crate) fn conductor(t: &TestRoot, args: &[&str]) -> Ran {
    let out = Command::new(bin("conductor"))
        .args(args)
        .env("CONDUCTOR_HOME", t.path())
        .env_remove("CONDUCTOR_WORKER")
        .env_remove("RUST_LOG")
        .env("GIT_PAGER", "cat")
        .output()
        .expect("run conductor");
    Ran {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[track_caller]
pub(crate) fn conductor_ok(t: &TestRoot, args: &[&str], code: i32) -> Ran {
    let r = conductor(t, args);
    assert_eq!(
        r.code,
        Some(code),
        "conductor {args:?}\nstdout:\n{}\nstderr:\n{}",
        r.stdout,
        r.stderr
    );
    r
}

/// Submit a `--worktree` task in `repo` and return its id.
pub(crate) fn submit(t: &TestRoot, repo: &Path, id: &str, prompt: &str, extra: &[&str]) {
    let mut args = vec![
        "submit",
        "--worktree",
        "--dir",
        repo.to_str().unwrap(),
        "--id",
        id,
    ];
    args.extend(extra);
    args.push(prompt);
    conductor_ok(t, &args, 0);
}

/// Task `id`'s result, waited for (bounded), as JSON.
/// Task `id`'s result, once its slot has let it go too: a result shows a moment before
/// the slot's `running.json` is cleared, and until then `gc` rightly keeps the task's
/// files as in flight (the tests that follow a result with `gc`, `merge` or `discard`
/// would otherwise depend on that moment).
pub(crate) fn result(t: &TestRoot, id: &str) -> Value {
    let r = t
        .client
        .wait_for_task(&TaskId::from(id), BOUND)
        .unwrap_or_else(|e| panic!("task {id}: {e}"));
    let workers = t.path().join("workers");
    wait_until(BOUND, &format!("a slot to let task {id} go"), || {
        std::fs::read_dir(&workers)
            .into_iter()
            .flatten()
            .flatten()
            .all(|slot| {
                std::fs::read_to_string(slot.path().join("running.json"))
                    .map_or(true, |claim| !claim.contains(&format!("\"{id}\"")))
            })
    });
    serde_json::to_value(r).unwrap()
}

pub(crate) fn branches(repo: &Path) -> Vec<String> {
    git(
        repo,
        &[
            "branch",
            "--list",
            "conductor/*",
            "--format=%(refname:short)",
        ],
    )
    .lines()
    .map(str::to_string)
    .collect()
}

fn worktree_count(repo: &Path) -> usize {
    git(repo, &["worktree", "list", "--porcelain"])
        .lines()
        .filter(|l| l.starts_with("worktree "))
        .count()
}

#[test]
fn two_tasks_on_one_file_get_two_branches_and_the_conflicting_merge_leaves_the_repo_as_it_was() {
    let t = TestRoot::new();
    let repo = repo(&t);
    let _w0 = WorkerProc::start(&t, Slot(0), &edit_agent(), &[], &[]);
    let _w1 = WorkerProc::start(&t, Slot(1), &edit_agent(), &[], &[]);
    submit(&t, &repo, "t1", "WRITE a.txt one", &[]);
    submit(&t, &repo, "t2", "WRITE a.txt two", &[]);
    let (r1, r2) = (result(&t, "t1"), result(&t, "t2"));
    for (r, id) in [(&r1, "t1"), (&r2, "t2")] {
        assert_eq!(r["success"], true, "{r:#}");
        let w = &r["worktree"];
        assert_eq!(w["branch"], format!("conductor/{id}"), "{r:#}");
        assert_eq!(w["filesChanged"], 1, "{r:#}");
        assert_eq!(w["insertions"], 1);
        assert_eq!(w["deletions"], 1);
        assert_eq!(w["kept"], true);
        assert_eq!(w["committedForAgent"], true);
        assert_ne!(w["baseCommit"], w["headCommit"]);
        // The agent ran inside the worktree, next to the repository (not under its git
        // dir, where Claude Code refuses to write; not inside its working tree).
        let path = w["path"].as_str().unwrap();
        assert!(r["output"].as_str().unwrap().trim() == path, "{r:#}");
        let sibling = repo
            .parent()
            .unwrap()
            .join("repo.conductor-worktrees")
            .join(id);
        assert_eq!(Path::new(path), sibling, "{r:#}");
        // The worker's commit: the prompt's first line and the id, git's author.
        let msg = git(Path::new(path), &["log", "-1", "--format=%an <%ae>%n%B"]);
        assert!(
            msg.starts_with(&format!(
                "Test Person <test@example.com>\nWRITE a.txt {}",
                if id == "t1" { "one" } else { "two" }
            )),
            "{msg}"
        );
        assert!(msg.contains(&format!("Conductor-Task: {id}")), "{msg}");
    }
    assert_eq!(branches(&repo), ["conductor/t1", "conductor/t2"]);
    // The user's checkout was never touched.
    assert_eq!(
        std::fs::read_to_string(repo.join("a.txt")).unwrap(),
        "base\n"
    );

    // tasks shows the branches and their diffstat.
    let listed = conductor_ok(&t, &["tasks"], 0).stdout;
    assert!(listed.contains("conductor/t1 +1 -1 in 1 file"), "{listed}");
    let json: Value =
        serde_json::from_str(&conductor_ok(&t, &["tasks", "--json"], 0).stdout).unwrap();
    assert!(
        json.to_string().contains("\"branch\":\"conductor/t2\""),
        "{json}"
    );

    let diff = conductor_ok(&t, &["diff", "t1"], 0).stdout;
    assert!(diff.contains("-base") && diff.contains("+one"), "{diff}");
    let stat = conductor_ok(&t, &["diff", "t1", "--stat"], 0).stdout;
    assert!(
        stat.contains("a.txt") && stat.contains("1 file changed"),
        "{stat}"
    );

    conductor_ok(&t, &["merge", "t1"], 0);
    assert_eq!(
        std::fs::read_to_string(repo.join("a.txt")).unwrap(),
        "one\n"
    );
    assert_eq!(branches(&repo), ["conductor/t2"]);
    assert_eq!(
        worktree_count(&repo),
        2,
        "t1's worktree is removed after its merge"
    );

    let head = git(&repo, &["rev-parse", "HEAD"]);
    let conflict = conductor_ok(&t, &["merge", "t2"], 1);
    assert!(
        conflict.stderr.contains("conflicts in a.txt") && conflict.stderr.contains("as it was"),
        "{}",
        conflict.stderr
    );
    assert_eq!(
        git(&repo, &["status", "--porcelain"]),
        "",
        "the repository is clean"
    );
    assert_eq!(
        git(&repo, &["rev-parse", "HEAD"]),
        head,
        "HEAD is unchanged"
    );
    assert_eq!(
        branches(&repo),
        ["conductor/t2"],
        "the branch is kept to resolve by hand"
    );

    // --squash and --rebase meet the same conflict the same way.
    for how in ["--squash", "--rebase"] {
        conductor_ok(&t, &["merge", "t2", how], 1);
        assert_eq!(git(&repo, &["status", "--porcelain"]), "", "{how}");
        assert_eq!(git(&repo, &["rev-parse", "HEAD"]), head, "{how}");
    }

    // Its work is in no other branch: discard asks for --force and changes nothing.
    let refused = conductor_ok(&t, &["discard", "t2"], 3);
    assert!(
        refused.stderr.contains("--force") && refused.stderr.contains("no other branch"),
        "{}",
        refused.stderr
    );
    assert_eq!(branches(&repo), ["conductor/t2"]);
    assert_eq!(worktree_count(&repo), 2, "its worktree is kept too");
    conductor_ok(&t, &["discard", "t2", "--force"], 0);
    assert!(branches(&repo).is_empty());
    assert_eq!(worktree_count(&repo), 1);
    let gone = conductor_ok(&t, &["merge", "t2"], 2);
    assert!(gone.stderr.contains("gone"), "{}", gone.stderr);
}

#[test]
fn merge_all_takes_finished_tasks_in_order_and_squash_and_rebase_work() {
    let t = TestRoot::new();
    let repo = repo(&t);
    let _w = WorkerProc::start(&t, Slot(0), &edit_agent(), &[], &[]);
    submit(&t, &repo, "m1", "WRITE one.txt 1", &[]);
    result(&t, "m1");
    submit(&t, &repo, "m2", "WRITE two.txt 2", &[]);
    result(&t, "m2");
    submit(&t, &repo, "m3", "WRITE three.txt 3", &[]);
    result(&t, "m3");
    submit(&t, &repo, "m4", "APPEND b.txt more", &[]);
    result(&t, "m4");
    conductor_ok(&t, &["merge", "m1", "--squash"], 0);
    conductor_ok(&t, &["merge", "m2", "--rebase"], 0);
    let log = git(&repo, &["log", "--format=%s"]);
    assert!(
        log.lines().count() == 3 && log.starts_with("WRITE two.txt 2"),
        "rebased, fast-forwarded:\n{log}"
    );
    let all = conductor_ok(&t, &["merge", "--all"], 0).stdout;
    assert!(
        all.find("task m3").unwrap() < all.find("task m4").unwrap(),
        "{all}"
    );
    for f in ["one.txt", "two.txt", "three.txt"] {
        assert!(repo.join(f).exists(), "{f}");
    }
    assert_eq!(
        std::fs::read_to_string(repo.join("b.txt")).unwrap(),
        "bee\nmore\n"
    );
    assert!(branches(&repo).is_empty());
    assert_eq!(worktree_count(&repo), 1);
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
}

#[test]
fn a_task_that_changes_nothing_says_so_and_leaves_no_branch() {
    let t = TestRoot::new();
    let repo = repo(&t);
    let _w = WorkerProc::start(&t, Slot(0), &edit_agent(), &[], &[]);
    submit(&t, &repo, "idle", "nothing to do", &[]);
    let r = result(&t, "idle");
    assert_eq!(r["success"], true);
    assert_eq!(r["worktree"]["kept"], false, "{r:#}");
    assert_eq!(r["worktree"]["filesChanged"], 0);
    assert!(
        r["worktree"]["note"]
            .as_str()
            .unwrap()
            .contains("changed nothing"),
        "{r:#}"
    );
    assert!(branches(&repo).is_empty());
    assert_eq!(worktree_count(&repo), 1);
    let d = conductor_ok(&t, &["diff", "idle"], 0).stdout;
    assert!(d.contains("changed nothing"), "{d}");
}

#[test]
fn a_sigkilled_worker_leaves_a_consistent_worktree_that_recovery_commits_and_reports() {
    let t = TestRoot::new();
    let repo = repo(&t);
    let mut w = WorkerProc::start(&t, Slot(0), &edit_agent(), &[], &[]);
    let marker = t.dir.path().join("agent-hangs");
    let prompt = format!(
        "WRITE c.txt partial\nAPPEND a.txt half\nHANG {}",
        marker.display()
    );
    submit(&t, &repo, "k1", &prompt, &[]);
    wait_until(BOUND, "the agent to have edited and hung", || {
        marker.exists()
    });
    w.crash();
    let rec = conductor_ok(&t, &["recover", "0"], 0);
    assert!(
        rec.stdout.contains("k1") || rec.stderr.contains("k1"),
        "{}{}",
        rec.stdout,
        rec.stderr
    );
    let r = result(&t, "k1");
    assert_eq!(r["outcome"], "interrupted", "{r:#}");
    let wt = &r["worktree"];
    assert_eq!(wt["kept"], true, "{r:#}");
    assert_eq!(wt["filesChanged"], 2, "{r:#}");
    let note = wt["note"].as_str().unwrap();
    assert!(
        note.contains("recovery kept the worktree") && note.contains("partial work"),
        "{note}"
    );
    let path = PathBuf::from(wt["path"].as_str().unwrap());
    // Nothing inconsistent: the worktree is registered and clean, its work committed;
    // the user's checkout untouched; nothing for prune to drop.
    assert!(git(&repo, &["worktree", "list"]).contains(path.to_str().unwrap()));
    assert_eq!(git(&path, &["status", "--porcelain"]), "");
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
    let pruned = git(&repo, &["worktree", "prune", "--dry-run", "-v"]);
    assert_eq!(pruned, "", "{pruned}");
    assert_eq!(git(&path, &["show", "HEAD:c.txt"]), "partial\n");
    assert!(!t
        .client
        .root()
        .worker(Slot(0))
        .dir
        .join("worktree.json")
        .exists());
    // The partial work merges like any other.
    conductor_ok(&t, &["merge", "k1"], 0);
    assert_eq!(
        std::fs::read_to_string(repo.join("c.txt")).unwrap(),
        "partial\n"
    );
}

#[test]
fn twenty_parallel_worktree_tasks_on_one_repository_each_get_their_own_branch() {
    let t = TestRoot::new();
    let repo = repo(&t);
    let prompts: Vec<String> = (0..20).map(|i| format!("WRITE f{i}.txt {i}")).collect();
    let mut args = vec![
        "run".to_string(),
        "--worktree".into(),
        "--dir".into(),
        repo.display().to_string(),
        "-n".into(),
        "10".into(),
        "--agent".into(),
        edit_agent(),
        "--json".into(),
    ];
    args.extend(prompts);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = conductor_ok(&t, &args, 0).stdout;
    let doc: Value = serde_json::from_str(&out).unwrap();
    let results = doc["results"].as_array().unwrap();
    assert_eq!(results.len(), 20);
    let mut seen = std::collections::HashSet::new();
    for r in results {
        assert_eq!(r["success"], true, "{r:#}");
        assert_eq!(r["worktree"]["filesChanged"], 1, "{r:#}");
        assert!(seen.insert(r["worktree"]["branch"].as_str().unwrap().to_string()));
    }
    assert_eq!(branches(&repo).len(), 20);
    assert_eq!(worktree_count(&repo), 21);
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
}

#[test]
fn bad_input_is_refused_or_documented() {
    let t = TestRoot::new();
    let repo = repo(&t);
    let r = repo.to_str().unwrap();
    // Not a repository: refused at submit, naming the directory.
    let plain = t.dir.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    let no = conductor_ok(
        &t,
        &[
            "submit",
            "--worktree",
            "--dir",
            plain.to_str().unwrap(),
            "x",
        ],
        2,
    );
    assert!(
        no.stderr.contains("is not in a git repository") && no.stderr.contains("plain"),
        "{}",
        no.stderr
    );
    // A bare repository: refused, saying so.
    let bare = t.dir.path().join("bare.git");
    git(
        t.dir.path(),
        &["clone", "--quiet", "--bare", r, bare.to_str().unwrap()],
    );
    let b = conductor_ok(
        &t,
        &["submit", "--worktree", "--dir", bare.to_str().unwrap(), "x"],
        2,
    );
    assert!(b.stderr.contains("bare git repository"), "{}", b.stderr);
    // --base without --worktree is a usage error.
    conductor_ok(&t, &["submit", "--base", "main", "x"], 2);

    let _w = WorkerProc::start(&t, Slot(0), &edit_agent(), &[], &[]);
    // An existing branch: the task is rejected, the branch untouched.
    git(&repo, &["branch", "conductor/taken"]);
    submit(&t, &repo, "taken", "WRITE a.txt x", &[]);
    let rej = result(&t, "taken");
    assert_eq!(rej["outcome"], "rejected", "{rej:#}");
    assert!(
        rej["error"]
            .as_str()
            .unwrap()
            .contains("branch conductor/taken already exists"),
        "{rej:#}"
    );
    // A base that names nothing.
    submit(
        &t,
        &repo,
        "nobase",
        "WRITE a.txt x",
        &["--base", "no-such-ref"],
    );
    let nb = result(&t, "nobase");
    assert!(
        nb["error"].as_str().unwrap().contains("names no commit"),
        "{nb:#}"
    );

    // A dirty checkout: left out (and said so) unless --include-uncommitted.
    std::fs::write(repo.join("a.txt"), "dirty\n").unwrap();
    submit(&t, &repo, "clean-start", "APPEND b.txt x", &[]);
    let cs = result(&t, "clean-start");
    assert!(
        cs["worktree"]["note"]
            .as_str()
            .unwrap()
            .contains("uncommitted changes"),
        "{cs:#}"
    );
    assert_eq!(
        git(&repo, &["show", "conductor/clean-start:a.txt"]),
        "base\n"
    );
    submit(
        &t,
        &repo,
        "with-dirt",
        "APPEND b.txt x",
        &["--include-uncommitted"],
    );
    let wd = result(&t, "with-dirt");
    assert_eq!(wd["worktree"]["filesChanged"], 2, "{wd:#}");
    assert_eq!(
        git(&repo, &["show", "conductor/with-dirt:a.txt"]),
        "dirty\n"
    );
    // Merging into a dirty checkout is refused (exit 3) before anything is touched.
    let dirty = conductor_ok(&t, &["merge", "clean-start"], 3);
    assert!(
        dirty.stderr.contains("uncommitted changes"),
        "{}",
        dirty.stderr
    );
    git(&repo, &["checkout", "--quiet", "--", "a.txt"]);

    // A detached HEAD: the task branches from its commit; a merge is refused.
    git(&repo, &["checkout", "--quiet", "--detach"]);
    submit(&t, &repo, "detached", "WRITE d.txt d", &[]);
    let dt = result(&t, "detached");
    assert!(
        dt["worktree"]["note"]
            .as_str()
            .unwrap()
            .contains("detached"),
        "{dt:#}"
    );
    let m = conductor_ok(&t, &["merge", "detached"], 3);
    assert!(m.stderr.contains("detached HEAD"), "{}", m.stderr);
    git(&repo, &["checkout", "--quiet", "main"]);

    // Submodules: documented, said in the result.
    std::fs::write(repo.join(".gitmodules"), "").unwrap();
    git(&repo, &["add", ".gitmodules"]);
    git(&repo, &["commit", "--quiet", "-m", "modules"]);
    submit(&t, &repo, "subs", "WRITE e.txt e", &[]);
    let sm = result(&t, "subs");
    assert!(
        sm["worktree"]["note"]
            .as_str()
            .unwrap()
            .contains("submodules"),
        "{sm:#}"
    );

    // A task without a worktree has no branch to merge.
    conductor_ok(&t, &["send", "0", "--id", "plain-task", "nothing"], 0);
    result(&t, "plain-task");
    let nw = conductor_ok(&t, &["merge", "plain-task"], 2);
    assert!(
        nw.stderr.contains("did not run in a worktree"),
        "{}",
        nw.stderr
    );
}

#[test]
fn gc_removes_worktrees_past_their_retention_and_doctor_lists_orphans() {
    let t = TestRoot::new();
    let repo = repo(&t);
    let _w = WorkerProc::start(&t, Slot(0), &edit_agent(), &[], &[]);
    submit(&t, &repo, "g1", "WRITE g.txt g", &[]);
    let r = result(&t, "g1");
    let path = PathBuf::from(r["worktree"]["path"].as_str().unwrap());
    assert!(path.is_dir());
    let doctor = |t: &TestRoot| -> Value {
        let out = conductor(t, &["doctor", "--agent", "cat", "--json"]);
        let v: Value = serde_json::from_str(&out.stdout).unwrap();
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "worktrees")
            .cloned()
            .unwrap_or_else(|| panic!("no worktrees check: {v:#}"))
    };
    assert_eq!(
        doctor(&t)["status"],
        "ok",
        "a kept worktree is accounted for"
    );
    // A worktree no task of this root made, and one whose directory was deleted.
    let stray = repo.join(".git/conductor-worktrees/stray");
    git(
        &repo,
        &[
            "worktree",
            "add",
            "--quiet",
            "-b",
            "conductor/stray",
            stray.to_str().unwrap(),
        ],
    );
    let check = doctor(&t);
    assert_eq!(check["status"], "warn", "{check:#}");
    assert!(
        check["detail"].as_str().unwrap().contains("stray"),
        "{check:#}"
    );
    git(
        &repo,
        &["worktree", "remove", "--force", stray.to_str().unwrap()],
    );
    git(&repo, &["branch", "-D", "conductor/stray"]);
    assert_eq!(doctor(&t)["status"], "ok");

    // Within its retention gc keeps it; past it (0 s here) the worktree goes, the
    // branch stays, and the task still merges.
    let plan = conductor_ok(&t, &["gc", "--older-than", "1h"], 0).stdout;
    assert!(!plan.contains("task worktree"), "{plan}");
    std::fs::write(
        t.path().join("config.json"),
        r#"{"worktreeRetentionSecs": 0}"#,
    )
    .unwrap();
    let gc = conductor_ok(&t, &["gc", "--older-than", "1h", "--apply"], 0).stdout;
    assert!(
        gc.contains("task worktree") || gc.contains("removed 1"),
        "{gc}"
    );
    assert!(!path.exists());
    assert_eq!(worktree_count(&repo), 1);
    assert_eq!(branches(&repo), ["conductor/g1"]);
    conductor_ok(&t, &["merge", "g1"], 0);
    assert_eq!(std::fs::read_to_string(repo.join("g.txt")).unwrap(), "g\n");
}

/// Worktrees where the earlier version made them, `<git dir>/conductor-worktrees/<id>`
/// (made here the same way: `worktreeDir` set to that folder, then unset so the new
/// default is in force), keep working: recovery commits a dead worker's partial work
/// there, `discard`, `gc` and `merge` find them by their recorded paths, and `doctor`
/// knows the old folder and the new one by name. New tasks go next to the repository.
#[test]
fn worktrees_in_the_old_place_under_the_git_dir_are_still_recovered_discarded_and_collected() {
    let t = TestRoot::new();
    let repo = repo(&t);
    let old = repo.join(".git/conductor-worktrees");
    let config = t.path().join("config.json");
    std::fs::write(
        &config,
        serde_json::json!({ "worktreeDir": old }).to_string(),
    )
    .unwrap();
    let mut w = WorkerProc::start(&t, Slot(0), &edit_agent(), &[], &[]);
    for (id, prompt) in [("o1", "WRITE o.txt o"), ("o2", "WRITE p.txt p")] {
        let r = send_worktree_task(&t, &repo, id, prompt);
        assert_eq!(
            Path::new(r["worktree"]["path"].as_str().unwrap()),
            old.join(id)
        );
    }
    let marker = t.dir.path().join("agent-hangs");
    let prompt = format!("WRITE c.txt partial\nHANG {}", marker.display());
    let mut hung = conductor::Task::new(prompt).with_id("o3");
    hung.dir = Some(repo.clone());
    hung.worktree = Some(true);
    t.client.write_task(Slot(0), &hung).unwrap();
    wait_until(BOUND, "the agent to have edited and hung", || {
        marker.exists()
    });
    w.crash();
    // The new version from here on: the default place is next to the repository.
    std::fs::remove_file(&config).unwrap();

    conductor_ok(&t, &["recover", "0"], 0);
    let r = t
        .client
        .wait_for_result(Slot(0), &TaskId::from("o3"), BOUND)
        .unwrap();
    let wt = r.worktree.expect("o3's worktree");
    assert_eq!(wt.path, old.join("o3"));
    assert!(wt.kept && wt.files_changed == 1, "{wt:?}");
    assert_eq!(git(&wt.path, &["show", "HEAD:c.txt"]), "partial\n");

    conductor_ok(&t, &["discard", "o1", "--force"], 0);
    assert!(!old.join("o1").exists());
    assert_eq!(branches(&repo), ["conductor/o2", "conductor/o3"]);

    // doctor: every worktree left is accounted for; strays in either folder, on a branch
    // that is no task's, are known by the folder's name.
    let doctor = |t: &TestRoot| -> Value {
        let out = conductor(t, &["doctor", "--agent", "cat", "--json"]);
        let v: Value = serde_json::from_str(&out.stdout).unwrap();
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "worktrees")
            .cloned()
            .unwrap()
    };
    assert_eq!(doctor(&t)["status"], "ok", "{:#}", doctor(&t));
    let new = repo.parent().unwrap().join("repo.conductor-worktrees");
    for (dir, branch) in [
        (old.join("stray-old"), "side-a"),
        (new.join("stray-new"), "side-b"),
    ] {
        git(
            &repo,
            &[
                "worktree",
                "add",
                "--quiet",
                "-b",
                branch,
                dir.to_str().unwrap(),
            ],
        );
    }
    let check = doctor(&t);
    let detail = check["detail"].as_str().unwrap();
    assert!(
        detail.contains("stray-old") && detail.contains("stray-new"),
        "{check:#}"
    );
    for dir in [old.join("stray-old"), new.join("stray-new")] {
        git(
            &repo,
            &["worktree", "remove", "--force", dir.to_str().unwrap()],
        );
    }

    // gc past the retention takes the old-place worktree; its branch stays and merges.
    std::fs::write(&config, r#"{"worktreeRetentionSecs": 0}"#).unwrap();
    conductor_ok(&t, &["gc", "--older-than", "1h", "--apply"], 0);
    assert!(!old.join("o2").exists());
    conductor_ok(&t, &["merge", "o2"], 0);
    conductor_ok(&t, &["merge", "o3"], 0);
    assert_eq!(std::fs::read_to_string(repo.join("p.txt")).unwrap(), "p\n");
    assert_eq!(
        std::fs::read_to_string(repo.join("c.txt")).unwrap(),
        "partial\n"
    );

    // A new task goes next to the repository.
    let _w = WorkerProc::start(&t, Slot(0), &edit_agent(), &[], &[]);
    let r = send_worktree_task(&t, &repo, "n1", "WRITE n.txt n");
    assert_eq!(
        Path::new(r["worktree"]["path"].as_str().unwrap()),
        new.join("n1")
    );
    assert_eq!(worktree_count(&repo), 2);

    // An attempt the earlier version started there (its worktree and a commit of partial
    // work, as a crash left them) goes on in it, not in a fresh one.
    let earlier = old.join("r1");
    git(
        &repo,
        &[
            "worktree",
            "add",
            "--quiet",
            "-b",
            "conductor/r1",
            earlier.to_str().unwrap(),
        ],
    );
    std::fs::write(earlier.join("first.txt"), "first\n").unwrap();
    git(&earlier, &["add", "."]);
    git(&earlier, &["commit", "--quiet", "-m", "partial"]);
    let r = send_worktree_task(&t, &repo, "r1", "WRITE second.txt second");
    let w = &r["worktree"];
    assert_eq!(Path::new(w["path"].as_str().unwrap()), earlier, "{r:#}");
    assert!(
        w["note"]
            .as_str()
            .unwrap()
            .contains("continues the worktree"),
        "{r:#}"
    );
    assert_eq!(w["filesChanged"], 2, "{r:#}");
}

/// The default folder next to the repository cannot be made (here a file is in its way;
/// a read-only parent does the same): the task is rejected saying so and naming
/// `worktreeDir`, and nothing is left behind.
#[test]
fn a_worktree_folder_that_cannot_be_made_rejects_the_task_naming_worktree_dir() {
    let t = TestRoot::new();
    let repo = repo(&t);
    let in_the_way = repo.parent().unwrap().join("repo.conductor-worktrees");
    std::fs::write(&in_the_way, "not a folder\n").unwrap();
    let _w = WorkerProc::start(&t, Slot(0), &edit_agent(), &[], &[]);
    let mut task = conductor::Task::new("WRITE b.txt b").with_id("ro1");
    task.dir = Some(repo.clone());
    task.worktree = Some(true);
    t.client.write_task(Slot(0), &task).unwrap();
    let r = t
        .client
        .wait_for_result(Slot(0), &TaskId::from("ro1"), BOUND)
        .unwrap();
    let why = r.error.unwrap_or_default();
    assert!(
        why.starts_with("rejected: cannot make the folder for task worktrees")
            && why.contains("repo.conductor-worktrees")
            && why.contains("\"worktreeDir\" in the root's config.json"),
        "{why}"
    );
    assert!(branches(&repo).is_empty());
    assert_eq!(worktree_count(&repo), 1);
}

/// A `--worktree` task sent to slot 0 (not the queue: a slot's results are what gc
/// collects), running in `repo`.
fn send_worktree_task(t: &TestRoot, repo: &Path, id: &str, prompt: &str) -> Value {
    let mut task = conductor::Task::new(prompt).with_id(id);
    task.dir = Some(repo.to_path_buf());
    task.worktree = Some(true);
    t.client.write_task(Slot(0), &task).unwrap();
    let r = t
        .client
        .wait_for_result(Slot(0), &TaskId::from(id), BOUND)
        .unwrap_or_else(|e| panic!("task {id}: {e}"));
    assert!(r.success, "{r:?}");
    serde_json::to_value(r).unwrap()
}

#[test]
fn gc_keeps_an_unmerged_tasks_result_so_diff_and_merge_still_work() {
    let t = TestRoot::new();
    let repo = repo(&t);
    let _w = WorkerProc::start(&t, Slot(0), &edit_agent(), &[], &[]);
    let kept = send_worktree_task(&t, &repo, "u1", "WRITE u.txt kept");
    send_worktree_task(&t, &repo, "u2", "WRITE v.txt thrown");
    send_worktree_task(&t, &repo, "u3", "WRITE w.txt merged");
    // Seen: `tasks --json` and `status --json` (what MCP `tasks`/`status` return) carry
    // each task's branch and diffstat; `tasks` shows them in a column.
    let listed: Value =
        serde_json::from_str(&conductor_ok(&t, &["tasks", "--json"], 0).stdout).unwrap();
    let u1 = listed["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"] == "u1")
        .unwrap();
    assert_eq!(u1["worktree"]["branch"], "conductor/u1", "{listed:#}");
    assert_eq!(u1["worktree"]["filesChanged"], 1, "{listed:#}");
    let status: Value =
        serde_json::from_str(&conductor_ok(&t, &["status", "--json"], 0).stdout).unwrap();
    assert_eq!(
        status["workers"][0]["worktree"]["branch"], "conductor/u3",
        "the slot's last task: {status:#}"
    );
    let table = conductor_ok(&t, &["tasks"], 0).stdout;
    assert!(table.contains("conductor/u1 +1 -0 in 1 file"), "{table}");

    conductor_ok(&t, &["discard", "u2", "--force"], 0);
    conductor_ok(&t, &["merge", "u3"], 0);
    let path = PathBuf::from(kept["worktree"]["path"].as_str().unwrap());
    let results = t.path().join("workers/0/results");
    assert!(results.join("u1.json").exists());

    // Old results go, but not u1's: its branch is neither merged nor discarded.
    let gc = conductor_ok(&t, &["gc", "--older-than", "0s", "--apply"], 0).stdout;
    assert!(!results.join("u2.json").exists(), "{gc}");
    assert!(!results.join("u3.json").exists(), "{gc}");
    assert!(results.join("u1.json").exists(), "{gc}");
    assert!(
        t.path().join("workers/0/tasks/u1.json").exists(),
        "its record stays too"
    );
    assert!(
        gc.contains("u1 (conductor/u1 in ") && gc.contains("neither merged nor discarded"),
        "{gc}"
    );
    assert!(path.is_dir(), "within its retention the worktree stays");
    let diff = conductor_ok(&t, &["diff", "u1", "--stat"], 0).stdout;
    assert!(diff.contains("u.txt"), "{diff}");

    // Past the retention the worktree goes; the branch and the result stay.
    std::fs::write(
        t.path().join("config.json"),
        r#"{"worktreeRetentionSecs": 0}"#,
    )
    .unwrap();
    let json = conductor_ok(&t, &["gc", "--older-than", "0s", "--json"], 0).stdout;
    let plan: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(plan["unmerged"][0]["id"], "u1", "{plan:#}");
    assert_eq!(plan["unmerged"][0]["worktree"], false, "{plan:#}");
    conductor_ok(&t, &["gc", "--older-than", "0s", "--apply"], 0);
    assert!(!path.exists());
    assert_eq!(worktree_count(&repo), 1);
    assert_eq!(branches(&repo), ["conductor/u1"]);
    assert!(results.join("u1.json").exists());
    let diff = conductor_ok(&t, &["diff", "u1", "--stat"], 0).stdout;
    assert!(diff.contains("u.txt"), "{diff}");

    // doctor: a conductor/ branch no result accounts for is an orphan; u1's is not.
    let doctor = |t: &TestRoot| -> Value {
        let out = conductor(t, &["doctor", "--agent", "cat", "--json"]);
        let v: Value = serde_json::from_str(&out.stdout).unwrap();
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "worktrees")
            .cloned()
            .unwrap()
    };
    assert_eq!(doctor(&t)["status"], "ok", "{:#}", doctor(&t));
    git(&repo, &["branch", "conductor/lost", "HEAD"]);
    git(&repo, &["branch", "conductor/worker-1", "HEAD"]);
    let check = doctor(&t);
    assert_eq!(check["status"], "warn", "{check:#}");
    let detail = check["detail"].as_str().unwrap();
    assert!(detail.contains("branch conductor/lost of "), "{check:#}");
    assert!(!detail.contains("conductor/u1"), "{check:#}");
    assert!(
        !detail.contains("worker-1"),
        "launch's branches are not tasks': {check:#}"
    );
    git(&repo, &["branch", "-D", "conductor/lost"]);

    // Merged, it is an old result like any other.
    conductor_ok(&t, &["merge", "u1"], 0);
    assert_eq!(
        std::fs::read_to_string(repo.join("u.txt")).unwrap(),
        "kept\n"
    );
    conductor_ok(&t, &["gc", "--older-than", "0s", "--apply"], 0);
    assert!(!results.join("u1.json").exists());
}

/// Median and p99 of `xs` (sorted in place).
fn median_p99(xs: &mut [f64]) -> (f64, f64) {
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let p = |q: f64| xs[((xs.len() as f64 - 1.0) * q).round() as usize];
    (p(0.5), p(0.99))
}

/// What a worktree adds to a task's start (claim → agent started, as the worker logs
/// it) and to its whole run (`durationMs`: the worktree made, the agent run, the
/// leftovers committed and the unchanged branch removed), on a repository of 10,000
/// files. `cargo test --release --test integration worktree_start_cost -- --ignored --nocapture`
#[test]
#[ignore]
fn worktree_start_cost_on_a_ten_thousand_file_repository() {
    let t = TestRoot::new();
    let repo = repo(&t);
    for d in 0..100 {
        let dir = repo.join(format!("src/d{d}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..100 {
            std::fs::write(
                dir.join(format!("f{f}.rs")),
                format!("// {d} {f}\nfn f() {{}}\n"),
            )
            .unwrap();
        }
    }
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "--quiet", "-m", "10k files"]);
    let files = git(&repo, &["ls-files"]).lines().count();
    let w = WorkerProc::start(&t, Slot(0), &edit_agent(), &[], &[]);
    let runs = 40;
    let mut report = Vec::new();
    for (label, worktree, prompt) in [
        ("plain", false, "nothing"),
        ("worktree, no change", true, "nothing"),
        ("worktree, one file changed", true, "WRITE x.txt x"),
    ] {
        let before = w.stderr().matches("us after claim").count();
        let mut durations = Vec::new();
        for i in 0..runs {
            let id = format!("{}-{i}", label.replace([' ', ','], ""));
            let mut task = conductor::Task::new(prompt).with_id(id.as_str());
            task.dir = Some(repo.clone());
            if worktree {
                task.worktree = Some(true);
            }
            t.client.write_task(Slot(0), &task).unwrap();
            let r = t
                .client
                .wait_for_result(Slot(0), &TaskId::from(id.as_str()), BOUND)
                .unwrap();
            assert!(r.success, "{r:?}");
            durations.push(r.duration_ms.unwrap() as f64);
            if let Some(w) = r.worktree.filter(|w| w.kept) {
                // Keep the disk small: each worktree holds 10,000 files.
                Command::new("git")
                    .arg("-C")
                    .arg(&repo)
                    .args(["worktree", "remove", "--force"])
                    .arg(&w.path)
                    .status()
                    .unwrap();
            }
        }
        let log = w.stderr();
        let mut starts: Vec<f64> = log
            .split("us after claim")
            .skip(before)
            .take(runs)
            .filter_map(|chunk| chunk.rsplit(' ').next()?.parse::<f64>().ok())
            .map(|us| us / 1000.0)
            .collect();
        assert_eq!(starts.len(), runs, "start times in the worker's log");
        let (sm, sp) = median_p99(&mut starts);
        let (dm, dp) = median_p99(&mut durations);
        report.push(format!(
            "{label:>28}: start median {sm:.1} ms, p99 {sp:.1} ms · whole task median {dm:.0} ms, p99 {dp:.0} ms"
        ));
    }
    println!("\n{files} files, {runs} tasks each, one worker, tasks one after another:");
    for line in report {
        println!("{line}");
    }
}
