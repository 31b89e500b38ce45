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
//! Events wait in a heap ordered by `(tick, rank, kind)`, so those of one `update` come out in
//! the order the decode items are listed (rank order), fill before finish for one request, as
//! an item-by-item `update` applies them. A request leaves the group when it finishes, is
//! preempted or aborted; the events of a membership it left are recognised as stale by its
//! join count. A step therefore costs O(events + prefill items), whatever the number of
//! decodes, unless the caller asks for the decode items themselves (a host's batch lists
//! them; the simulator's lean batch only counts them).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::counts::tokens_in;
use super::request::Request;
use super::scheduler::{Entry, Rank};

/// What happens to a member at a tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum EventKind {
    /// Its token fills its last block.
    Fill,
    /// It finishes.
    Finish,
}

/// An event of one member, due at group tick `due`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Event {
    pub(super) due: u64,
    pub(super) rank: Rank,
    pub(super) kind: EventKind,
    pub(super) slot: usize,
    /// The join count of the membership it belongs to.
    pub(super) joins: u32,
}

/// The decode group's clock, size and events.
#[derive(Debug, Clone, Default)]
pub(super) struct Group {
    /// Ticks so far: one per `update`.
    pub(super) clock: u64,
    /// Members.
    pub(super) members: usize,
    /// The members' `num_tokens` at `clock`, summed: the decode context of a step.
    pub(super) tokens: u128,
    events: BinaryHeap<Reverse<Event>>,
    /// Members whose last block is full: the next `schedule()` gives each a block, in rank
    /// order.
    pub(super) needs_block: Vec<Entry>,
}

impl Group {
    /// Make the running `request` in `slot` (one token left) a member.
    pub(super) fn join(&mut self, request: &mut Request, slot: usize, block_size: usize) {
        request.join_group(self.clock);
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
        self.push(request, slot, EventKind::Fill, to_fill);
        self.push(request, slot, EventKind::Finish, to_finish);
    }

    /// Take the member `request` out of the group, its counts brought up to date.
    pub(super) fn leave(&mut self, request: &mut Request) {
        request.leave_group(self.clock);
        self.members -= 1;
        self.tokens -= request.num_tokens();
    }

    /// One tick: every member computed a token and sampled the next.
    pub(super) fn tick(&mut self) {
        self.clock += 1;
        self.tokens += self.members as u128;
    }

    /// Schedule `kind` for the member `request` in `slot`, `ticks` from now.
    pub(super) fn push(&mut self, request: &Request, slot: usize, kind: EventKind, ticks: u64) {
        self.events.push(Reverse(Event {
            due: self.clock.saturating_add(ticks),
            rank: request.rank(),
            kind,
            slot,
            joins: request.joins,
        }));
    }

    /// The next event due by now, if any (stale ones included: the caller checks them).
    pub(super) fn pop_due(&mut self) -> Option<Event> {
        match self.events.peek() {
            Some(Reverse(event)) if event.due <= self.clock => {
                self.events.pop().map(|Reverse(event)| event)
            }
            _ => None,
        }
    }

    /// Whether `event` belongs to the current membership of `request`.
    pub(super) fn is_live(event: &Event, request: &Request) -> bool {
        request.in_group() && request.joins == event.joins && request.rank() == event.rank
    }
}
