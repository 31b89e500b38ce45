//! The step rule: `schedule()` plans one step in the passes of the module docs (decodes,
//! started prefills, admissions), preempting when blocks run out.

use std::cmp::Reverse;
use std::sync::Arc;

use super::batch::{Batch, BatchItem};
use super::block_pool::BlockPool;
use super::counts::{blocks_for, chunk, full_blocks, shortfall, tokens_in};
use super::group::Keep;
use super::request::{Request, RequestState};
use super::scheduler::ServingScheduler;
use crate::CoreError;

/// What a step still has room for while it is planned.
pub(super) struct Room {
    budget: usize,
    prefills: usize,
    /// The decode group's tokens are taken from `budget` (after pass 1): a member preempted
    /// later gives its token back.
    decodes_counted: bool,
}

impl Room {
    /// A step's room before it is planned: the whole token `budget`.
    pub(super) fn new(budget: usize) -> Self {
        Self {
            budget,
            prefills: 0,
            decodes_counted: false,
        }
    }
}

/// The longest chain of cached full blocks of `request`, leaving at least one token to
/// compute, into `hits`: its blocks' content nodes, interned up to the first miss (they serve
/// its registration later), each looked up for a registered block (`ids` is scratch).
fn cached_prefix(
    pool: &mut BlockPool,
    request: &mut Request,
    block_size: usize,
    hits: &mut Vec<usize>,
    ids: &mut Vec<u32>,
) {
    let most = full_blocks(request.num_tokens() - 1, block_size);
    for block in 0..most {
        if request.chain(block + 1, block_size, pool, ids) <= block {
            break; // an unknown token
        }
        match pool.cached(request.node(block)) {
            Some(hit) => hits.push(hit),
            None => break,
        }
    }
}

/// The room an admitted `request`'s table is given once it holds `held` blocks with its first
/// chunk: up to its longest size (its last sampled token is never written), but no more than
/// twice `held`, as doubling would give it: its decodes then append blocks without
/// reallocating it, and no reservation outgrows the blocks it really holds (a huge prompt in
/// a huge pool is planned a chunk at a time).
fn table_room(request: &Request, held: usize, block_size: usize) -> usize {
    let to_come = (request.max_new_tokens).saturating_sub(request.num_generated());
    let longest = blocks_for(request.num_tokens() + u128::from(to_come) - 1, block_size);
    let len = request.table.len();
    longest.min(held.saturating_mul(2)).saturating_sub(len)
}

impl ServingScheduler {
    /// Plan the next step (see the module docs of the step rule): decodes, started
    /// prefills, then admissions. Every batch, even an empty one, awaits its `update`.
    ///
    /// # Errors
    ///
    /// [`CoreError::BatchPending`] while the previous batch awaits `update`.
    pub fn schedule(&mut self) -> Result<&Batch, CoreError> {
        self.plan_step(false)?;
        self.planned()
    }

    /// [`schedule`](Self::schedule) for a driver that reads only the shape of the decodes: the
    /// batch lists its prefill items and counts its decodes (see [`Batch`]), so planning it
    /// costs nothing per decode. Report it with `update`/`update_step` as any batch (aligned
    /// `token_ids` are its prefill items', the decodes' tokens are unknown).
    ///
    /// # Errors
    ///
    /// As [`schedule`](Self::schedule).
    pub fn schedule_lean(&mut self) -> Result<&Batch, CoreError> {
        self.plan_step(true)?;
        self.planned()
    }

    /// The batch just planned. Not `ok_or`: its error would be built and dropped (a call)
    /// every step, about 1 % of a simulation's instructions.
    fn planned(&self) -> Result<&Batch, CoreError> {
        match self.pending_batch() {
            Some(batch) => Ok(batch),
            None => Err(CoreError::BatchNotPending { got: 0 }),
        }
    }

    /// [`schedule`](Self::schedule), returning the batch shared rather than borrowed (a
    /// binding hands it out without copying it).
    ///
    /// # Errors
    ///
    /// As [`schedule`](Self::schedule).
    pub fn schedule_shared(&mut self) -> Result<Arc<Batch>, CoreError> {
        self.plan_step(false)?;
        (self.sealed.clone()).ok_or(CoreError::BatchNotPending { got: 0 })
    }

    /// Plan and seal the next batch, which only `self` holds then (no count to change when
    /// `schedule` borrows it); a `lean` one does not list its decodes.
    fn plan_step(&mut self, lean: bool) -> Result<(), CoreError> {
        if self.pending {
            return Err(CoreError::BatchPending {
                step_index: self.sealed_step(),
            });
        }
        self.reserve_step()?;
        self.recycle_batch();
        self.batch.step_index = self.step_index;
        self.step_index += 1;
        let mut room = Room::new(self.config.token_budget);
        self.plan_decodes(&mut room, lean);
        if !self.prefilling.is_empty() {
            self.plan_started_prefills(&mut room);
        }
        if self.batch.preempted.is_empty() {
            self.admit(&mut room);
        }
        self.seal_batch(lean);
        self.pending = true;
        // Into the `Arc` of an earlier batch when no caller holds it: no allocation per step.
        let mut sealed = self.spare_arc.take().unwrap_or_default();
        std::mem::swap(Arc::make_mut(&mut sealed), &mut self.batch);
        self.sealed = Some(sealed);
        Ok(())
    }

    /// Pass 1: each decode, in rank order, gets 1 token (and a block when its last one is
    /// full), preempting the worst-ranked running requests for that block if needed. The
    /// decodes are the decode group's members: only those whose last block is full are
    /// visited, in rank order; the others' tokens are counted.
    pub(super) fn plan_decodes(&mut self, room: &mut Room, lean: bool) {
        let mut needs = std::mem::take(&mut self.group.needs_block);
        needs.sort_unstable();
        for &(rank, slot) in &needs {
            let member = (self.requests.at(slot)).is_some_and(|r| r.rank() == rank && r.in_group());
            if !member {
                continue; // left the group since: finished, aborted or preempted
            }
            if !self.make_room(slot, 1, room) {
                break; // it was the worst-ranked: nothing follows it
            }
            if let (Some(request), Some(block)) = (self.requests.at_mut(slot), self.pool.allocate())
            {
                request.table.push(block);
                self.deficit -= 1;
                if !lean {
                    request.new_block = Some(block); // for its item, listed at sealing
                    self.group.granted.push((rank, slot));
                }
            }
        }
        needs.clear();
        self.group.needs_block = needs;
        room.budget = room.budget.saturating_sub(self.group.members);
        room.decodes_counted = true;
    }

    /// Pass 2: each running prefill, in rank order, gets `min(left, chunk_size, budget)`
    /// tokens and all their blocks, or is preempted itself.
    fn plan_started_prefills(&mut self, room: &mut Room) {
        let block_size = self.config.block_size;
        let mut at = 0;
        while at < self.prefilling.len() {
            if room.prefills == self.config.max_prefills_per_step || room.budget == 0 {
                break;
            }
            let slot = self.prefilling[at].1;
            let Some(request) = self.requests.at(slot) else {
                break;
            };
            if request.item.is_none() && request.left() > 1 {
                let tokens = chunk(request.left(), self.config.chunk_size, room.budget);
                let end = request.num_computed + tokens as u128;
                let needed = blocks_for(end, block_size) - request.table.len();
                if !self.make_room(slot, needed, room) {
                    break;
                }
                self.plan_item(slot, tokens, true, needed, &[]);
                room.budget -= tokens;
                room.prefills += 1;
            }
            at += 1;
        }
    }

    /// Pass 3: admit waiting requests in rank order while the step has room and each one's
    /// blocks fit beside what running prefills still need and the watermark. The first that
    /// does not fit stops admission; admission never preempts.
    fn admit(&mut self, room: &mut Room) {
        while room.budget > 0
            && room.prefills < self.config.max_prefills_per_step
            && self.running.len() < self.config.max_running
        {
            let Some(&Reverse((rank, slot))) = self.waiting.peek() else {
                break;
            };
            let (_, seq, id) = rank;
            let live = (self.requests.at(slot))
                .is_some_and(|r| r.id == id && r.state == RequestState::Waiting && r.seq == seq);
            if !live {
                self.waiting.pop(); // stale: aborted or finished while waiting
                continue;
            }
            let mut hits = std::mem::take(&mut self.hits);
            hits.clear();
            let admitted = self.admit_one(slot, room, &mut hits);
            self.hits = hits;
            if !admitted {
                break;
            }
        }
    }

    /// Admit the waiting request at the top of the queue, in `slot`, if its blocks fit;
    /// `hits` is scratch for its cache hits.
    fn admit_one(&mut self, slot: usize, room: &mut Room, hits: &mut Vec<usize>) -> bool {
        let block_size = self.config.block_size;
        let running_need = self.deficit as u128;
        let Some(request) = self.requests.at_mut(slot) else {
            return false;
        };
        if self.config.prefix_caching {
            cached_prefix(&mut self.pool, request, block_size, hits, &mut self.ids);
        }
        let free_hits = hits.iter().filter(|&&b| self.pool.is_free_hashed(b));
        let free = (self.pool.num_free() - free_hits.count()) as u128;
        let all_blocks = blocks_for(request.num_tokens(), block_size);
        let own_need = (all_blocks - hits.len()) as u128;
        if own_need + running_need + self.watermark_blocks as u128 > free {
            return false;
        }

        self.waiting.pop();
        self.num_waiting -= 1;
        let cached = tokens_in(hits.len(), block_size);
        for &hit in hits.iter() {
            self.pool.take_hit(hit);
        }
        request.reserve_table(hits.len(), block_size);
        request.table.extend_from_slice(hits);
        request.num_computed = cached;
        request.num_cached_tokens += cached;
        self.num_cached_tokens += cached;
        request.state = RequestState::Running;
        self.deficit += all_blocks - hits.len();
        let entry = (request.rank(), slot);
        let at = self.running.partition_point(|other| *other < entry);
        self.running.insert(at, entry);
        let at = self.prefilling.partition_point(|other| *other < entry);
        self.prefilling.insert(at, entry);

        let tokens = chunk(request.left(), self.config.chunk_size, room.budget);
        let end = request.num_computed + tokens as u128;
        let held = blocks_for(end, block_size);
        let needed = held - request.table.len();
        request.table.reserve(table_room(request, held, block_size));
        self.plan_item(slot, tokens, true, needed, hits);
        room.budget -= tokens;
        room.prefills += 1;
        true
    }

    /// Preempt the worst-ranked running requests until `needed` blocks are free. Returns
    /// false if `requester` (a slot) itself was the worst-ranked and was preempted.
    #[inline]
    fn make_room(&mut self, requester: usize, needed: usize, room: &mut Room) -> bool {
        // The usual case, checked inline: a call per decode cost more than the check.
        self.pool.num_free() >= needed || self.preempt_for(requester, needed, room)
    }

    /// [`make_room`](Self::make_room) once blocks are short.
    #[inline(never)]
    fn preempt_for(&mut self, requester: usize, needed: usize, room: &mut Room) -> bool {
        while self.pool.num_free() < needed {
            let Some(&(_, victim)) = self.running.last() else {
                return false;
            };
            self.preempt_worst(room);
            if victim == requester {
                return false;
            }
        }
        true
    }

    /// Take the blocks of the worst-ranked running request and put it back among the
    /// waiting with its rank; an item it had in this batch leaves it.
    fn preempt_worst(&mut self, room: &mut Room) {
        let Some((rank, slot)) = self.running.pop() else {
            return;
        };
        let block_size = self.config.block_size;
        let Some(request) = self.requests.at_mut(slot) else {
            return;
        };
        request.new_block = None; // released below with its table
        if request.in_group() {
            self.group
                .leave(request, slot, Keep::Tokens(self.sampled.as_ref()));
            if room.decodes_counted {
                room.budget += 1; // its decode leaves the step
            }
        } else if self.prefilling.last() == Some(&(rank, slot)) {
            self.prefilling.pop(); // the worst-ranked running request is the worst prefill
        }
        let short = shortfall(request, block_size);
        self.deficit = self.deficit.saturating_sub(short);
        self.pool.release_table(&request.table);
        request.table.clear();
        request.num_computed = 0;
        request.num_preemptions += 1;
        self.num_preemptions += 1;
        request.state = RequestState::Waiting;
        if let Some(at) = request.item.take() {
            let item = &mut self.batch.items[at];
            room.budget += item.tokens;
            if item.is_prefill {
                room.prefills -= 1;
            }
            item.tokens = 0; // removed; `seal_batch` drops it
        }
        self.waiting.push(Reverse((rank, slot)));
        self.num_waiting += 1;
        self.batch.preempted.push(rank.2);
    }

    /// Append an item for the request in `slot`, allocating `needed` blocks from the head of
    /// the free queue; `hits` are the cache hits it was just admitted with.
    fn plan_item(
        &mut self,
        slot: usize,
        tokens: usize,
        is_prefill: bool,
        needed: usize,
        hits: &[usize],
    ) {
        let Some(request) = self.requests.at_mut(slot) else {
            return;
        };
        // Most decodes take no block: they get an empty vector that owns no memory.
        let mut new_blocks = if needed > 0 || !hits.is_empty() {
            self.spare.pop().unwrap_or_default()
        } else {
            Vec::new()
        };
        new_blocks.reserve(hits.len() + needed);
        new_blocks.extend_from_slice(hits);
        request.reserve_table(needed, self.config.block_size);
        // `make_room` or the admission check made sure the blocks are free.
        self.pool.allocate_into(needed, &mut new_blocks);
        request.table.extend_from_slice(&new_blocks[hits.len()..]);
        // Each block it got is one it no longer lacks.
        self.deficit = self.deficit.saturating_sub(new_blocks.len() - hits.len());
        let start = request.num_computed;
        request.item = Some(self.batch.items.len());
        self.item_slots.push(slot);
        self.batch.push(BatchItem {
            request_id: request.id,
            start,
            tokens,
            is_prefill,
            samples: start + tokens as u128 == request.num_tokens(),
            new_blocks,
            cached_tokens: tokens_in(hits.len(), self.config.block_size),
        });
    }

    /// Drop the items of preempted requests (and their slots), list the decodes in front
    /// unless the batch is `lean`, and fill in the batch's totals.
    fn seal_batch(&mut self, lean: bool) {
        // Only a preemption empties an item; the planned items are tallied as they come.
        if !self.batch.preempted.is_empty() {
            self.drop_emptied_items();
            self.batch.derive();
        }
        if lean {
            self.group.lane.switch_off();
            self.batch.lean = true;
            self.batch.num_decode_tokens = self.group.members;
            self.batch.decode_context_tokens = self.group.tokens;
        } else {
            self.list_decodes();
        }
        self.batch.num_free_blocks = self.pool.num_free();
    }

    /// List the decode group's items in front of the prefill items planned, in rank order,
    /// with the blocks pass 1 gave them: the batch shares the lane's list of the members
    /// (see `batch.rs`), and only the few given a block are visited.
    fn list_decodes(&mut self) {
        let clock = self.group.clock;
        let lane = &mut self.group.lane;
        self.batch
            .list_decodes(lane.members(&self.running, &self.requests, clock), clock);
        // The few given a block, found by slot (a member given one and preempted since is
        // no longer listed, and its block went back with its table).
        for &(rank, slot) in &self.group.granted {
            let Some(at) = lane.position(rank, slot) else {
                continue;
            };
            let request = self.requests.at_mut(slot);
            if let Some(block) = request.and_then(|r| r.new_block.take()) {
                self.batch.give_block(at, block);
            }
        }
        self.group.granted.clear();
        self.batch.decode_context_tokens = self.group.tokens;
    }

    /// Drop the items preemptions emptied, keeping the order of the others and their slots.
    fn drop_emptied_items(&mut self) {
        let mut kept = 0;
        for at in 0..self.batch.items.len() {
            if self.batch.items[at].tokens == 0 {
                let mut blocks = std::mem::take(&mut self.batch.items[at].new_blocks);
                blocks.clear();
                self.spare.push(blocks);
                continue;
            }
            self.batch.items.swap(kept, at);
            self.item_slots.swap(kept, at);
            kept += 1;
        }
        self.batch.items.truncate(kept);
        self.item_slots.truncate(kept);
    }

    /// Empty the batch before last and keep it as the next seal's spare, unless a caller
    /// still holds it. Not the last batch: a loop that rebinds `batch = schedule()` holds the
    /// last one during this very call, and has let go of the one before. The batch planned
    /// into is the one the last seal swapped out of its spare, emptied then: buffers go
    /// round the three batches with one swap a step (a batch is 144 bytes).
    fn recycle_batch(&mut self) {
        let older = std::mem::replace(&mut self.retired, self.sealed.take());
        if let Some(mut older) = older {
            match Arc::get_mut(&mut older) {
                Some(batch) => {
                    empty_batch(batch, &mut self.spare);
                    self.spare_arc = Some(older);
                }
                None => {
                    // Still held: new buffers, sized like the last ones.
                    self.batch.items.reserve(older.items.len());
                    self.batch.sampling_ids.reserve(older.sampling_ids.len());
                }
            }
        }
        debug_assert!(self.batch.items.is_empty() && self.batch.preempted.is_empty());
        self.item_slots.clear();
    }
}

/// Empty `batch`, keeping its buffers; its items' block lists go to `spare`.
fn empty_batch(batch: &mut Batch, spare: &mut Vec<Vec<usize>>) {
    for mut item in batch.items.drain(..) {
        if item.new_blocks.capacity() > 0 {
            item.new_blocks.clear();
            spare.push(item.new_blocks);
        }
    }
    batch.clear();
    batch.preempted.clear();
}
