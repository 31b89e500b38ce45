//! The decode group: the running requests that only decode, kept implicit.
//!
//! A running request with one token left is a decode: every step it computes that token and
//! samples the next, so between two events nothing about it changes but its counts, which
//! all grow by one a step. Its counts are therefore kept against a clock that ticks once per
//! `update` ([`Request::settle`] brings them up to date), and the step rule visits it only
//! at its events, which are known in advance:
//! - **fill**: the token it computes fills its last block. At that `update` the block can be
//!   registered in the prefix cache and it needs one more block, which the next
//!   `schedule()` allocates (or preempts for) in rank order, as pass 1 of the step rule says.
//! - **finish**: it samples its `max_new_tokens`-th token (or the engine names it finished).
//!
//! Finishes wait in a heap ordered by `(tick, rank)`; fills, which come every `block_size`
//! ticks, in a wheel of buckets kept in rank order. The events of one `update` are applied in
//! the order the decode items are listed (rank order), fill before finish for one request, as
//! an item-by-item `update` applies them. A request leaves the group when it finishes, is
//! preempted or aborted; the events of a membership it left are recognised as stale by its
//! join count. A step therefore costs O(events + prefill items), whatever the number of
//! decodes, unless the caller asks for the decode items themselves (a host's batch lists
//! them; the simulator's lean batch only counts them).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::counts::tokens_in;
use super::id_log::{IdLog, TokenSource};
use super::lane::Lane;
use super::request::Request;
use super::sampled::SampledTokens;
use super::scheduler::{Entry, Rank};
use super::slab::Slab;

/// What a member leaving the group keeps of the tokens of the ticks it lagged.
#[derive(Debug, Clone, Copy)]
pub(super) enum Keep<'a> {
    /// Its counts alone (it is forgotten: its tokens go with it).
    Counts,
    /// Its tokens too, from the scheduler's sampled tokens if any, else from the id log.
    Tokens(Option<&'a SampledTokens>),
}

/// A member's finish, due at group tick `due`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Finish {
    pub(super) due: u64,
    pub(super) rank: Rank,
    pub(super) slot: usize,
    /// The join count of the membership it belongs to.
    pub(super) joins: u32,
}

/// A member's next fill, due at group tick `due`.
#[derive(Debug, Clone, Copy)]
struct Fill {
    due: u64,
    rank: Rank,
    slot: usize,
    joins: u32,
}

/// The most buckets the fill wheel has: a block size above it leaves a fill in its bucket
/// for several turns.
const WHEEL_MAX: usize = 4096;

/// The decode group's clock, size and events.
#[derive(Debug, Clone, Default)]
pub(super) struct Group {
    /// Ticks so far: one per `update`.
    pub(super) clock: u64,
    /// Members.
    pub(super) members: usize,
    /// The members' `num_tokens` at `clock`, summed: the decode context of a step.
    pub(super) tokens: u128,
    /// Finishes, by `(tick, rank)`.
    finishes: BinaryHeap<Reverse<Finish>>,
    /// Fills by their tick modulo the number of buckets, each bucket in rank order: a member
    /// fills a block every `block_size` ticks, so with a bucket per tick of a block (the
    /// usual case) its fill stays in one bucket while it decodes, and a tick finds its fills
    /// sorted, without a heap.
    wheel: Vec<Vec<Fill>>,
    /// Scratch: fills that move to another bucket (block sizes above [`WHEEL_MAX`]).
    moved: Vec<Fill>,
    /// Members whose last block is full: the next `schedule()` gives each a block, in rank
    /// order.
    pub(super) needs_block: Vec<Entry>,
    /// The members that `schedule()` gave a block (pass 1 of a full batch), in rank order,
    /// until their decode items are listed.
    pub(super) granted: Vec<Entry>,
    /// The members in rank order, for a host's batch.
    pub(super) lane: Lane,
    /// The ids a host's `update` gave the members, until each takes its own.
    pub(super) log: IdLog,
}

impl Group {
    /// An empty group whose members fill a block every `block_size` ticks.
    pub(super) fn new(block_size: usize) -> Self {
        Self {
            log: IdLog::new(block_size),
            ..Self::default()
        }
    }

    /// Make the running `request` in `slot` (one token left) a member.
    pub(super) fn join(&mut self, request: &mut Request, slot: usize, block_size: usize) {
        request.join_group(self.clock);
        self.lane.join(request, slot, self.clock);
        self.members += 1;
        self.tokens += request.num_tokens();
        let rank = request.rank();
        let computed = request.num_computed;
        if computed == tokens_in(request.table.len(), block_size) {
            self.needs_block.push((rank, slot));
        }
        // Ticks until its computed count next ends a block, and until it has sampled all.
        let into_block = (computed % block_size as u128) as u64;
        let to_fill = block_size as u64 - into_block;
        let to_finish = request.max_new_tokens - request.num_generated();
        self.arm_fill(
            Fill {
                due: self.clock.saturating_add(to_fill),
                rank,
                slot,
                joins: request.joins,
            },
            block_size,
        );
        self.push_finish(request, slot, to_finish);
    }

    /// Take the member `request`, in `slot`, out of the group, its counts brought up to
    /// date (its events stay behind, stale), and its tokens too unless `keep` is `Counts`.
    pub(super) fn leave(&mut self, request: &mut Request, slot: usize, keep: Keep<'_>) {
        let source = match keep {
            Keep::Counts => TokenSource::Unknown,
            Keep::Tokens(sampled) => self.log.source(sampled, slot),
        };
        request.leave_group(self.clock, source);
        self.lane.leave(slot);
        self.members -= 1;
        self.tokens -= request.num_tokens();
    }

    /// One tick: every member computed a token and sampled the next.
    pub(super) fn tick(&mut self) {
        self.clock += 1;
        self.tokens += self.members as u128;
    }

    /// Schedule the finish of the member `request` in `slot`, `ticks` from now.
    pub(super) fn push_finish(&mut self, request: &Request, slot: usize, ticks: u64) {
        self.finishes.push(Reverse(Finish {
            due: self.clock.saturating_add(ticks),
            rank: request.rank(),
            slot,
            joins: request.joins,
        }));
    }

    /// The next finish due by now, if any (stale ones included: see [`Group::is_live`]).
    pub(super) fn pop_finish(&mut self) -> Option<Finish> {
        match self.finishes.peek() {
            Some(Reverse(finish)) if finish.due <= self.clock => {
                self.finishes.pop().map(|Reverse(finish)| finish)
            }
            _ => None,
        }
    }

    /// Whether an event of the membership `(rank, joins)` belongs to the current membership
    /// of `request` (the request in its slot).
    pub(super) fn is_live(rank: Rank, joins: u32, request: &Request) -> bool {
        request.in_group() && request.joins == joins && request.rank() == rank
    }

    /// The members whose token fills a block at this tick, into `out` in rank order; their
    /// next fills are armed, and the fills of memberships that ended are dropped.
    pub(super) fn due_fills(&mut self, requests: &Slab, block_size: usize, out: &mut Vec<Entry>) {
        let buckets = self.wheel.len();
        if buckets == 0 {
            return;
        }
        let (clock, period) = (self.clock, block_size as u64);
        let at = bucket_of(clock, buckets);
        // In place, the kept fills moved down over the dropped ones (taking the bucket out,
        // `retain_mut`ing it and putting it back cost 17 instructions a step more).
        let bucket = &mut self.wheel[at];
        let mut kept = 0;
        for i in 0..bucket.len() {
            let mut fill = bucket[i];
            let live =
                (requests.at(fill.slot)).is_some_and(|r| Self::is_live(fill.rank, fill.joins, r));
            if !live {
                continue; // stale: dropped
            }
            if fill.due == clock {
                out.push((fill.rank, fill.slot));
                // Saturating: a block this large never fills again.
                fill.due = fill.due.saturating_add(period);
                // With a bucket per tick of a block (the usual case) its next fill is in this
                // one; otherwise it moves once the bucket is done.
                if period != buckets as u64 && bucket_of(fill.due, buckets) != at {
                    self.moved.push(fill);
                    continue;
                }
            }
            bucket[kept] = fill;
            kept += 1;
        }
        bucket.truncate(kept);
        if !self.moved.is_empty() {
            let mut moved = std::mem::take(&mut self.moved);
            for fill in moved.drain(..) {
                self.insert_fill(fill);
            }
            self.moved = moved;
        }
    }

    /// Put `fill` in its bucket, in rank order (the wheel is made at the first fill).
    fn arm_fill(&mut self, fill: Fill, block_size: usize) {
        if self.wheel.is_empty() {
            self.wheel
                .resize_with(block_size.clamp(1, WHEEL_MAX), Vec::new);
        }
        self.insert_fill(fill);
    }

    fn insert_fill(&mut self, fill: Fill) {
        let at = bucket_of(fill.due, self.wheel.len());
        let bucket = &mut self.wheel[at];
        let at = bucket.partition_point(|other| other.rank < fill.rank);
        bucket.insert(at, fill);
    }
}

/// The bucket of tick `tick` in a wheel of `buckets`: a mask for the usual power of two,
/// whose remainder is a 64-bit division (tens of cycles) once per fill otherwise.
fn bucket_of(tick: u64, buckets: usize) -> usize {
    let buckets = buckets as u64;
    if buckets & (buckets - 1) == 0 {
        (tick & (buckets - 1)) as usize
    } else {
        (tick % buckets) as usize
    }
}
