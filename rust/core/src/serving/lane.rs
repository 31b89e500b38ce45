//! The decode lane: the decode group's members in rank order, as a host's batch lists them.
//!
//! A host's batch lists every member of the decode group as a decode item, in rank order,
//! every step. Finding them among the running requests read each one's record (a few
//! hundred bytes apiece, scattered over the slab) for its membership, id and count; the lane
//! keeps what an item needs of each member (rank, slot, and its computed count at a known
//! tick, which moves with the group clock) densely, so listing reads one small record per
//! member and no request.
//!
//! It changes only at joins and leaves: a join is appended to a short list of newcomers, a
//! leave marks the member's slot stale in a dense per-slot table, and the next listing
//! sweeps the stale entries out and merges the newcomers in, in one pass over the lane. A
//! batch lists its decodes by sharing the lane's list (see `batch.rs`), so a step whose
//! members did not change lists them all at no cost per member; the list is copied only
//! when it changes while a batch still holds it. The simulator's lean batches never list
//! members, so a lean step switches the lane off (no cost per join or leave); the next full
//! listing rebuilds it from the running requests.

use std::sync::Arc;

use super::request::Request;
use super::scheduler::{Entry, Rank};
use super::slab::Slab;

/// A member as its decode item needs it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Listed {
    pub(super) rank: Rank,
    pub(super) slot: usize,
    /// Its membership's stamp (see [`Lane::stamps`]).
    stamp: u64,
    /// Its `num_computed` at group tick `since`; it computes one position a tick after.
    computed: u128,
    since: u64,
}

impl Listed {
    /// The request id.
    pub(super) fn id(&self) -> u64 {
        self.rank.2
    }

    /// The position it computes at group tick `clock`: its decode item's `start`.
    pub(super) fn start_at(&self, clock: u64) -> u128 {
        self.computed + u128::from(clock - self.since)
    }
}

/// The decode group's members in rank order, kept while full batches are listed.
#[derive(Debug, Clone, Default)]
pub(super) struct Lane {
    /// Whether joins and leaves are recorded: off until a full batch is listed, and after
    /// each lean one.
    kept: bool,
    /// Members in rank order as of the last listing, with those that left since (shared
    /// with the batches that listed them).
    listed: Arc<Vec<Listed>>,
    /// Members that joined since the last listing, in the order they joined.
    joined: Vec<Listed>,
    /// By slot: the stamp of its request's current membership (`None`: not a member). A
    /// stamp is never reused, so an entry of a membership that ended, even one of an
    /// earlier request in the same slot, is recognised as stale without reading a request.
    stamps: Vec<Option<u64>>,
    /// By slot: the index of its member in `listed` (valid where `listed` has that member
    /// there: see [`Lane::position`]).
    positions: Vec<u32>,
    /// The next stamp.
    next_stamp: u64,
    /// Leaves since the last listing.
    left: usize,
}

impl Lane {
    /// The member `request`, in `slot`, joined at group tick `clock`.
    pub(super) fn join(&mut self, request: &Request, slot: usize, clock: u64) {
        if self.kept {
            let listed = self.stamped(request, slot, clock);
            self.joined.push(listed);
        }
    }

    /// The member in `slot` left.
    pub(super) fn leave(&mut self, slot: usize) {
        if self.kept {
            self.stamps[slot] = None;
            self.left += 1;
        }
    }

    /// Stop keeping the lane (a lean batch was listed).
    pub(super) fn switch_off(&mut self) {
        if self.kept {
            *self = Self::default();
        }
    }

    /// The members in rank order at group tick `clock`: brought up to date from the joins
    /// and leaves since the last listing, or rebuilt from the `running` requests (rank order)
    /// when it was not kept.
    pub(super) fn members(
        &mut self,
        running: &[Entry],
        requests: &Slab,
        clock: u64,
    ) -> &Arc<Vec<Listed>> {
        if !self.kept {
            self.rebuild(running, requests, clock);
        } else if self.left > 0 || !self.joined.is_empty() {
            self.refresh();
        }
        &self.listed
    }

    /// The index in the last listing of the member ranked `rank` in `slot`, if listed.
    pub(super) fn position(&self, rank: Rank, slot: usize) -> Option<usize> {
        let at = *self.positions.get(slot)? as usize;
        (self.listed.get(at)).and_then(|member| (member.rank == rank).then_some(at))
    }

    /// Index the members of the listing by slot.
    fn index_positions(&mut self) {
        for (at, member) in self.listed.iter().enumerate() {
            if self.positions.len() <= member.slot {
                self.positions.resize(member.slot + 1, 0);
            }
            self.positions[member.slot] = at as u32;
        }
    }

    /// The live members it records, `(rank, slot, position computed at clock)` in rank
    /// order, or `None` when it is not kept (for the invariant checks).
    pub(super) fn live(&self, clock: u64) -> Option<Vec<(Rank, usize, u128)>> {
        if !self.kept {
            return None;
        }
        let mut live: Vec<_> = (self.listed.iter().chain(&self.joined))
            .filter(|member| self.stamps[member.slot] == Some(member.stamp))
            .map(|member| (member.rank, member.slot, member.start_at(clock)))
            .collect();
        live.sort_unstable_by_key(|&(rank, _, _)| rank);
        Some(live)
    }

    fn stamped(&mut self, request: &Request, slot: usize, clock: u64) -> Listed {
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        if self.stamps.len() <= slot {
            self.stamps.resize(slot + 1, None);
        }
        self.stamps[slot] = Some(stamp);
        Listed {
            rank: request.rank(),
            slot,
            stamp,
            computed: request.computed_at(clock),
            since: clock,
        }
    }

    fn rebuild(&mut self, running: &[Entry], requests: &Slab, clock: u64) {
        *self = Self {
            kept: true,
            ..Self::default()
        };
        let mut listed = Vec::new();
        for &(_, slot) in running {
            if let Some(request) = requests.at(slot).filter(|r| r.in_group()) {
                listed.push(self.stamped(request, slot, clock));
            }
        }
        self.listed = Arc::new(listed);
        self.index_positions();
    }

    /// Sweep out the members that left and merge in those that joined.
    fn refresh(&mut self) {
        let stamps = &self.stamps;
        // Copied first if a batch still lists the members as they were.
        let listed = Arc::make_mut(&mut self.listed);
        if self.left > 0 {
            listed.retain(|member| stamps[member.slot] == Some(member.stamp));
        }
        self.joined
            .retain(|member| stamps[member.slot] == Some(member.stamp));
        self.joined.sort_unstable_by_key(|member| member.rank);
        let in_order = match (listed.last(), self.joined.first()) {
            (Some(last), Some(first)) => last.rank < first.rank,
            _ => true,
        };
        listed.append(&mut self.joined);
        if !in_order {
            // Two sorted runs: the stable sort merges them in one pass.
            listed.sort_by_key(|member| member.rank);
        }
        self.left = 0;
        self.index_positions();
    }
}
