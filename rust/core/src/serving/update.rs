//! `update`: apply the pending batch the engine ran (computed and sampled tokens, block
//! hashes), then free the requests that finished.

use std::sync::Arc;

use std::collections::HashMap;

use hashlink::DefaultHashBuilder;

use super::batch::{Batch, BatchItem};
use super::counts::{full_blocks, shortfall};
use super::group::Group;
use super::lane::Listed;
use super::request::{Request, RequestState};
use super::scheduler::{Entry, ServingScheduler};
use crate::CoreError;

/// The sampled token ids `update` receives.
#[derive(Debug, Clone, Copy)]
pub enum TokenIds<'a> {
    /// The engine does not say: sampled tokens are unknown, so blocks holding them are never
    /// hashed.
    None,
    /// One id per entry of `batch.sampling_ids()`, in that order.
    Aligned(&'a [u32]),
    /// `(request_id, token_id)` pairs for some sampling requests (a later pair for the same id
    /// replaces an earlier one, as in a Python dict).
    ByRequest(&'a [(u64, u32)]),
}

impl ServingScheduler {
    /// Apply the pending batch, which must equal `batch`: every item's request (unless
    /// aborted since) has `num_computed += tokens`, every sampling item gets its token (known
    /// if `token_ids` gives it), full computed blocks are hashed, then finished requests are
    /// freed and forgotten.
    ///
    /// Returns the ids that finished: those of the batch in batch order (reached
    /// `max_new_tokens` or named in `finished`), then the rest of `finished` in its order.
    ///
    /// # Errors
    ///
    /// Checked before any change, in this order: [`CoreError::BatchNotPending`],
    /// [`CoreError::BatchStale`], [`CoreError::TokenIdsLength`] or
    /// [`CoreError::TokenIdsNotSampled`], then [`CoreError::FinishedDuplicate`] for the first
    /// repeat in `finished`, then [`CoreError::UnknownRequest`] for its first untracked id.
    pub fn update(
        &mut self,
        batch: &Batch,
        token_ids: TokenIds<'_>,
        finished: &[u64],
    ) -> Result<&[u64], CoreError> {
        // The pending batch itself (the usual case) is recognised without comparing items.
        let same = |pending: &Batch| std::ptr::eq(pending, batch) || pending == batch;
        self.check_pending(batch.step_index, same)?;
        self.apply(token_ids, finished)
    }

    /// [`update`](Self::update) for a caller that knows it holds the pending batch itself and
    /// names it by its step index.
    ///
    /// # Errors
    ///
    /// As [`update`](Self::update).
    pub fn update_step(
        &mut self,
        step_index: u128,
        token_ids: TokenIds<'_>,
        finished: &[u64],
    ) -> Result<&[u64], CoreError> {
        self.check_pending(step_index, |pending| pending.step_index == step_index)?;
        self.apply(token_ids, finished)
    }

    fn check_pending(&self, got: u128, same: impl Fn(&Batch) -> bool) -> Result<(), CoreError> {
        if !self.pending {
            return Err(CoreError::BatchNotPending { got });
        }
        match self.pending_batch() {
            Some(batch) if same(batch) => {}
            _ => {
                return Err(CoreError::BatchStale {
                    got,
                    expected: self.sealed_step(),
                })
            }
        }
        Ok(())
    }

    fn apply(&mut self, token_ids: TokenIds<'_>, finished: &[u64]) -> Result<&[u64], CoreError> {
        let checked = self.check_update(token_ids, finished);
        if let Err(err) = checked {
            self.given.clear();
            self.finished_set.clear();
            return Err(err);
        }
        // Taken out while its items are applied (no count to change), put back after.
        let Some(batch) = self.sealed.take() else {
            return Ok(&[]);
        };
        let slots = std::mem::take(&mut self.item_slots);
        self.finished_out.clear();
        // The decodes, listed first: their tokens are logged or stored, then the group's
        // clock counts them all and their events (filled blocks, finishes) are applied in
        // rank order.
        let decodes = batch.decode_members();
        if !self.log_decode_tokens(&batch, token_ids) {
            self.group.log.skip(self.group.clock);
            if !matches!(token_ids, TokenIds::None) {
                self.store_decode_tokens(decodes, token_ids);
            }
        }
        self.finish_named_members(finished);
        self.group.tick();
        self.apply_group_events();
        let mut sampled = decodes.len();
        let block_size = self.config.block_size;
        // The prefill items, and their slots.
        for (item, &slot) in batch.items.iter().zip(&slots) {
            // Each item is another request's: advancing, hashing and freeing it item by item
            // registers the same hashes in the same order as pass by pass would (a freed
            // block keeps its hash, and a block another item can register is not shared).
            let token = if item.samples {
                sampled += 1;
                Self::token_of(item.request_id, sampled - 1, token_ids, &self.given)
            } else {
                None
            };
            let Some(request) = self.requests.live_mut(slot, item.request_id) else {
                continue; // aborted since
            };
            self.deficit += advance(request, item, token, block_size);
            // Known before hashing, which does not change them: one look-up of the request.
            let reached = request.num_generated() >= request.max_new_tokens;
            if self.config.prefix_caching && request.has_known_tokens() {
                self.register_blocks(slot, item.start, item.tokens);
            }
            self.finish_item(item.request_id, reached);
            self.join_if_decoding(slot, item.request_id);
        }
        self.sealed = Some(batch);
        for &id in finished {
            if self.forget(id).is_ok() {
                self.finished_out.push(id);
            }
        }
        self.item_slots = slots;
        self.collect_content();
        self.pending = false;
        self.aborted_pending.clear();
        self.given.clear();
        self.finished_set.clear();
        Ok(&self.finished_out)
    }

    /// Free the content nodes no request's chain and no registered block needs any more,
    /// once the content tree has grown enough for it (the end of every `update`). Inlined:
    /// mostly a check, every step.
    #[inline(always)]
    pub(super) fn collect_content(&mut self) {
        if self.pool.wants_collect() {
            let used = self
                .requests
                .values()
                .flat_map(|r| r.nodes().iter().copied());
            self.pool.collect(used);
        }
    }

    /// The checks of `update` on `token_ids` and `finished`; fills `given` and
    /// `finished_set`.
    fn check_update(&mut self, token_ids: TokenIds<'_>, finished: &[u64]) -> Result<(), CoreError> {
        match token_ids {
            TokenIds::None => {}
            TokenIds::Aligned(ids) => {
                let expected = self.pending_batch().map_or(0, Batch::num_sampling);
                if ids.len() != expected {
                    return Err(CoreError::TokenIdsLength {
                        expected,
                        got: ids.len(),
                    });
                }
            }
            TokenIds::ByRequest(pairs) => {
                let Some(batch) = self.sealed.as_ref().map(Arc::clone) else {
                    return Ok(());
                };
                self.sampling.clear();
                self.sampling.extend(batch.sampling_ids().iter().copied());
                for &(request_id, token) in pairs {
                    if !self.sampling.contains(&request_id) {
                        return Err(CoreError::TokenIdsNotSampled {
                            request_id,
                            step_index: batch.step_index,
                        });
                    }
                    self.given.insert(request_id, token);
                }
            }
        }
        // Every repeat before any unknown id: a repeat is a fault of the argument alone (as
        // the twin finds it while converting `finished`), an unknown id one of the state.
        for &request_id in finished {
            if !self.finished_set.insert(request_id) {
                return Err(CoreError::FinishedDuplicate { request_id });
            }
        }
        if let Some(&request_id) = finished.iter().find(|&&id| !self.requests.contains(id)) {
            return Err(CoreError::UnknownRequest { request_id });
        }
        Ok(())
    }

    /// The token `token_ids` gives the `sampled`-th sampling item, request `request_id`.
    fn token_of(
        request_id: u64,
        sampled: usize,
        token_ids: TokenIds<'_>,
        given: &HashMap<u64, u32, DefaultHashBuilder>,
    ) -> Option<u32> {
        match token_ids {
            TokenIds::None => None,
            TokenIds::Aligned(ids) => ids.get(sampled).copied(),
            TokenIds::ByRequest(_) => given.get(&request_id).copied(),
        }
    }

    /// Keep the ids of a full batch's decodes in the id log under their slots, where the
    /// members take them when next settled; `false` (nothing kept) unless `token_ids` gives
    /// every one and the log is on. Ids alongside sampled tokens are stored as they come.
    fn log_decode_tokens(&mut self, batch: &Batch, token_ids: TokenIds<'_>) -> bool {
        let members = batch.decode_members();
        match token_ids {
            TokenIds::Aligned(ids) if !batch.lean && self.sampled.is_none() => {
                let slots = members.iter().map(|member| member.slot);
                self.group.log.write(self.group.clock, slots, ids)
            }
            _ => false,
        }
    }

    /// Store the tokens `token_ids` gives the listed decode `members`, each at its
    /// request's next position: the group's tick then counts them.
    fn store_decode_tokens(&mut self, members: &[Listed], token_ids: TokenIds<'_>) {
        if let TokenIds::Aligned(ids) = token_ids {
            // The usual case, a token for every decode: no look-up per item.
            for (member, &token) in members.iter().zip(ids) {
                self.store_decode_token(member.id(), member.slot, token);
            }
            return;
        }
        for (at, member) in members.iter().enumerate() {
            if let Some(token) = Self::token_of(member.id(), at, token_ids, &self.given) {
                self.store_decode_token(member.id(), member.slot, token);
            }
        }
    }

    /// Store `token` at the next position of decode `request_id` in `slot`, unless it was
    /// aborted since: its counts settled first, then the group's tick counts it.
    #[inline]
    fn store_decode_token(&mut self, request_id: u64, slot: usize, token: u32) {
        let clock = self.group.clock;
        if let Some(request) = self.requests.live_mut(slot, request_id) {
            request.settle(clock, self.group.log.source(self.sampled.as_ref(), slot));
            request.store_token(token);
        }
    }

    /// Members of the decode group named in `update`'s `finished` finish at this tick, in
    /// rank order among the decodes (as their items come).
    fn finish_named_members(&mut self, finished: &[u64]) {
        for &id in finished {
            let Some(slot) = self.requests.slot_of(id) else {
                continue;
            };
            if let Some(request) = self.requests.at(slot).filter(|r| r.in_group()) {
                self.group.push_finish(request, slot, 1);
            }
        }
    }

    /// Apply the decode group's events due at this tick, in rank order, a request's fill
    /// before its finish: a filled block is registered and asks for the next, a finished
    /// member is freed and forgotten.
    pub(super) fn apply_group_events(&mut self) {
        let mut fills = std::mem::take(&mut self.fills);
        fills.clear();
        (self.group).due_fills(&self.requests, self.config.block_size, &mut fills);
        let mut fills_left = fills.iter().copied().peekable();
        loop {
            let finish = self.group.pop_finish();
            // The fills ranked before this finish (all of them once none is left), then it.
            let before = |&(rank, _): &Entry| finish.is_none_or(|f| rank <= f.rank);
            while let Some((_, slot)) = fills_left.next_if(before) {
                self.apply_fill(slot);
            }
            let Some(finish) = finish else {
                break;
            };
            let live = (self.requests.at(finish.slot))
                .filter(|r| Group::is_live(finish.rank, finish.joins, r));
            if let Some(id) = live.map(|r| r.id) {
                self.finished_out.push(id);
                let _ = self.forget(id);
            }
        }
        self.fills = fills;
    }

    /// The member in `slot` filled its last block: it needs another, and the block can enter
    /// the prefix cache.
    fn apply_fill(&mut self, slot: usize) {
        let Some(request) = self.requests.at_mut(slot) else {
            return;
        };
        request.settle(
            self.group.clock,
            self.group.log.source(self.sampled.as_ref(), slot),
        );
        self.deficit += 1;
        self.group.needs_block.push((request.rank(), slot));
        let start = request.num_computed - 1;
        if self.config.prefix_caching && request.has_known_tokens() {
            self.register_blocks(slot, start, 1);
        }
    }

    /// The request in `slot` joins the decode group if it is running with one token left.
    fn join_if_decoding(&mut self, slot: usize, id: u64) {
        let Some(request) = self.requests.live_mut(slot, id) else {
            return; // finished
        };
        if request.state != RequestState::Running || request.left() != 1 {
            return;
        }
        if let Ok(at) = self.prefilling.binary_search(&(request.rank(), slot)) {
            self.prefilling.remove(at);
        }
        self.group.join(request, slot, self.config.block_size);
    }

    /// Register the blocks that computing `tokens` positions from `start` filled in the
    /// prefix cache, while the chain of known tokens of the request in `slot` lasts.
    fn register_blocks(&mut self, slot: usize, start: u128, tokens: usize) {
        let block_size = self.config.block_size;
        let Some(request) = self.requests.at_mut(slot) else {
            return;
        };
        let first = full_blocks(start, block_size);
        let end = full_blocks(start + tokens as u128, block_size);
        let end = end.min(request.table.len());
        if end <= first || request.hashable_blocks(block_size) <= first {
            // Filled no block (most decodes), or no block it fills can be hashed (the
            // chain stopped at an unknown token: an int prompt, say).
            return;
        }
        let registered = request.chain(end, block_size, &mut self.pool, &mut self.ids);
        for block in first..registered {
            self.pool
                .register(request.table[block], request.node(block));
        }
    }

    /// Free and forget request `id` if it `reached` its `max_new_tokens` or was named
    /// finished (in the order `update` returns them).
    fn finish_item(&mut self, id: u64, reached: bool) {
        let named = !self.finished_set.is_empty() && self.finished_set.contains(&id);
        if reached || named {
            self.finished_out.push(id);
            let _ = self.forget(id);
        }
    }
}

/// Computed tokens and the sampled token of the (live) `request` of `item`; returns the
/// blocks this adds to what it still needs.
fn advance(
    request: &mut Request,
    item: &BatchItem,
    token: Option<u32>,
    block_size: usize,
) -> usize {
    request.num_computed += item.tokens as u128;
    request.item = None;
    if !item.samples {
        return 0;
    }
    let before = shortfall(request, block_size);
    request.push_token(token);
    shortfall(request, block_size).saturating_sub(before)
}
