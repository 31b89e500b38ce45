//! [`ServingScheduler`]: its state, the request lifecycle (add, abort, forget) and counters.
//!
//! The step rule is in `step.rs`, `update` in `update.rs`, the invariant checks in
//! `invariants.rs`.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::Arc;

use hashlink::DefaultHashBuilder;

use super::batch::Batch;
use super::block_pool::BlockPool;
use super::config::ServingConfig;
use super::counts::shortfall;
use super::group::{Group, Keep};
use super::request::{Prompt, PromptIds, Request, RequestState, RequestView};
use super::sampled::SampledTokens;
use super::slab::Slab;
use crate::CoreError;

/// `(priority, seq, id)`: the rank of a request, lower first.
pub(super) type Rank = (i64, u64, u64);

/// A rank and the slot of its request.
pub(super) type Entry = (Rank, usize);

/// The serving scheduler: owns requests, the KV-block pool with prefix caching, and
/// preemption, and plans each engine step as a [`Batch`].
///
/// Per-step work is proportional to what the step schedules and to the running requests
/// (at most `max_running`), never to the number waiting: the waiting queue is a heap with
/// lazy deletion and only its best entries are looked at.
#[derive(Debug, Clone)]
pub struct ServingScheduler {
    pub(super) config: ServingConfig,
    pub(super) watermark_blocks: usize,
    /// The token budget in blocks, rounded up, and the most blocks one item can take (a
    /// chunk's, and a partial one): the bounds of a step's allocations (see `reserve.rs`),
    /// worked out once rather than by divisions every step.
    pub(super) budget_blocks: usize,
    pub(super) item_blocks: usize,
    pub(super) pool: BlockPool,
    pub(super) requests: Slab,
    /// Running requests sorted by rank, with their slots.
    pub(super) running: Vec<Entry>,
    /// The running requests that are not members of the decode group (prefills), sorted by
    /// rank: pass 2 walks these, not the decodes.
    pub(super) prefilling: Vec<Entry>,
    /// The decodes (see `group.rs`).
    pub(super) group: Group,
    /// Scratch of `update`: the members that fill a block at this tick.
    pub(super) fills: Vec<Entry>,
    /// Waiting requests; an entry is live while its slot holds its id, waiting, with that seq.
    pub(super) waiting: BinaryHeap<Reverse<Entry>>,
    pub(super) num_waiting: usize,
    /// R: the blocks running requests still need to reach their `num_tokens`, kept up to
    /// date as they grow, get blocks, stop running or join.
    pub(super) deficit: usize,
    pub(super) next_seq: u64,
    /// The index the next batch gets.
    pub(super) step_index: u128,
    /// The batch being planned; between steps, the buffers the next one is planned into.
    pub(super) batch: Batch,
    /// The last batch planned, shared with callers (`schedule_shared`); its buffers return
    /// to `batch` at the next `schedule()` if no caller holds it any more.
    pub(super) sealed: Option<Arc<Batch>>,
    /// The batch before `sealed`, whose buffers the next `schedule()` reuses if no caller
    /// holds it any more.
    pub(super) retired: Option<Arc<Batch>>,
    /// An `Arc` no caller holds, for the next batch to be sealed into.
    pub(super) spare_arc: Option<Arc<Batch>>,
    /// The slot of each item's request, parallel to `batch.items`.
    pub(super) item_slots: Vec<usize>,
    pub(super) pending: bool,
    /// The pending step is a decode-only one planned without a batch
    /// ([`schedule_decodes`](Self::schedule_decodes)).
    pub(super) decodes_pending: bool,
    /// Ids aborted while they had an item in the pending batch.
    pub(super) aborted_pending: HashSet<u64, DefaultHashBuilder>,
    pub(super) num_preemptions: u128,
    pub(super) num_cached_tokens: u128,
    /// Emptied `new_blocks` vectors kept for the next batches.
    pub(super) spare: Vec<Vec<usize>>,
    /// Scratch of `schedule` (cache hits) and `update` (ids, tokens, finished).
    pub(super) hits: Vec<usize>,
    /// The ids of a block that holds generated tokens, interned.
    pub(super) ids: Vec<u32>,
    pub(super) sampling: HashSet<u64, DefaultHashBuilder>,
    pub(super) given: HashMap<u64, u32, DefaultHashBuilder>,
    pub(super) finished_set: HashSet<u64, DefaultHashBuilder>,
    pub(super) finished_out: Vec<u64>,
    /// The tokens requests sample, where known in advance (see `sampled.rs`).
    pub(super) sampled: Option<SampledTokens>,
}

impl ServingScheduler {
    /// A scheduler with every block free and nothing tracked.
    ///
    /// # Errors
    ///
    /// The first rule `config` breaks (see [`ServingConfig::validate`]).
    pub fn new(config: ServingConfig) -> Result<Self, CoreError> {
        config.validate()?;
        let group = Group::new(config.block_size);
        Ok(Self {
            watermark_blocks: config.watermark_blocks(),
            budget_blocks: config.token_budget.div_ceil(config.block_size),
            item_blocks: (config.chunk_size.min(config.token_budget))
                .div_ceil(config.block_size)
                .saturating_add(1),
            pool: BlockPool::new(config.num_blocks, config.block_size),
            config,
            requests: Slab::default(),
            running: Vec::new(),
            prefilling: Vec::new(),
            group,
            fills: Vec::new(),
            waiting: BinaryHeap::new(),
            num_waiting: 0,
            deficit: 0,
            next_seq: 0,
            step_index: 0,
            batch: Batch::default(),
            item_slots: Vec::new(),
            sealed: None,
            retired: None,
            spare_arc: None,
            pending: false,
            decodes_pending: false,
            aborted_pending: HashSet::default(),
            num_preemptions: 0,
            num_cached_tokens: 0,
            spare: Vec::new(),
            hits: Vec::new(),
            ids: Vec::new(),
            sampling: HashSet::default(),
            given: HashMap::default(),
            finished_set: HashSet::default(),
            finished_out: Vec::new(),
            sampled: None,
        })
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &ServingConfig {
        &self.config
    }

    /// Where the tokens requests sample are known in advance (a simulator's workload), the
    /// decode group's members take theirs from `sampled` (`None`: from `update` alone).
    /// Their prompts must be ids, and `update` then needs no ids for them: each lagging
    /// member is given the tokens of its ticks when it is settled (a block it fills, a
    /// preemption, an export), so lean steps ([`schedule_lean`](Self::schedule_lean)) keep
    /// the prefix cache of generated blocks as full steps given the same ids would. Ids
    /// `update` does give are stored as before.
    pub fn set_sampled_tokens(&mut self, sampled: Option<SampledTokens>) {
        self.sampled = sampled;
    }

    // ------------------------------------------------------------------ requests

    /// Track a new request, waiting, ranked by `(priority, order of add_request calls)`.
    /// `cache_salt` is mixed into its first block's hash, so requests with different salts
    /// never share cached blocks.
    ///
    /// # Errors
    ///
    /// In this order: [`CoreError::PromptEmpty`], [`CoreError::MaxNewTokensZero`],
    /// [`CoreError::ServingDuplicate`] (tracked), [`CoreError::RequestPending`] (aborted
    /// while it has an item in the pending batch), [`CoreError::RequestNeverFits`].
    pub fn add_request(
        &mut self,
        request_id: u64,
        prompt: Prompt,
        max_new_tokens: u64,
        priority: i64,
        cache_salt: u64,
    ) -> Result<(), CoreError> {
        let prompt = match prompt {
            Prompt::Tokens(ids) => PromptIds::Known(ids.into()),
            Prompt::Length(len) => PromptIds::Unknown(len),
        };
        let request = Request::new(
            request_id,
            self.next_seq,
            prompt,
            max_new_tokens,
            priority,
            cache_salt,
        );
        let prompt_tokens = request.prompt_len();
        if prompt_tokens == 0 {
            return Err(CoreError::PromptEmpty);
        }
        if max_new_tokens == 0 {
            return Err(CoreError::MaxNewTokensZero);
        }
        if self.requests.contains(request_id) {
            return Err(CoreError::ServingDuplicate { request_id });
        }
        if self.aborted_pending.contains(&request_id) {
            return Err(CoreError::RequestPending {
                request_id,
                step_index: self.sealed_step(),
            });
        }
        // The most tokens it ever holds blocks for: the last sampled token is never written.
        let most = u128::from(prompt_tokens) + u128::from(max_new_tokens) - 1;
        let needed = most.div_ceil(self.config.block_size as u128);
        let usable = self.config.num_blocks.saturating_sub(self.watermark_blocks);
        if needed > usable as u128 {
            return Err(CoreError::RequestNeverFits {
                request_id,
                prompt_tokens,
                max_new_tokens,
                needed,
                block_size: self.config.block_size,
                usable,
                num_blocks: self.config.num_blocks,
                watermark_blocks: self.watermark_blocks,
            });
        }
        self.next_seq = self.next_seq.wrapping_add(1);
        let rank = request.rank();
        let slot = self.requests.insert(request);
        self.waiting.push(Reverse((rank, slot)));
        self.num_waiting += 1;
        Ok(())
    }

    /// Cancel a request at any time: its blocks are freed at once (last to first) and its id
    /// forgotten. If it has an item in the pending batch, `update` skips that item.
    ///
    /// # Errors
    ///
    /// [`CoreError::UnknownRequest`] if the id is not tracked.
    pub fn abort(&mut self, request_id: u64) -> Result<(), CoreError> {
        // Every member of the decode group has an item in a pending batch.
        let member = (self.requests.get(request_id)).is_some_and(Request::in_group);
        let item = self.forget(request_id)?;
        if self.pending && (item.is_some() || member) {
            self.aborted_pending.insert(request_id);
        }
        Ok(())
    }

    /// The block ids of a request, position order (empty while it waits).
    ///
    /// # Errors
    ///
    /// [`CoreError::UnknownRequest`] if the id is not tracked.
    pub fn block_table(&self, request_id: u64) -> Result<&[usize], CoreError> {
        self.tracked(request_id)
            .map(|request| request.table.as_slice())
    }

    /// A snapshot of a request.
    ///
    /// # Errors
    ///
    /// [`CoreError::UnknownRequest`] if the id is not tracked.
    pub fn request(&self, request_id: u64) -> Result<RequestView, CoreError> {
        let clock = self.group.clock;
        self.tracked(request_id).map(|request| request.view(clock))
    }

    /// A tracked request's rank, `(priority, order of add_request)`: lower is served first
    /// (for a driver that orders what it records of some requests as the batch lists them).
    #[must_use]
    pub fn rank_of(&self, request_id: u64) -> Option<(i64, u64)> {
        (self.requests.get(request_id)).map(|request| (request.priority, request.seq))
    }

    /// Whether the id is tracked (waiting or running).
    #[must_use]
    pub fn contains(&self, request_id: u64) -> bool {
        self.requests.contains(request_id)
    }

    /// Tracked requests.
    #[must_use]
    pub fn len(&self) -> usize {
        self.requests.len()
    }

    /// Whether nothing is tracked.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.requests.len() == 0
    }

    fn tracked(&self, request_id: u64) -> Result<&Request, CoreError> {
        self.requests
            .get(request_id)
            .ok_or(CoreError::UnknownRequest { request_id })
    }

    /// Stop tracking a request and free its blocks; returns its item in the pending batch,
    /// if it has one. The record is dropped in its slot: moved out, a request's few hundred
    /// bytes were copied twice for every request a run finishes.
    pub(super) fn forget(&mut self, request_id: u64) -> Result<Option<usize>, CoreError> {
        let unknown = || CoreError::UnknownRequest { request_id };
        let slot = self.requests.slot_of(request_id).ok_or_else(unknown)?;
        let request = self.requests.at_mut(slot).ok_or_else(unknown)?;
        match request.state {
            RequestState::Running => {
                let entry = (request.rank(), slot);
                if let Ok(at) = self.running.binary_search(&entry) {
                    self.running.remove(at);
                }
                if request.in_group() {
                    self.group.leave(request, slot, Keep::Counts); // its tokens go with it
                } else if let Ok(at) = self.prefilling.binary_search(&entry) {
                    self.prefilling.remove(at);
                }
                let short = shortfall(request, self.config.block_size);
                self.deficit = self.deficit.saturating_sub(short);
            }
            RequestState::Waiting => self.num_waiting -= 1,
        }
        self.pool.release_table(&request.table);
        let item = request.item;
        self.requests.discard(slot);
        Ok(item)
    }

    // ------------------------------------------------------------------ counters

    /// Block contents the prefix cache keeps track of (its content tree's live nodes): for
    /// tests and memory checks.
    #[doc(hidden)]
    #[must_use]
    pub fn num_content_nodes(&self) -> usize {
        self.pool.tree().len()
    }

    /// Blocks in the free queue.
    #[must_use]
    pub fn num_free_blocks(&self) -> usize {
        self.pool.num_free()
    }

    /// Requests holding blocks.
    #[must_use]
    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    /// Requests waiting for admission (new or preempted).
    #[must_use]
    pub fn num_waiting(&self) -> usize {
        self.num_waiting
    }

    /// Preemptions so far.
    #[must_use]
    pub fn num_preemptions(&self) -> u128 {
        self.num_preemptions
    }

    /// Tokens found in the prefix cache at admissions so far.
    #[must_use]
    pub fn num_cached_tokens(&self) -> u128 {
        self.num_cached_tokens
    }

    /// The index the next batch gets.
    #[must_use]
    pub fn step_index(&self) -> u128 {
        self.step_index
    }

    /// The batch awaiting `update`, if any.
    #[must_use]
    pub fn pending_batch(&self) -> Option<&Batch> {
        self.sealed
            .as_deref()
            .filter(|_| self.pending && !self.decodes_pending)
    }

    /// The step index of the last batch planned (0 before the first).
    pub(super) fn sealed_step(&self) -> u128 {
        self.sealed.as_ref().map_or(0, |batch| batch.step_index)
    }

    /// Install restored requests (seq order), pool and counters into a new scheduler.
    pub(super) fn restore(
        &mut self,
        requests: impl Iterator<Item = Request>,
        pool: BlockPool,
        [step_index, num_preemptions, num_cached_tokens]: [u128; 3],
    ) {
        let block_size = self.config.block_size;
        for request in requests {
            let rank = request.rank();
            let (state, short) = (request.state, shortfall(&request, block_size));
            let slot = self.requests.insert(request);
            match state {
                RequestState::Running => {
                    self.running.push((rank, slot));
                    self.deficit += short;
                    match self.requests.at_mut(slot) {
                        Some(request) if request.left() == 1 => {
                            self.group.join(request, slot, block_size);
                        }
                        _ => self.prefilling.push((rank, slot)),
                    }
                }
                RequestState::Waiting => {
                    self.waiting.push(Reverse((rank, slot)));
                    self.num_waiting += 1;
                }
            }
            self.next_seq = rank.1.wrapping_add(1);
        }
        self.running.sort_unstable();
        self.prefilling.sort_unstable();
        self.pool = pool;
        self.step_index = step_index;
        self.num_preemptions = num_preemptions;
        self.num_cached_tokens = num_cached_tokens;
    }
}
