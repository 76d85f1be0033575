//! The slot-list syntax: `7`, `0-999`, `0,3,5-9` — the slots one worker process serves.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use super::slot::Slot;
use crate::error::{Error, Result};

/// The slots one worker process serves: one, a range, or a list; sorted, without
/// repeats. Parsed from and shown as `0-3,7` (as `conductor-worker` takes it and
/// people read it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotList(pub Vec<Slot>);

impl FromStr for SlotList {
    type Err = Error;

    fn from_str(s: &str) -> Result<SlotList> {
        let bad = |why: String| Error::BadSlotList {
            list: s.to_string(),
            why,
        };
        let mut slots = BTreeSet::new();
        for part in s.split(',').map(str::trim) {
            let (lo, hi) = match part.split_once('-') {
                Some((a, b)) => (a.trim(), b.trim()),
                None => (part, part),
            };
            let parse = |t: &str| {
                t.parse::<Slot>()
                    .map_err(|e| bad(format!("{t:?} is not a slot number ({e})")))
            };
            let (lo, hi) = (parse(lo)?, parse(hi)?);
            if lo.0 > hi.0 {
                return Err(bad(format!("range {part} runs backwards")));
            }
            slots.extend((lo.0..=hi.0).map(Slot));
        }
        Ok(SlotList(slots.into_iter().collect()))
    }
}

impl fmt::Display for SlotList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let slots = &self.0;
        let mut parts: Vec<String> = Vec::new();
        let mut i = 0;
        while i < slots.len() {
            let mut j = i;
            while j + 1 < slots.len() && slots[j + 1].0 == slots[j].0 + 1 {
                j += 1;
            }
            parts.push(if i == j {
                slots[i].to_string()
            } else {
                format!("{}-{}", slots[i], slots[j])
            });
            i = j + 1;
        }
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_lists_take_ranges_and_lists() {
        let s = |v: &[u32]| v.iter().map(|&n| Slot(n)).collect::<Vec<_>>();
        let parse_slot_list = |t: &str| t.parse::<SlotList>().map(|l| l.0);
        let format_slot_list = |v: &[Slot]| SlotList(v.to_vec()).to_string();
        assert_eq!(parse_slot_list("0-3").unwrap(), s(&[0, 1, 2, 3]));
        assert_eq!(parse_slot_list("0,3,5-7,3").unwrap(), s(&[0, 3, 5, 6, 7]));
        assert_eq!(parse_slot_list("7").unwrap(), s(&[7]));
        assert_eq!(format_slot_list(&s(&[0, 1, 2, 5, 7, 8])), "0-2,5,7-8");
        for bad in ["", "3-1", "a", "1,,2", "0-2000", "-1"] {
            let e = parse_slot_list(bad).unwrap_err().to_string();
            assert!(e.contains("slot list"), "{bad}: {e}");
        }
    }
}
