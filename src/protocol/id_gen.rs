//! Generated task ids: a six-character handle first, then when and where it was made.
//!
//! `kq3x9a-1795439873131-4242-0`: the handle is six characters of lowercase Crockford
//! base 32 (no `i l o u`), its first a letter so it never starts like an original
//! client's `Date.now()` id nor like an id from before handles (both begin with digits);
//! then the unix milliseconds, pid and counter that made ids unique before (so a
//! generated id is new on its host without asking anyone — except in a child forked
//! without exec, which keeps its parent's pid, start and counter: there only the root's
//! handle claim, [`crate::ids::fresh`], tells their ids apart). Within one process the
//! handles of successive ids are a permutation of the counter, so they never repeat;
//! across processes each starts at a random point, and [`crate::ids::fresh`] makes the
//! handle unique on a root. Order is in the records' times, not in the id: views and the
//! queue sort by those; [`order_key`] only breaks ties between ids made in one tick.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::SystemTime;

/// How many characters of a generated id tell it apart on a root.
pub const HANDLE_LEN: usize = 6;

/// Lowercase Crockford base 32.
const DIGITS: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";
/// The letters of [`DIGITS`], for the first character.
const LETTERS: &[u8; 22] = b"abcdefghjkmnpqrstvwxyz";
/// How many handles there are: 22 first characters × 32⁵.
const HANDLES: u64 = 22 * (1 << 25);
const MASK30: u64 = (1 << 30) - 1;

/// A bijection of the 30-bit numbers (odd multipliers and xor-shifts are each one).
fn mix30(mut x: u64) -> u64 {
    x = x.wrapping_mul(0x2c1b_3c6d) & MASK30;
    x ^= x >> 15;
    x = x.wrapping_mul(0x297a_2d39) & MASK30;
    x ^= x >> 13;
    x
}

/// A bijection of `0..HANDLES`: [`mix30`] walked until it lands inside (cycle walking).
fn scramble(n: u64) -> u64 {
    let mut x = mix30(n % HANDLES);
    while x >= HANDLES {
        x = mix30(x);
    }
    x
}

/// The six characters for handle number `n` (below [`HANDLES`]).
fn spell(n: u64) -> String {
    let mut out = vec![LETTERS[(n >> 25) as usize]];
    for k in (0..5).rev() {
        out.push(DIGITS[((n >> (5 * k)) & 31) as usize]);
    }
    String::from_utf8(out).expect("ASCII")
}

/// Where this process's handles start: random, so two processes rarely meet.
fn process_start() -> u64 {
    static START: OnceLock<u64> = OnceLock::new();
    *START.get_or_init(|| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.write_u128(
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0),
        );
        h.finish() % HANDLES
    })
}

/// This process's id, asked once: `getpid` is a call a task for a batch of them (the C
/// library no longer keeps it). A process forked without exec keeps its parent's, and
/// its parent's handles with it: the handle files on the root refuse those ids, as
/// they refuse any two processes' that meet.
fn pid() -> u32 {
    static PID: OnceLock<u32> = OnceLock::new();
    *PID.get_or_init(std::process::id)
}

/// A fresh id text: `<handle>-<unix ms>-<pid>-<seq>`.
pub(crate) fn generate() -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let ms = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let handle = spell(scramble(process_start().wrapping_add(seq)));
    format!("{handle}-{ms}-{}-{seq}", pid())
}

/// Whether `id` has the form [`generate`] gives (a retry's `-rN` after it allowed).
pub fn is_generated(id: &str) -> bool {
    parts(id).is_some()
}

/// `(ms, pid, seq)` of a generated id.
fn parts(id: &str) -> Option<(u64, u64, u64)> {
    let (handle, rest) = id.split_at_checked(HANDLE_LEN)?;
    let mut chars = handle.bytes();
    if !chars.next().is_some_and(|c| LETTERS.contains(&c)) || !chars.all(|c| DIGITS.contains(&c)) {
        return None;
    }
    let mut nums = rest.strip_prefix('-')?.splitn(4, '-');
    let mut next = || nums.next()?.parse::<u64>().ok();
    Some((next()?, next()?, next()?))
}

/// What breaks a tie between two tasks recorded in the same clock tick: a generated
/// id's milliseconds and counter (its making order in one process), else nothing.
pub fn order_key(id: &str) -> (u64, u64) {
    parts(id).map_or((0, 0), |(ms, _, seq)| (ms, seq))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix30_is_a_bijection_on_a_sample() {
        // Distinct inputs stay distinct (a full check of 2^30 is too slow for a unit test).
        let mut seen = std::collections::HashSet::new();
        for n in (0..1u64 << 30).step_by(4093).take(200_000) {
            assert!(seen.insert(mix30(n)), "mix30 repeats at {n}");
        }
    }

    #[test]
    fn generated_ids_have_the_documented_form() {
        let id = generate();
        assert!(is_generated(&id), "{id}");
        assert!(id.as_bytes()[0].is_ascii_lowercase(), "{id}");
        assert!(!is_generated("1795439873131-4242-0"));
        assert!(!is_generated("ilouxx-1-2-3"), "i l o u are not digits");
        assert!(is_generated("kq3x9a-1795439873131-4242-0-r2"));
        assert_eq!(order_key("kq3x9a-1795439873131-4242-7"), (1795439873131, 7));
    }
}
