//! The id log: the ids a host's `update` gives the decode group's members, kept by slot
//! until each member takes its own.
//!
//! Storing every member's sampled id in its request record at every `update` reads and
//! writes a thousand scattered records a step at a thousand decodes (two thirds of such a
//! step's cost). A member needs its ids only when it is settled: at its fills (every
//! `block_size` ticks, when the block it filled is hashed), when it leaves the group and
//! when its state is exported. So `update` writes the ids of a full batch's decodes into a
//! small table by slot and tick, one dense write each, and a member takes the ids of the
//! ticks it lagged when it is settled ([`TokenSource::Log`]).
//!
//! The table keeps `period` ticks per slot, a power of two at least the block size: a
//! member fills a block every `block_size` ticks and is settled there, so it never lags
//! more ticks than that, and the row a tick overwrites is one every member has taken. Above
//! [`MAX_PERIOD`] (block sizes over 64) the log is off and `update` stores each id in its
//! request as it comes, as it does for ids given by request or alongside a
//! [`SampledTokens`].

use std::ops::Range;

use super::sampled::SampledTokens;

/// The most ticks kept per slot (4 bytes each): larger block sizes keep no log.
const MAX_PERIOD: usize = 64;

/// The ids of the decode group's members by slot and tick, for the last `period` ticks.
#[derive(Debug, Clone, Default)]
pub(super) struct IdLog {
    /// Ticks kept per slot: a power of two at least the block size, or 0 (off).
    period: usize,
    /// `ids[slot * period + tick % period]`: the id the member in `slot` sampled at `tick`.
    ids: Vec<u32>,
    /// `written[tick % period]`: whether `update` gave every listed decode its id at `tick`
    /// (else the ids of that tick are unknown, or were stored in the requests).
    written: Vec<bool>,
    /// Whether any tick was written: until then members are settled by counting alone (a
    /// simulator's lean steps never write).
    used: bool,
}

impl IdLog {
    /// A log for members that fill a block every `block_size` ticks.
    pub(super) fn new(block_size: usize) -> Self {
        if block_size > MAX_PERIOD {
            return Self::default();
        }
        let period = block_size.next_power_of_two();
        Self {
            period,
            ids: Vec::new(),
            written: vec![false; period],
            used: false,
        }
    }

    /// Keep `ids[k]` as the id the member in the `k`-th of `slots` sampled at `tick`, for
    /// every listed decode of a full batch; `false` (nothing kept) when the log is off.
    pub(super) fn write(
        &mut self,
        tick: u64,
        slots: impl Iterator<Item = usize>,
        ids: &[u32],
    ) -> bool {
        if self.period == 0 {
            return false;
        }
        let row = self.row(tick);
        for (slot, &id) in slots.zip(ids) {
            let at = slot * self.period + row;
            if at >= self.ids.len() {
                self.grow(slot);
            }
            self.ids[at] = id;
        }
        self.written[row] = true;
        self.used = true;
        true
    }

    /// The ids of `tick` are not kept here (unknown, or stored in the requests).
    pub(super) fn skip(&mut self, tick: u64) {
        if self.period > 0 {
            let row = self.row(tick);
            self.written[row] = false;
        }
    }

    /// The id the member in `slot` sampled at `tick`, if kept: `tick` must be one of the last
    /// `period` ticks and the member in `slot` a member since then.
    #[inline]
    pub(super) fn get(&self, slot: usize, tick: u64) -> Option<u32> {
        let row = self.row(tick);
        if !self.written[row] {
            return None;
        }
        self.ids.get(slot * self.period + row).copied()
    }

    /// The ids the member in `slot` sampled at `ticks` (at most `period` of the last
    /// `period`, all [kept](Self::kept)), in tick order: two runs where they wrap around the
    /// end of its row.
    pub(super) fn runs(&self, slot: usize, ticks: Range<u64>) -> (&[u32], &[u32]) {
        let count = (ticks.end - ticks.start) as usize;
        let row = &self.ids[slot * self.period..(slot + 1) * self.period];
        let from = self.row(ticks.start);
        if from + count <= self.period {
            (&row[from..from + count], &[])
        } else {
            (&row[from..], &row[..from + count - self.period])
        }
    }

    /// Whether the ids of every tick of `ticks` (of the last `period`) were kept, the
    /// member in `slot` one since the first.
    pub(super) fn kept(&self, slot: usize, ticks: Range<u64>) -> bool {
        (slot + 1) * self.period <= self.ids.len()
            && ticks.into_iter().all(|tick| self.written[self.row(tick)])
    }

    /// Where the member in `slot` takes its ids from when settled: `sampled` where the
    /// scheduler has it, else this log unless it is off.
    pub(super) fn source<'a>(
        &'a self,
        sampled: Option<&'a SampledTokens>,
        slot: usize,
    ) -> TokenSource<'a> {
        match sampled {
            Some(tokens) => TokenSource::Sampled(tokens),
            None if self.used => TokenSource::Log(self, slot),
            None => TokenSource::Unknown,
        }
    }

    #[inline]
    fn row(&self, tick: u64) -> usize {
        (tick & (self.period as u64 - 1)) as usize
    }

    /// Room up to `slot`, and as much again (slots are reused, so the highest grows slowly).
    #[cold]
    fn grow(&mut self, slot: usize) {
        let slots = (slot + 1).next_power_of_two();
        self.ids.resize(slots * self.period, 0);
    }
}

/// Where a member of the decode group takes the ids of the ticks it lagged when it is
/// settled.
#[derive(Debug, Clone, Copy)]
pub(super) enum TokenSource<'a> {
    /// Nowhere: they are counted, unknown.
    Unknown,
    /// A function of the position, known in advance (a simulator's workload).
    Sampled(&'a SampledTokens),
    /// The log, under the member's slot.
    Log(&'a IdLog, usize),
}
