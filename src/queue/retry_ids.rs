//! Reading a retry's id: the task it retries (`t` of `t-r2`) and which retry it is.

use crate::protocol::TaskId;

/// `t` for `t`, `t-r1`, `t-r2` (see [`TaskId::retries`]).
pub(super) fn retry_base(id: &TaskId) -> String {
    let text = id.to_string();
    match text.rsplit_once("-r") {
        Some((b, n)) if n.parse::<u32>().is_ok() => b.to_string(),
        _ => text,
    }
}

/// `2` for `t-r2`, `0` for `t`.
pub(super) fn retry_number(id: &TaskId) -> u32 {
    let text = id.to_string();
    match text.rsplit_once("-r") {
        Some((_, n)) => n.parse().unwrap_or(0),
        None => 0,
    }
}
