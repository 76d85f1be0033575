//! A worker slot's number (`Slot`) and the cap on a root's slots (`MAX_SLOTS`).

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// Most worker slots one root may have (numbered 0 to 1023): every scan of the root
/// lists them, so a typo such as `init 100000` is refused instead of obeyed.
pub const MAX_SLOTS: u32 = 1024;

/// A worker slot number: `workers/<N>/`, below [`MAX_SLOTS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Slot(pub u32);

impl FromStr for Slot {
    type Err = Error;

    /// Only canonical decimal numbers: `0`, `7`, `12` — not `07`, `+1`, ` 1` or `a`,
    /// so one slot can never be reached under two names.
    fn from_str(s: &str) -> Result<Slot> {
        let canonical = !s.is_empty()
            && s.bytes().all(|b| b.is_ascii_digit())
            && (s == "0" || !s.starts_with('0'));
        if !canonical {
            return Err(Error::InvalidSlot {
                name: s.to_string(),
            });
        }
        match s.parse::<u32>() {
            Ok(n) => Slot::checked(n),
            // Digits beyond u32 are a number, just far too large.
            Err(_) => Err(Error::SlotTooLarge {
                name: s.to_string(),
                max: MAX_SLOTS,
            }),
        }
    }
}

impl Slot {
    /// `n` as a slot, refused (naming the cap) if it is not below [`MAX_SLOTS`].
    pub fn checked(n: u32) -> Result<Slot> {
        if n < MAX_SLOTS {
            Ok(Slot(n))
        } else {
            Err(Error::SlotTooLarge {
                name: n.to_string(),
                max: MAX_SLOTS,
            })
        }
    }
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl From<u32> for Slot {
    fn from(n: u32) -> Slot {
        Slot(n)
    }
}
