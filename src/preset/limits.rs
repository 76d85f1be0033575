//! Usage and rate limits: reading when an agent's limit lifts out of what it printed.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::kind::Preset;
use crate::text::first_line;
use crate::protocol::TaskResult;

/// At most this many deferrals of one task: a limit met again after the fifth ends the
/// task `failure` with the agent's words (a provider that keeps refusing past its own
/// resets is not going to be waited out).
pub const MAX_DEFERRALS: u32 = 5;

/// The wait when the provider refuses for a limit but names no time (Gemini CLI's own
/// guess for a per-minute quota; Codex's bare "429 Too Many Requests").
pub const UNSTATED_WAIT: Duration = Duration::from_secs(60);

/// The wait when the named reset has already passed and the provider still refuses:
/// its clock and ours differ, or the reset moved.
pub const STILL_LIMITED_WAIT: Duration = Duration::from_secs(30);

/// The agent's account hit a usage or rate limit that lifts at a known time.
#[derive(Debug, Clone, PartialEq)]
pub struct RateLimit {
    /// When the limit resets (the agent's own reset time; the end of the minute it
    /// names when it names only a minute).
    pub until: SystemTime,
    /// The agent's words, one line ("You've hit your session limit · resets 10:43pm").
    pub message: String,
}

impl RateLimit {
    /// When a task already deferred `deferrals` times runs again, or `None` when it has
    /// been deferred [`MAX_DEFERRALS`] times: the reset, or [`STILL_LIMITED_WAIT`] from
    /// `now` when the reset is not ahead (the provider still says "limited").
    pub fn next_run(&self, deferrals: u32, now: SystemTime) -> Option<SystemTime> {
        if deferrals >= MAX_DEFERRALS {
            return None;
        }
        Some(if self.until > now {
            self.until
        } else {
            now + STILL_LIMITED_WAIT
        })
    }

    /// A limit met again after [`MAX_DEFERRALS`] deferrals fails the task: its error says
    /// conductor stopped waiting (a task deferred fewer times is left as it is).
    pub fn note_gave_up(&self, result: &mut TaskResult, deferrals: u32) {
        if deferrals >= MAX_DEFERRALS {
            let why = result.error.take().unwrap_or_else(|| self.message.clone());
            result.error = Some(format!(
                "{why} (still limited after {MAX_DEFERRALS} deferrals: conductor stopped waiting)"
            ));
        }
    }
}

impl Preset {
    /// Whether a failed run was refused by a usage or rate limit, and until when.
    ///
    /// `output` is what the worker hands to [`Preset::interpret`] (before it), and
    /// `limit_event` the last `rate_limit_event` line of a claude stream. Claude Code
    /// (on a subscription) ends with an error `result` whose `api_error` is
    /// `usage_limit_reached` (HTTP 429) and text "You've hit your 5-hour limit · resets
    /// 12:02am (UTC)"; the exact reset is the `resetsAt` (Unix seconds) of the
    /// `rate_limit_event` before it (`"status":"rejected"`). Codex says "You've hit
    /// your usage limit. … try again at 12:04 AM." (local time, to the minute; "Nov
    /// 30th, 2026 8:49 PM" on another day) in its `turn.failed`, or "exceeded retry
    /// limit, last status: 429 Too Many Requests". Gemini CLI ends with an error
    /// `result` whose message it ends with "Please wait and try again later" on a 429,
    /// with "Suggested retry after 3s." or "Please retry in 3.5s." when the API's
    /// `RetryInfo` named a delay (it reads no `retry-after` header).
    pub fn rate_limit(self, output: &str, limit_event: Option<&[u8]>) -> Option<RateLimit> {
        self.rate_limit_at(output, limit_event, SystemTime::now())
    }

    /// [`Preset::rate_limit`] as read at `now` (relative resets count from it).
    pub fn rate_limit_at(
        self,
        output: &str,
        limit_event: Option<&[u8]>,
        now: SystemTime,
    ) -> Option<RateLimit> {
        match self {
            Preset::Claude => claude_rate_limit(output, limit_event, now),
            Preset::Codex => codex_rate_limit(output, now),
            Preset::Gemini => gemini_rate_limit(output, now),
            Preset::Command => None,
        }
    }
}

/// Claude's limit: a subscription's usage limit with its exact reset, or a 429 it gave
/// up retrying (an API key's rate limit: Claude Code honours `retry-after` itself and
/// says no time when it gives up) waited [`UNSTATED_WAIT`].
fn claude_rate_limit(
    output: &str,
    limit_event: Option<&[u8]>,
    now: SystemTime,
) -> Option<RateLimit> {
    let Ok(Value::Object(result)) = serde_json::from_str::<Value>(output.trim()) else {
        return None;
    };
    let is_error = result.get("is_error").and_then(Value::as_bool) == Some(true);
    let limited = result.get("api_error").and_then(Value::as_str) == Some("usage_limit_reached")
        || result.get("api_error_status").and_then(Value::as_u64) == Some(429);
    if !is_error || !limited {
        return None;
    }
    let resets = limit_event
        .and_then(|l| serde_json::from_slice::<Value>(l).ok())
        .and_then(|e| e.get("rate_limit_info").cloned())
        .filter(|info| info.get("status").and_then(Value::as_str) == Some("rejected"))
        .and_then(|info| info.get("resetsAt").and_then(Value::as_u64));
    let message = result
        .get("result")
        .and_then(Value::as_str)
        .map(first_line)
        .unwrap_or("usage limit reached")
        .to_string();
    let until = match resets {
        Some(secs) => UNIX_EPOCH + Duration::from_secs(secs),
        None => now + UNSTATED_WAIT,
    };
    Some(RateLimit { until, message })
}

/// Codex's limit from its last `turn.failed` (or `error`) event: a usage limit with its
/// "try again at H:MM AM" read as the end of that local minute, or a 429 it gave up
/// retrying ("try again in 3s" when it says so, else [`UNSTATED_WAIT`]).
fn codex_rate_limit(output: &str, now: SystemTime) -> Option<RateLimit> {
    // Only the last failure counts: an earlier retry's 429 that Codex got past is none.
    let last = output.lines().rev().find_map(|l| {
        let e: Value = serde_json::from_str(l).ok()?;
        let msg = match e.get("type").and_then(Value::as_str)? {
            "turn.failed" => e.get("error")?.get("message")?.as_str()?,
            "error" => e.get("message")?.as_str()?,
            _ => return None,
        };
        Some(first_line(msg).to_string())
    })?;
    let message = Some(last).filter(|m| m.contains("usage limit") || names_status_429(m))?;
    let until = if let Some(at) = message.split("try again at ").nth(1) {
        named_minute_end(at, now)?
    } else {
        now + message
            .split("try again in ")
            .nth(1)
            .and_then(delay)
            .unwrap_or(UNSTATED_WAIT)
    };
    Some(RateLimit { until, message })
}

/// Whether `message` names HTTP status 429 as a number of its own: "status: 429",
/// "(429)", "429 Too Many Requests" — not the digits inside a port or a URL
/// ("http://127.0.0.1:42901/…"), which once turned a 503 into a deferral.
fn names_status_429(message: &str) -> bool {
    let text = message.split(" url: ").next().unwrap_or(message);
    text.match_indices("429").any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + 3..].chars().next();
        !before.is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, ':' | '.' | '/'))
            && !after.is_some_and(|c| c.is_ascii_alphanumeric())
    })
}

/// Gemini CLI's 429 from its error `result`: the delay it suggests, else
/// [`UNSTATED_WAIT`]. Its daily quota ("exhausted your daily quota") names no reset and
/// is not waited for.
fn gemini_rate_limit(output: &str, now: SystemTime) -> Option<RateLimit> {
    let msg = output.lines().rev().find_map(|l| {
        let e: Value = serde_json::from_str(l).ok()?;
        if e.get("type")?.as_str()? != "result" || e.get("status")?.as_str()? != "error" {
            return None;
        }
        Some(e.get("error")?.get("message")?.as_str()?.to_string())
    })?;
    if !msg.contains("Please wait and try again later") || msg.contains("daily quota") {
        return None;
    }
    let wait = ["Suggested retry after ", "Please retry in "]
        .iter()
        .find_map(|p| msg.split(p).nth(1).and_then(delay))
        .unwrap_or(UNSTATED_WAIT);
    let message = first_line(msg.trim_start_matches("[API Error: ")).to_string();
    Some(RateLimit {
        until: now + wait,
        message,
    })
}

/// "3s", "3.5s.", "500ms", "2 seconds" at the start of `text` → that long (rounded up
/// to a millisecond).
fn delay(text: &str) -> Option<Duration> {
    let text = text.trim_start();
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let n: f64 = text[..end].parse().ok()?;
    let unit = text[end..].trim_start();
    let ms = if unit.starts_with("ms") {
        n
    } else if unit.starts_with('s') {
        n * 1000.0
    } else {
        return None;
    };
    (0.0..1e12)
        .contains(&ms)
        .then(|| Duration::from_millis(ms.ceil() as u64))
}

/// Codex's "8:49 PM." (`%-I:%M %p`, the local day nearest `now`) or "Nov 30th, 2026
/// 8:49 PM" (`%b %-d<th>, %Y %-I:%M %p`) → the end of that local minute: the reset is
/// somewhere in it, so the minute's start would run the task before it.
pub(crate) fn named_minute_end(text: &str, now: SystemTime) -> Option<SystemTime> {
    let words: Vec<&str> = text.split_whitespace().take(5).collect();
    let (day, at) = if words.first()?.contains(':') {
        (None, 0)
    } else {
        (Some(civil_day(words.get(..3)?)?), 3)
    };
    let (h, m) = words.get(at)?.split_once(':')?;
    let (mut h, m): (i64, i64) = (
        h.parse().ok()?,
        m.trim_end_matches(['.', ',']).parse().ok()?,
    );
    match words
        .get(at + 1)
        .map(|w| w.trim_end_matches(['.', ',']).to_ascii_uppercase())
        .as_deref()
    {
        Some("AM") if h == 12 => h = 0,
        Some("PM") if h < 12 => h += 12,
        _ => {}
    }
    if !(0..24).contains(&h) || !(0..60).contains(&m) {
        return None;
    }
    let end_of_minute = h * 3600 + m * 60 + 60;
    let now_secs = now.duration_since(UNIX_EPOCH).ok()?.as_secs();
    let offset = local_offset_secs(now_secs);
    let local_end = match day {
        Some(day) => day * 86_400 + end_of_minute,
        None => {
            // A bare time is on Codex's day, which may have turned since: the nearest.
            let local_now = now_secs as i64 + offset;
            let today = local_now - local_now.rem_euclid(86_400) + end_of_minute;
            [today - 86_400, today, today + 86_400]
                .into_iter()
                .min_by_key(|t| (t - local_now).abs())?
        }
    };
    let offset = local_offset_secs(u64::try_from(local_end - offset).ok()?);
    let utc = u64::try_from(local_end - offset).ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(utc))
}

/// ["Nov", "30th,", "2026"] → days since 1970-01-01.
fn civil_day(words: &[&str]) -> Option<i64> {
    const MONTHS: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    let month = words[0].get(..3)?.to_ascii_lowercase();
    let m = MONTHS.iter().position(|x| *x == month)? as i64 + 1;
    let d: i64 = words[1]
        .trim_end_matches(',')
        .trim_end_matches(|c: char| c.is_ascii_alphabetic())
        .parse()
        .ok()?;
    let y: i64 = words[2].trim_end_matches(['.', ',']).parse().ok()?;
    if !(1..=31).contains(&d) {
        return None;
    }
    // Howard Hinnant's days_from_civil.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Some(era * 146_097 + doe - 719_468)
}

/// Seconds east of UTC of the local time zone at `secs` (0 when unknown).
pub fn local_offset_secs(secs: u64) -> i64 {
    let t = secs as nix::libc::time_t;
    // SAFETY: localtime_r only writes into `tm`, which we own.
    unsafe {
        let mut tm: nix::libc::tm = std::mem::zeroed();
        if nix::libc::localtime_r(&t, &mut tm).is_null() {
            return 0;
        }
        tm.tm_gmtoff
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    /// Seconds into the local day.
    fn local(t: SystemTime) -> i64 {
        let s = t.duration_since(UNIX_EPOCH).unwrap().as_secs();
        (s as i64 + local_offset_secs(s)).rem_euclid(86_400)
    }

    /// A moment whose local time of day is `h:m:s`, near 2026-11-28.
    fn local_at(h: u64, m: u64, s: u64) -> SystemTime {
        let base = 1_795_651_000;
        let into = local(at(base)) as u64;
        at(base - into + h * 3600 + m * 60 + s)
    }

    fn codex_limit(message: &str) -> String {
        format!(
            "{}\n{}",
            r#"{"type":"thread.started","thread_id":"t"}"#,
            json_line("turn.failed", message)
        )
    }

    fn json_line(kind: &str, message: &str) -> String {
        serde_json::json!({"type": kind, "error": {"message": message}}).to_string()
    }

    #[test]
    fn a_claude_usage_limit_is_read_with_its_exact_reset() {
        let result = r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":429,"api_error":"usage_limit_reached","result":"You've hit your 5-hour limit · resets 12:02am (UTC)"}"#;
        let event = br#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1795651327,"rateLimitType":"five_hour"}}"#;
        let limit = Preset::Claude.rate_limit(result, Some(event)).unwrap();
        assert_eq!(limit.until, at(1795651327));
        assert_eq!(
            limit.message,
            "You've hit your 5-hour limit · resets 12:02am (UTC)"
        );
        // No reset known (an API key's 429 Claude Code gave up retrying): the default
        // wait; no limit at all: not a deferral.
        let now = at(1_795_651_000);
        let bare = r#"{"type":"result","is_error":true,"api_error_status":429,"api_error_type":"rate_limit_error","result":"API Error: Request rejected (429) · per-minute rate limit"}"#;
        let limit = Preset::Claude.rate_limit_at(bare, None, now).unwrap();
        assert_eq!(limit.until, now + UNSTATED_WAIT);
        assert_eq!(
            limit.message,
            "API Error: Request rejected (429) · per-minute rate limit"
        );
        let overloaded = result
            .replace("429", "529")
            .replace("usage_limit_reached", "x");
        assert_eq!(Preset::Claude.rate_limit(&overloaded, Some(event)), None);
        assert_eq!(Preset::Command.rate_limit(result, Some(event)), None);
    }

    #[test]
    fn a_codex_usage_limit_lifts_at_the_end_of_the_minute_it_names() {
        // "try again at 8:49 PM" for a reset at 20:49:56: rerunning at 20:49:00 would be
        // refused again; the end of the minute is after the reset.
        let out =
            codex_limit("You’ve hit your usage limit. Upgrade to Pro or try again at 8:49 PM.");
        let now = local_at(20, 49, 30);
        let limit = codex_rate_limit(&out, now).unwrap();
        assert!(limit.message.starts_with("You’ve hit your usage limit."));
        assert_eq!(local(limit.until), 20 * 3600 + 50 * 60);
        assert_eq!(limit.until.duration_since(now).unwrap().as_secs(), 30);
        // The same message read a second before the minute ends: still ahead.
        let limit = codex_rate_limit(&out, local_at(20, 49, 59)).unwrap();
        assert_eq!(local(limit.until), 20 * 3600 + 50 * 60);
        // Hours ahead, and past midnight: the next such time.
        let out = codex_limit("You’ve hit your usage limit. Try again at 12:04 AM.");
        let now = local_at(22, 0, 0);
        let limit = codex_rate_limit(&out.replace("Try", "try"), now).unwrap();
        let ahead = limit.until.duration_since(now).unwrap().as_secs();
        assert_eq!(ahead, 2 * 3600 + 5 * 60);
        assert_eq!(
            codex_rate_limit(&json_line("turn.failed", "boom"), now),
            None
        );
    }

    #[test]
    fn a_codex_reset_just_passed_reads_as_passed_not_as_tomorrow() {
        // The rerun was refused again naming the minute that just ended: the limit is
        // not a day away, it is due (the deferral then waits a little and tries again).
        let out = codex_limit("You’ve hit your usage limit. Try again at 8:49 PM.");
        let now = local_at(20, 50, 3);
        let limit = codex_rate_limit(&out.replace("Try", "try"), now).unwrap();
        assert!(limit.until <= now, "{:?}", now.duration_since(limit.until));
        assert_eq!(local(limit.until), 20 * 3600 + 50 * 60);
    }

    #[test]
    fn a_codex_reset_on_another_day_is_read_with_its_date() {
        let out = codex_limit(
            "You’ve hit your usage limit. Upgrade to Plus or try again at Dec 1st, 2026 3:05 AM.",
        );
        let now = local_at(21, 0, 0);
        let limit = codex_rate_limit(&out, now).unwrap();
        assert_eq!(local(limit.until), 3 * 3600 + 6 * 60);
        let s = limit.until.duration_since(UNIX_EPOCH).unwrap().as_secs();
        let local_days = (s as i64 + local_offset_secs(s)).div_euclid(86_400);
        // 2026-12-01 is day 20_788 since 1970-01-01.
        assert_eq!(local_days, 20_788);
        assert_eq!(civil_day(&["Jan", "1st,", "1970"]), Some(0));
        assert_eq!(civil_day(&["Feb", "29th,", "2024"]), Some(19_782));
        assert_eq!(civil_day(&["Foo", "1st,", "2024"]), None);
    }

    #[test]
    fn a_codex_429_it_gave_up_on_is_a_limit_with_its_stated_or_a_default_wait() {
        let now = at(1_795_651_000);
        let out = codex_limit("exceeded retry limit, last status: 429 Too Many Requests");
        let limit = codex_rate_limit(&out, now).unwrap();
        assert_eq!(limit.until, now + UNSTATED_WAIT);
        let out = codex_limit("Rate limit reached (429). Please try again in 3.2s.");
        let limit = codex_rate_limit(&out, now).unwrap();
        assert_eq!(limit.until, now + Duration::from_millis(3200));
        let out = codex_limit("exceeded retry limit, last status: 503 Service Unavailable");
        assert_eq!(codex_rate_limit(&out, now), None);
        // The digits of a port are no status (CI once ran the model server on 42901).
        let out = codex_limit(
            "unexpected status 503 Service Unavailable: the scripted provider is down, \
             url: http://127.0.0.1:42901/v1/responses",
        );
        assert_eq!(codex_rate_limit(&out, now), None);
        let out = codex_limit("unexpected status 503 at http://10.0.0.1:429/v1 (id 14290)");
        assert_eq!(codex_rate_limit(&out, now), None);
        // A 429 it retried past, then another failure: not a limit.
        let out = format!(
            "{}\n{}",
            serde_json::json!({"type": "error", "message": "Reconnecting... 429 Too Many Requests"}),
            json_line("turn.failed", "stream disconnected: 503")
        );
        assert_eq!(codex_rate_limit(&out, now), None);
    }

    #[test]
    fn a_gemini_429_defers_by_the_delay_it_suggests() {
        let now = at(1_795_651_000);
        let result = |message: &str| {
            serde_json::json!({"type": "result", "status": "error",
                               "error": {"type": "unknown", "message": message}})
            .to_string()
        };
        let said = "[API Error: You exceeded your current quota, please check your plan.\n\
                    Please retry in 3.5s.\nSuggested retry after 3s.]\n\
                    Please wait and try again later. To increase your limits, …";
        let limit = Preset::Gemini
            .rate_limit_at(&result(said), None, now)
            .unwrap();
        assert_eq!(limit.until, now + Duration::from_secs(3));
        assert_eq!(
            limit.message,
            "You exceeded your current quota, please check your plan."
        );
        let said = "[API Error: quota\nPlease retry in 1500ms]\nPlease wait and try again later.";
        let limit = Preset::Gemini
            .rate_limit_at(&result(said), None, now)
            .unwrap();
        assert_eq!(limit.until, now + Duration::from_millis(1500));
        // A 429 naming no delay waits the default; the daily quota and other errors
        // are no deferral.
        let said = "[API Error: Resource has been exhausted (e.g. check quota).]\n\
                    Please wait and try again later.";
        let limit = Preset::Gemini
            .rate_limit_at(&result(said), None, now)
            .unwrap();
        assert_eq!(limit.until, now + UNSTATED_WAIT);
        let daily = "[API Error: You have exhausted your daily quota on this model.]\n\
                     Please wait and try again later.";
        assert_eq!(
            Preset::Gemini.rate_limit_at(&result(daily), None, now),
            None
        );
        let down = "[API Error: the provider is down]";
        assert_eq!(Preset::Gemini.rate_limit_at(&result(down), None, now), None);
    }

    #[test]
    fn delays_are_read_in_seconds_or_milliseconds() {
        assert_eq!(delay("3s."), Some(Duration::from_secs(3)));
        assert_eq!(delay(" 2 seconds"), Some(Duration::from_secs(2)));
        assert_eq!(delay("0.25s"), Some(Duration::from_millis(250)));
        assert_eq!(delay("40ms"), Some(Duration::from_millis(40)));
        assert_eq!(delay("soon"), None);
        assert_eq!(delay("3 minutes"), None);
    }

    #[test]
    fn a_limit_met_again_defers_again_up_to_the_bound() {
        let now = at(1_795_651_000);
        let ahead = RateLimit {
            until: now + Duration::from_secs(90),
            message: "limited".into(),
        };
        assert_eq!(ahead.next_run(0, now), Some(ahead.until));
        // The provider still refuses once its reset has passed: a short wait, again.
        let passed = RateLimit {
            until: now - Duration::from_secs(1),
            ..ahead.clone()
        };
        assert_eq!(passed.next_run(1, now), Some(now + STILL_LIMITED_WAIT));
        assert_eq!(
            passed.next_run(MAX_DEFERRALS - 1, now),
            Some(now + STILL_LIMITED_WAIT)
        );
        // Deferred MAX_DEFERRALS times already: no more.
        assert_eq!(ahead.next_run(MAX_DEFERRALS, now), None);
        // …and its failure says why it was not waited for again.
        let mut r = TaskResult::failed(
            crate::protocol::TaskId::from("t"),
            crate::protocol::Outcome::Failure,
            "gemini reported an error: quota",
        );
        ahead.note_gave_up(&mut r, MAX_DEFERRALS - 1);
        assert_eq!(r.error.as_deref(), Some("gemini reported an error: quota"));
        ahead.note_gave_up(&mut r, MAX_DEFERRALS);
        assert_eq!(
            r.error.as_deref(),
            Some(
                "gemini reported an error: quota (still limited after 5 deferrals: conductor \
                 stopped waiting)"
            )
        );
    }
}
