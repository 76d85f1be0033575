//! Usage and rate limits of the real Codex and Gemini CLI deferred, not failed: Codex's
//! reset named to the minute waits for the minute's end; Gemini's 429 waits the delay
//! it suggests, and a limit met again on the rerun is deferred again.

use super::*;

/// The pending entry of queue task `id` once deferred `n` times.
fn deferred_entry(t: &TestRoot, id: &str, n: u32) -> Task {
    let mut entry = None;
    wait_until(BOUND, &format!("{id} deferred {n} time(s)"), || {
        entry = pending_entry(t, id).filter(|e| e.deferrals == Some(n));
        entry.is_some()
    });
    entry.unwrap()
}

fn statuses(server: &ModelServer) -> Vec<u64> {
    server
        .scripted()
        .iter()
        .map(|r| r["status"].as_u64().unwrap())
        .collect()
}

#[test]
fn codex_usage_limit_named_to_the_minute_defers_to_the_minutes_end_then_runs() {
    let Some(agents) = need_agent("codex") else {
        return;
    };
    let t = TestRoot::new();
    let dir = task_dir(&t);
    // What ChatGPT's backend answers a plan out of usage: Codex says "try again at
    // H:MM PM", the minute of the reset, two seconds from now.
    let reset = unix_now() + 2;
    let server = ModelServer::start(
        t.dir.path(),
        json!({"turns": [
            {"error": {"status": 429, "body": {"error": {
                "type": "usage_limit_reached", "message": "The usage limit has been reached",
                "plan_type": "plus", "resets_at": reset, "resets_in_seconds": 2}}}},
            {"text": "done after the reset"},
        ]}),
    );
    let env = codex_env(&t, &agents, &server, 0);
    let w = RealWorker::start(&t, &["--preset", "codex"], &env);
    submit_queued(&t, "cxl1", "codex under a usage limit", &dir);

    let deferred = deferred_entry(&t, "cxl1", 1);
    let not_before = deferred.not_before().unwrap();
    let secs = not_before
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    // The end of the named minute: after the reset, within a minute of it, and on a
    // minute boundary of the local clock.
    assert!(
        secs > reset && secs <= reset + 60,
        "{secs} vs reset {reset}"
    );
    let local = secs as i64 + conductor::preset::local_offset_secs(secs);
    assert_eq!(local.rem_euclid(60), 0, "{deferred:?}");
    assert_eq!(deferred.attempt(), 1, "a deferral is no attempt");
    let limit = fs::read_to_string(t.client.root().agent_limit("codex")).unwrap();
    assert!(limit.contains("usage limit"), "{limit}");

    let r = t
        .client
        .wait_for_task(&TaskId::from("cxl1"), BOUND + Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("no result: {e}\nworker:\n{}", w.stderr()));
    assert!(r.success, "{:?}\n{}", r.error, w.stderr());
    assert_eq!(r.output, "done after the reset");
    assert_eq!(r.attempt, Some(1));
    let started = conductor::protocol::parse_rfc3339(r.started_at.as_deref().unwrap()).unwrap();
    assert!(started >= not_before, "started {:?}", r.started_at);
    assert_eq!(statuses(&server), [429, 200]);
    drop(w);
    assert_nothing_left(t.path());
}

/// What the Gemini API answers a quota met (a 429 with `RetryInfo` naming the delay,
/// and a `retry-after` header, which Gemini CLI 0.61 does not read).
fn gemini_quota_error(seconds: u32) -> Value {
    json!({"status": 429,
           "body": {"error": {
               "code": 429,
               "message": format!("You exceeded your current quota, please check your plan and billing details.\n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 10\nPlease retry in {seconds}.2s."),
               "status": "RESOURCE_EXHAUSTED",
               "details": [
                   {"@type": "type.googleapis.com/google.rpc.QuotaFailure",
                    "violations": [{"quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"}]},
                   {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": format!("{seconds}s")}]}},
           "headers": {"retry-after": seconds.to_string()}})
}

#[test]
fn gemini_429_defers_by_its_retry_delay_and_again_when_met_again() {
    let Some(agents) = need_agent("gemini") else {
        return;
    };
    let t = TestRoot::new();
    let dir = task_dir(&t);
    let server = ModelServer::start(
        t.dir.path(),
        json!({"turns": [
            {"error": gemini_quota_error(2), "times": 2},
            {"text": "done after the quota"},
        ]}),
    );
    // One attempt: Gemini CLI would otherwise wait and retry by itself.
    let env = gemini_env(&t, &agents, &server, 1);
    let w = RealWorker::start(&t, &["--preset", "gemini"], &env);
    submit_queued(&t, "gml1", "gemini under a quota", &dir);

    let first = deferred_entry(&t, "gml1", 1);
    assert_eq!(first.attempt(), 1);
    let limit = fs::read_to_string(t.client.root().agent_limit("gemini")).unwrap();
    assert!(limit.contains("You exceeded your current quota"), "{limit}");
    // Refused again on the rerun: deferred a second time, not failed.
    let second = deferred_entry(&t, "gml1", 2);
    assert!(second.not_before().unwrap() > first.not_before().unwrap());
    assert!(queue_result(&t, "gml1").is_none());

    let r = t
        .client
        .wait_for_task(&TaskId::from("gml1"), BOUND)
        .unwrap_or_else(|e| panic!("no result: {e}\nworker:\n{}", w.stderr()));
    assert!(r.success, "{:?}\n{}", r.error, w.stderr());
    assert_eq!(r.output, "done after the quota");
    assert_eq!(r.attempt, Some(1));
    assert_eq!(statuses(&server), [429, 429, 200]);
    // Each rerun waited the suggested 2 s after the refusal before it.
    let sent = server.scripted();
    for pair in sent.windows(2) {
        let gap = pair[1]["t_start"].as_f64().unwrap() - pair[0]["t_end"].as_f64().unwrap();
        assert!(gap >= 2.0, "rerun {gap:.2} s after the refusal");
    }
    drop(w);
    assert_nothing_left(t.path());
}
