//! Plain runs packed many to a row of the runs record (a block): the format, and reading a
//! block's runs back.
//!
//! Most runs end well, quickly and with nothing in their detail ([`RunShape::Plain`]); a row of
//! a dozen columns for each cost the SQL stores most of what the record costs a run
//! (`benches/runs-instructions`). A batch's stretch of plain runs is written as one row instead:
//! its runs' fields packed in one value, with the block's first and last start and its count as
//! columns, so a listing can pass a block over by status or time without reading it. Every
//! other run keeps a row of its own.
//!
//! A run's place in the record (its `seq`, the cursor of a listing) is its row's `seq` times
//! [`BLOCK_RUNS`], plus its place in its block: runs of blocks and runs of rows are ordered
//! together, and a block's runs keep their places when pruning takes some of them out.
//!
//! [`RunShape::Plain`]: crate::events::sql_records::RunShape::Plain

use crate::events::records::{NewRun, StoredRun};
use crate::events::store::{StoreError, StoreResult};

/// The most runs a block holds; also the stride of `seq` between rows ([`run_seq`]).
pub const BLOCK_RUNS: usize = 4096;

/// The format of a block's value, its first byte.
const FORMAT: u8 = 1;

/// How many of a block's distinct doors, principals and skills a later run names by reference
/// rather than spelling out again (most blocks have a handful; past this they are spelled out).
const NAMES: usize = 32;

/// What a block's columns say of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHead {
    /// The earliest start of its runs (ms since the epoch).
    pub first_ms: i64,
    /// The latest start of its runs.
    pub last_ms: i64,
    /// How many runs it holds.
    pub runs: i64,
}

/// The `seq` a listing gives the run of row `row` (a run of its own), or at `place` in the
/// block of row `row`.
pub fn run_seq(row: i64, place: Option<u16>) -> i64 {
    row * BLOCK_RUNS as i64 + place.map_or(0, i64::from)
}

/// The `seq` of the newest row a listing of runs recorded before `before` reads.
pub fn rows_before(before: i64) -> i64 {
    (before - 1).div_euclid(BLOCK_RUNS as i64)
}

/// Packs `runs` (at most [`BLOCK_RUNS`], each plain: ended well, no problem, no parent, nothing
/// in its detail), in order, into `into` (emptied first), each at its place in the slice.
pub fn pack(runs: &[NewRun<'_>], into: &mut Vec<u8>) -> BlockHead {
    pack_placed(
        runs.iter().enumerate().map(|(at, run)| (at as u16, *run)),
        into,
    )
}

/// Packs `runs` with their places (ascending) into `into` (emptied first).
///
/// A run is: its place, its start (from the start of the run before it) and its duration, its
/// id, its door, principal and skill, its args, its result. Numbers are LEB128 varints (signed
/// ones zigzagged); a text is its length and its bytes; a result is its length plus one, or 0
/// when absent; a door, principal or skill is `n` > 0 for the `n`th such name spelled out
/// earlier in the block, or 0 and the name spelled out.
fn pack_placed<'a>(runs: impl Iterator<Item = (u16, NewRun<'a>)>, into: &mut Vec<u8>) -> BlockHead {
    into.clear();
    into.push(FORMAT);
    let mut head = BlockHead {
        first_ms: i64::MAX,
        last_ms: i64::MIN,
        runs: 0,
    };
    let mut names: Vec<&str> = Vec::new();
    let mut previous_ms = 0;
    for (place, run) in runs {
        debug_assert!(
            run.status == "ok" && run.problem.is_none() && run.parent.is_none(),
            "only plain runs are packed"
        );
        head.first_ms = head.first_ms.min(run.started_ms);
        head.last_ms = head.last_ms.max(run.started_ms);
        head.runs += 1;
        put_number(into, u64::from(place));
        put_signed(into, run.started_ms.wrapping_sub(previous_ms));
        previous_ms = run.started_ms;
        put_signed(into, run.duration_us);
        put_text(into, run.id);
        for name in [run.door, run.principal, run.skill] {
            // A door is named by the program: the same text, not a copy of it.
            match names
                .iter()
                .position(|n| std::ptr::eq(*n, name) || *n == name)
            {
                Some(at) => put_number(into, at as u64 + 1),
                None => {
                    into.push(0);
                    put_text(into, name);
                    if names.len() < NAMES {
                        names.push(name);
                    }
                }
            }
        }
        put_text(into, run.args);
        match run.result {
            Some(result) => {
                put_number(into, result.len() as u64 + 1);
                into.extend_from_slice(result.as_bytes());
            }
            None => into.push(0),
        }
    }
    head
}

fn put_number(into: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        into.push(n as u8 | 0x80);
        n >>= 7;
    }
    into.push(n as u8);
}

fn put_signed(into: &mut Vec<u8>, n: i64) {
    put_number(into, ((n << 1) ^ (n >> 63)) as u64);
}

fn put_text(into: &mut Vec<u8>, text: &str) {
    put_number(into, text.len() as u64);
    into.extend_from_slice(text.as_bytes());
}

/// One run of a block, read where the block's value lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packed<'a> {
    /// Its place in the block.
    pub place: u16,
    pub run: NewRun<'a>,
}

impl Packed<'_> {
    /// This run as a listing gives it, in the block of row `row`.
    pub fn stored(&self, row: i64) -> StoredRun {
        self.run.to_stored(run_seq(row, Some(self.place)))
    }
}

/// The runs of the block `value` (of row `row`, named in an error), oldest first.
pub fn unpack(row: i64, value: &[u8]) -> StoreResult<Vec<Packed<'_>>> {
    let broken = |what: &str| {
        StoreError::Invalid(format!(
            "the runs record's block at seq {row} cannot be read: {what}"
        ))
    };
    let (&format, rest) = value.split_first().ok_or_else(|| broken("it is empty"))?;
    if format != FORMAT {
        return Err(broken(&format!(
            "format {format} is not one this version reads"
        )));
    }
    let mut reader = Reader {
        rest,
        names: Vec::new(),
        previous_ms: 0,
    };
    let mut runs = Vec::new();
    while !reader.rest.is_empty() {
        runs.push(
            reader
                .packed()
                .ok_or_else(|| broken("it ends inside a run, or holds what no run is"))?,
        );
    }
    Ok(runs)
}

/// Packs the runs of `runs` whose `kept` is true (in their places) into `into`: the block as
/// pruning leaves it, or `None` when it keeps none.
pub fn repack(runs: &[Packed<'_>], kept: &[bool], into: &mut Vec<u8>) -> Option<BlockHead> {
    let head = pack_placed(
        runs.iter()
            .zip(kept)
            .filter(|(_, kept)| **kept)
            .map(|(p, _)| (p.place, p.run)),
        into,
    );
    (head.runs > 0).then_some(head)
}

/// Reads a block's value from its front ([`pack_placed`]'s format); `None` where it is cut
/// short, names a name it has not spelled out, or holds text that is not UTF-8.
struct Reader<'a> {
    rest: &'a [u8],
    names: Vec<&'a str>,
    previous_ms: i64,
}

impl<'a> Reader<'a> {
    fn packed(&mut self) -> Option<Packed<'a>> {
        let place = u16::try_from(self.number()?).ok()?;
        let started_ms = self.previous_ms.wrapping_add(self.signed()?);
        self.previous_ms = started_ms;
        let duration_us = self.signed()?;
        let id = self.text()?;
        let door = self.name()?;
        let principal = self.name()?;
        let skill = self.name()?;
        let args = self.text()?;
        let result = match self.number()? {
            0 => None,
            len => Some(self.text_of(usize::try_from(len - 1).ok()?)?),
        };
        Some(Packed {
            place,
            run: NewRun {
                id,
                door,
                principal,
                skill,
                started_ms,
                duration_us,
                status: "ok",
                problem: None,
                parent: None,
                args,
                result,
                detail: "{}",
            },
        })
    }

    fn number(&mut self) -> Option<u64> {
        let mut n = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = self.rest.split_first()?;
            self.rest = rest;
            n |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Some(n);
            }
        }
        None
    }

    fn signed(&mut self) -> Option<i64> {
        let n = self.number()?;
        Some((n >> 1) as i64 ^ -((n & 1) as i64))
    }

    fn name(&mut self) -> Option<&'a str> {
        match self.number()? {
            0 => {
                let name = self.text()?;
                if self.names.len() < NAMES {
                    self.names.push(name);
                }
                Some(name)
            }
            n => self.names.get(usize::try_from(n - 1).ok()?).copied(),
        }
    }

    fn text(&mut self) -> Option<&'a str> {
        let len = usize::try_from(self.number()?).ok()?;
        self.text_of(len)
    }

    fn text_of(&mut self, len: usize) -> Option<&'a str> {
        if len > self.rest.len() {
            return None;
        }
        let (text, rest) = self.rest.split_at(len);
        self.rest = rest;
        std::str::from_utf8(text).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(n: i64) -> NewRun<'static> {
        NewRun {
            id: "r",
            door: "http",
            principal: "key:ops \"é\" \\ \n",
            skill: "noop",
            started_ms: 1_700_000_000_000 + n,
            duration_us: n * 1_000_003,
            status: "ok",
            problem: None,
            parent: None,
            args: "{\"n\":\"\u{1}\"}",
            result: if n % 2 == 0 { Some("null") } else { None },
            detail: "{}",
        }
    }

    #[test]
    fn a_block_gives_back_each_run_whole_in_its_order_and_place() {
        let runs: Vec<NewRun<'_>> = (0..5).map(plain).collect();
        let mut value = vec![9, 9, 9];
        let head = pack(&runs, &mut value);
        assert_eq!(
            head,
            BlockHead {
                first_ms: runs[0].started_ms,
                last_ms: runs[4].started_ms,
                runs: 5
            }
        );
        let back = unpack(7, &value).unwrap();
        let places: Vec<u16> = back.iter().map(|p| p.place).collect();
        assert_eq!(places, [0, 1, 2, 3, 4]);
        let read: Vec<NewRun<'_>> = back.iter().map(|p| p.run).collect();
        assert_eq!(read, runs);
        assert_eq!(back[3].stored(7).seq, 7 * BLOCK_RUNS as i64 + 3);
    }

    #[test]
    fn a_block_names_what_its_runs_share_and_still_gives_back_each_whole() {
        // More distinct principals than a block names by reference, doors and skills that
        // repeat, starts that go back in time, a duration past 32 bits and a negative one.
        let principals: Vec<String> = (0..NAMES + 9).map(|n| format!("key:k{n}")).collect();
        let runs: Vec<NewRun<'_>> = (0..200i64)
            .map(|n| NewRun {
                door: ["http", "slack", "email"][n as usize % 3],
                principal: &principals[(n as usize * 7) % principals.len()],
                skill: if n % 5 == 0 { "other" } else { "noop" },
                started_ms: 1_700_000_000_000 - (n % 4) * 1000 + n,
                duration_us: if n == 3 { -1 } else { n << 40 },
                result: (n % 3 != 0).then_some(""),
                ..plain(n)
            })
            .collect();
        let mut value = Vec::new();
        let head = pack(&runs, &mut value);
        assert_eq!(
            head.first_ms,
            runs.iter().map(|r| r.started_ms).min().unwrap()
        );
        assert_eq!(
            head.last_ms,
            runs.iter().map(|r| r.started_ms).max().unwrap()
        );
        let read: Vec<NewRun<'_>> = unpack(1, &value).unwrap().iter().map(|p| p.run).collect();
        assert_eq!(read, runs);
        // A name referred to before it was spelled out is refused, not read as another.
        let mut value = Vec::new();
        pack(&[plain(1)], &mut value);
        let door = value.windows(6).position(|w| w == b"\x00\x04http").unwrap();
        value.splice(door..door + 6, [2u8]);
        assert!(unpack(1, &value).is_err());
    }

    #[test]
    fn a_block_pruned_keeps_its_other_runs_in_their_places() {
        let runs: Vec<NewRun<'_>> = (0..4).map(plain).collect();
        let mut value = Vec::new();
        pack(&runs, &mut value);
        let back = unpack(1, &value).unwrap();
        let mut again = Vec::new();
        let head = repack(&back, &[false, true, false, true], &mut again).unwrap();
        assert_eq!(head.runs, 2);
        assert_eq!(head.first_ms, runs[1].started_ms);
        let kept = unpack(1, &again).unwrap();
        let places: Vec<u16> = kept.iter().map(|p| p.place).collect();
        assert_eq!(places, [1, 3], "the runs kept keep their places (and seqs)");
        assert_eq!(kept[1].run, runs[3]);
        assert_eq!(repack(&back, &[false; 4], &mut again), None);
    }

    #[test]
    fn a_block_cut_short_or_of_another_format_is_an_error_naming_its_row() {
        let mut value = Vec::new();
        pack(&[plain(1), plain(2)], &mut value);
        for broken in [&value[..value.len() - 1], &value[..3], &[][..], &[2u8][..]] {
            let err = unpack(42, broken).unwrap_err().to_string();
            assert!(err.contains("block at seq 42"), "{err}");
        }
        let mut not_utf8 = value.clone();
        let at = not_utf8.windows(4).position(|w| w == b"http").unwrap();
        not_utf8[at] = 0xff;
        assert!(unpack(42, &not_utf8).is_err());
    }

    #[test]
    fn a_listing_from_a_runs_seq_reads_from_its_row_and_not_past_it() {
        for row in [1i64, 2, 1000] {
            // The run of a row of its own: the listing after it starts at the row before.
            assert_eq!(rows_before(run_seq(row, None)), row - 1);
            // A run in a block: the block is read again, for the runs before it in the block.
            assert_eq!(rows_before(run_seq(row, Some(3))), row);
            assert_eq!(rows_before(run_seq(row, Some(1))), row);
            assert!(run_seq(row, Some(BLOCK_RUNS as u16 - 1)) < run_seq(row + 1, None));
        }
    }
}
