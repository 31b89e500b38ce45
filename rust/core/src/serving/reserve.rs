//! A step's memory, made sure of before it is planned: the blocks it may allocate bound
//! from above, the pool's records reserved for them, and the block tables they land in
//! given room, so that planning never aborts the process on an allocation and a step too
//! large fails with the scheduler as it was.

use super::counts::{blocks_for, chunk};
use super::request::{Request, RequestState};
use super::scheduler::{Entry, ServingScheduler};
use super::slab::Slab;
use super::ServingConfig;
use crate::CoreError;

/// A step that may allocate at most this many blocks is planned without a reservation: its
/// ids take a few hundred kilobytes, ordinary allocations.
const ORDINARY_STEP: usize = 1 << 14;

impl ServingScheduler {
    /// Make sure the blocks this step may allocate fit in memory before anything changes:
    /// their pool records are reserved, and the room their ids take in block tables and
    /// items is tried (and given back). A step too large fails with
    /// [`CoreError::OutOfMemory`], the scheduler as it was.
    pub(super) fn reserve_step(&mut self) -> Result<(), CoreError> {
        let blocks = self.step_bound();
        if blocks > ORDINARY_STEP {
            self.reserve_tables()?;
        }
        self.reserve_pool(blocks)?;
        if blocks <= ORDINARY_STEP {
            return self.reserve_growing_tables();
        }
        // Each id lands in its item's `new_blocks` and its request's table, which an
        // admission gives room for twice the blocks it holds (see `table_room`).
        let mut ids: Vec<usize> = Vec::new();
        ids.try_reserve_exact(blocks.saturating_mul(3))
            .map_err(|_| too_big(blocks))?;
        Ok(())
    }

    /// [`reserve_step`](Self::reserve_step) for a step that only decodes (nobody waiting,
    /// no prefill running): it takes at most a block for each member whose last block is
    /// full, which is all it reserves (the bound of any step, a budget's worth, is not
    /// worked out).
    pub(super) fn reserve_decode_step(&mut self) -> Result<(), CoreError> {
        self.reserve_pool(self.group.needs_block.len())?;
        self.reserve_decode_tables()
    }

    /// The pool's records for `blocks` blocks taken from the untouched ones (they grow a
    /// step at a time too, doubling at their capacity).
    #[inline(always)]
    fn reserve_pool(&mut self, blocks: usize) -> Result<(), CoreError> {
        if self.pool.try_reserve_fresh(blocks).is_ok() {
            return Ok(());
        }
        if blocks > ORDINARY_STEP {
            return Err(too_big(blocks));
        }
        let touched = self.pool.touched();
        Err(CoreError::OutOfMemory {
            what: format!("schedule(): a pool record for each of {touched} KV blocks in use"),
        })
    }

    /// Give each running request's block table room for the blocks its next item can take
    /// (a table that grows a step at a time doubles at its capacity, by then a large
    /// allocation of its own).
    fn reserve_tables(&mut self) -> Result<(), CoreError> {
        let clock = self.group.clock;
        reserve_items(
            &mut self.requests,
            &self.running,
            self.item_blocks,
            &self.config,
            clock,
        )
    }

    /// [`reserve_tables`](Self::reserve_tables) in an ordinary step, without a pass over
    /// the running requests: before admission (whose new tables are small) only the started
    /// prefills and the decodes whose last block is full can be given blocks. A table's
    /// growth, doubling, was the one allocation of such a step that could abort the process
    /// (a prompt of 2**40 tokens, whose table outgrew the pool's records).
    fn reserve_growing_tables(&mut self) -> Result<(), CoreError> {
        let (clock, most) = (self.group.clock, self.item_blocks);
        reserve_items(
            &mut self.requests,
            &self.prefilling,
            most,
            &self.config,
            clock,
        )?;
        self.reserve_decode_tables()
    }

    /// Room in the table of each decode whose last block is full for the one block its
    /// next item takes (no need to work it out: a division).
    #[inline(always)]
    fn reserve_decode_tables(&mut self) -> Result<(), CoreError> {
        for &(_, slot) in &self.group.needs_block {
            if let Some(request) = self.requests.at_mut(slot) {
                try_grow_table(request, 1)?;
            }
        }
        Ok(())
    }

    /// At least the blocks the next step can allocate: every token of the budget in blocks
    /// of its own plus one partial block per item, and, when that is large, the sum over
    /// the running requests and the admissions the step allows of what each can take.
    /// Cache hits are not counted: they are blocks the pool already holds.
    fn step_bound(&self) -> usize {
        let config = &self.config;
        let admissions = (config.max_prefills_per_step)
            .min(config.max_running.saturating_sub(self.running.len()))
            .min(self.num_waiting);
        let items = self.running.len().saturating_add(admissions);
        let coarse = self.budget_blocks.saturating_add(items);
        if coarse <= ORDINARY_STEP {
            return coarse;
        }
        let (bs, per_item) = (config.block_size, self.item_blocks);
        // Rare (budgets of millions of tokens in small blocks): look at the requests.
        let mut running = 0_usize;
        for &(_, slot) in &self.running {
            if let Some(request) = self.requests.at(slot) {
                let need = next_item_blocks(request, config, self.group.clock);
                running = running.saturating_add(need);
            }
        }
        let (mut waiting_sum, mut waiting_most) = (0_usize, 0_usize);
        if admissions > 0 {
            let waiting = self.requests.values();
            for request in waiting.filter(|r| r.state == RequestState::Waiting) {
                let need = blocks_for(request.num_tokens(), bs).min(per_item);
                waiting_sum = waiting_sum.saturating_add(need);
                waiting_most = waiting_most.max(need);
            }
        }
        let admitted = admissions.saturating_mul(waiting_most).min(waiting_sum);
        coarse.min(running.saturating_add(admitted))
    }
}

/// Room in the block table of each request of `entries` still tracked for the blocks its
/// next item can take, at group clock `clock`; `most` is as many as any item takes, room
/// enough without working out the item's own. Inlined: it runs every step, mostly over
/// no entry or a few, and as a call it cost 1 % of a simulation's instructions.
#[inline(always)]
fn reserve_items(
    requests: &mut Slab,
    entries: &[Entry],
    most: usize,
    config: &ServingConfig,
    clock: u64,
) -> Result<(), CoreError> {
    for &(_, slot) in entries {
        let Some(request) = requests.at_mut(slot) else {
            continue;
        };
        if request.table.capacity() - request.table.len() < most {
            let need = next_item_blocks(request, config, clock);
            try_grow_table(request, need)?;
        }
    }
    Ok(())
}

/// The blocks the next item of the running `request` can add to its table, at group clock
/// `clock`: its next chunk's (or decode's) end, in blocks, beyond those it holds.
fn next_item_blocks(request: &Request, config: &ServingConfig, clock: u64) -> usize {
    let tokens = chunk(request.left(), config.chunk_size, config.token_budget);
    let end = request.computed_at(clock) + tokens as u128;
    blocks_for(end, config.block_size).saturating_sub(request.table.len())
}

/// The error of a step of up to `blocks` blocks that does not fit in memory.
fn too_big(blocks: usize) -> CoreError {
    CoreError::OutOfMemory {
        what: format!("schedule(): a step of up to {blocks} KV blocks"),
    }
}

/// Room in `request`'s block table for `more` blocks, or the error naming it.
fn try_grow_table(request: &mut Request, more: usize) -> Result<(), CoreError> {
    if request.table.capacity() - request.table.len() >= more {
        return Ok(());
    }
    let (id, len) = (request.id, request.table.len().saturating_add(more));
    (request.table.try_reserve(more)).map_err(|_| CoreError::OutOfMemory {
        what: format!("schedule(): the block table of request_id {id} ({len} blocks)"),
    })
}
