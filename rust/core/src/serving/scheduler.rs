//! [`ServingScheduler`]: the request lifecycle and the step rule of four passes.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};

use hashlink::DefaultHashBuilder;

use super::batch::{Batch, BatchItem};
use super::block_pool::BlockPool;
use super::config::ServingConfig;
use super::request::{Prompt, PromptIds, Request, RequestState, RequestView};
use crate::CoreError;

/// `(priority, seq, id)`: the rank of a request, lower first.
type Rank = (i64, u64, u64);

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

/// What a step still has room for while it is planned.
struct Room {
    budget: usize,
    prefills: usize,
}

/// The serving scheduler: owns requests, the KV-block pool with prefix caching, and
/// preemption, and plans each engine step as a [`Batch`].
///
/// Per-step work is proportional to what the step schedules and to the running requests
/// (at most `max_running`), never to the number waiting: the waiting queue is a heap with
/// lazy deletion and only its best entries are looked at.
#[derive(Debug, Clone)]
pub struct ServingScheduler {
    config: ServingConfig,
    watermark_blocks: usize,
    pub(super) pool: BlockPool,
    pub(super) requests: HashMap<u64, Request, DefaultHashBuilder>,
    /// Running requests sorted by rank.
    running: Vec<Rank>,
    /// Waiting requests; an entry is live while its id is tracked, waiting, with that seq.
    waiting: BinaryHeap<Reverse<Rank>>,
    num_waiting: usize,
    /// R: the blocks running requests still need to reach their `num_tokens`, kept up to
    /// date as they grow, get blocks, stop running or join.
    deficit: usize,
    next_seq: u64,
    /// The index the next batch gets.
    step_index: u128,
    /// The last batch planned; its buffers are reused by the next `schedule()`.
    batch: Batch,
    pending: bool,
    /// Ids aborted while they had an item in the pending batch.
    aborted_pending: HashSet<u64, DefaultHashBuilder>,
    num_preemptions: u128,
    num_cached_tokens: u128,
    /// Emptied `new_blocks` vectors kept for the next batches.
    spare: Vec<Vec<usize>>,
    /// Scratch of `schedule` (cache hits) and `update` (ids, tokens, finished).
    hits: Vec<usize>,
    /// The bytes of the block being hashed.
    message: Vec<u8>,
    sampling: HashSet<u64, DefaultHashBuilder>,
    given: HashMap<u64, u32, DefaultHashBuilder>,
    finished_set: HashSet<u64, DefaultHashBuilder>,
    finished_out: Vec<u64>,
}

/// `ceil(tokens / block_size)`, saturating where a count cannot be a block count.
fn blocks_for(tokens: u128, block_size: usize) -> usize {
    match usize::try_from(tokens) {
        // Counts that fit a machine word take its division, not a 128-bit one.
        Ok(tokens) => tokens.div_ceil(block_size),
        Err(_) => usize::try_from(tokens.div_ceil(block_size as u128)).unwrap_or(usize::MAX),
    }
}

/// `floor(tokens / block_size)`, saturating as [`blocks_for`].
fn full_blocks(tokens: u128, block_size: usize) -> usize {
    match usize::try_from(tokens) {
        Ok(tokens) => tokens / block_size,
        Err(_) => usize::try_from(tokens / block_size as u128).unwrap_or(usize::MAX),
    }
}

/// The tokens `blocks` full blocks hold (in u128: a count of huge blocks can pass `usize`).
fn tokens_in(blocks: usize, block_size: usize) -> u128 {
    blocks as u128 * block_size as u128
}

/// The longest chain of cached full blocks of `request`, leaving at least one token to
/// compute, into `hits`. Hashes are computed only up to the first miss (`message` is scratch).
fn cached_prefix(
    pool: &BlockPool,
    request: &mut Request,
    block_size: usize,
    hits: &mut Vec<usize>,
    message: &mut Vec<u8>,
) {
    let most = full_blocks(request.num_tokens() - 1, block_size);
    for block in 0..most {
        let hit = request.hash_at(block, block_size, message);
        match hit.and_then(|hash| pool.lookup(&hash)) {
            Some(hit) => hits.push(hit),
            None => break,
        }
    }
}

/// The blocks a running `request` still needs to reach its `num_tokens`.
fn shortfall(request: &Request, block_size: usize) -> usize {
    blocks_for(request.num_tokens(), block_size).saturating_sub(request.table.len())
}

/// `min(left, chunk_size, budget left)`.
fn chunk(left: u128, chunk_size: usize, budget: usize) -> usize {
    let cap = chunk_size.min(budget);
    usize::try_from(left).map_or(cap, |left| left.min(cap))
}

impl ServingScheduler {
    /// A scheduler with every block free and nothing tracked.
    ///
    /// # Errors
    ///
    /// The first rule `config` breaks (see [`ServingConfig::validate`]).
    pub fn new(config: ServingConfig) -> Result<Self, CoreError> {
        config.validate()?;
        Ok(Self {
            watermark_blocks: config.watermark_blocks(),
            pool: BlockPool::new(config.num_blocks),
            config,
            requests: HashMap::default(),
            running: Vec::new(),
            waiting: BinaryHeap::new(),
            num_waiting: 0,
            deficit: 0,
            next_seq: 0,
            step_index: 0,
            batch: Batch::default(),
            pending: false,
            aborted_pending: HashSet::default(),
            num_preemptions: 0,
            num_cached_tokens: 0,
            spare: Vec::new(),
            hits: Vec::new(),
            message: Vec::new(),
            sampling: HashSet::default(),
            given: HashMap::default(),
            finished_set: HashSet::default(),
            finished_out: Vec::new(),
        })
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &ServingConfig {
        &self.config
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
            Prompt::Tokens(ids) => PromptIds::Known(ids),
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
        if self.requests.contains_key(&request_id) {
            return Err(CoreError::ServingDuplicate { request_id });
        }
        if self.aborted_pending.contains(&request_id) {
            return Err(CoreError::RequestPending {
                request_id,
                step_index: self.batch.step_index,
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
        self.waiting.push(Reverse(request.rank()));
        self.num_waiting += 1;
        self.requests.insert(request_id, request);
        Ok(())
    }

    /// Cancel a request at any time: its blocks are freed at once (last to first) and its id
    /// forgotten. If it has an item in the pending batch, `update` skips that item.
    ///
    /// # Errors
    ///
    /// [`CoreError::UnknownRequest`] if the id is not tracked.
    pub fn abort(&mut self, request_id: u64) -> Result<(), CoreError> {
        let request = self.forget(request_id)?;
        if self.pending && request.item.is_some() {
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
        self.tracked(request_id).map(Request::view)
    }

    /// Whether the id is tracked (waiting or running).
    #[must_use]
    pub fn contains(&self, request_id: u64) -> bool {
        self.requests.contains_key(&request_id)
    }

    /// Tracked requests.
    #[must_use]
    pub fn len(&self) -> usize {
        self.requests.len()
    }

    /// Whether nothing is tracked.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }

    fn tracked(&self, request_id: u64) -> Result<&Request, CoreError> {
        (self.requests.get(&request_id)).ok_or(CoreError::UnknownRequest { request_id })
    }

    /// Stop tracking a request and free its blocks.
    fn forget(&mut self, request_id: u64) -> Result<Request, CoreError> {
        let mut request =
            (self.requests.remove(&request_id)).ok_or(CoreError::UnknownRequest { request_id })?;
        match request.state {
            RequestState::Running => {
                if let Ok(at) = self.running.binary_search(&request.rank()) {
                    self.running.remove(at);
                }
                let short = shortfall(&request, self.config.block_size);
                self.deficit = self.deficit.saturating_sub(short);
            }
            RequestState::Waiting => self.num_waiting -= 1,
        }
        self.free_blocks(&mut request);
        Ok(request)
    }

    /// Release a request's blocks from its last to its first.
    fn free_blocks(&mut self, request: &mut Request) {
        for &block in request.table.iter().rev() {
            self.pool.release(block);
        }
        request.table.clear();
    }

    // ------------------------------------------------------------------ counters

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
        self.pending.then_some(&self.batch)
    }

    // ------------------------------------------------------------------ schedule

    /// Plan the next step (see the module docs of the step rule): decodes, started
    /// prefills, then admissions. Every batch, even an empty one, awaits its `update`.
    ///
    /// # Errors
    ///
    /// [`CoreError::BatchPending`] while the previous batch awaits `update`.
    pub fn schedule(&mut self) -> Result<&Batch, CoreError> {
        if self.pending {
            return Err(CoreError::BatchPending {
                step_index: self.batch.step_index,
            });
        }
        self.recycle_batch();
        self.batch.step_index = self.step_index;
        self.step_index += 1;
        let mut room = Room {
            budget: self.config.token_budget,
            prefills: 0,
        };
        self.plan_decodes(&mut room);
        self.plan_started_prefills(&mut room);
        if self.batch.preempted.is_empty() {
            self.admit(&mut room);
        }
        self.seal_batch();
        self.pending = true;
        Ok(&self.batch)
    }

    /// Pass 1: each decode, in rank order, gets 1 token (and a block when its last one is
    /// full), preempting the worst-ranked running requests for that block if needed.
    fn plan_decodes(&mut self, room: &mut Room) {
        let block_size = self.config.block_size;
        let mut at = 0;
        while at < self.running.len() {
            let id = self.running[at].2;
            let request = &self.requests[&id];
            if request.left() == 1 {
                let needs = request.num_computed == tokens_in(request.table.len(), block_size);
                if !self.make_room(id, usize::from(needs), room) {
                    break; // it was the worst-ranked: nothing follows it
                }
                self.plan_item(id, 1, false, usize::from(needs), &[]);
                room.budget = room.budget.saturating_sub(1);
            }
            at += 1;
        }
    }

    /// Pass 2: each running prefill, in rank order, gets `min(left, chunk_size, budget)`
    /// tokens and all their blocks, or is preempted itself.
    fn plan_started_prefills(&mut self, room: &mut Room) {
        let block_size = self.config.block_size;
        let mut at = 0;
        while at < self.running.len() {
            if room.prefills == self.config.max_prefills_per_step || room.budget == 0 {
                break;
            }
            let id = self.running[at].2;
            let request = &self.requests[&id];
            if request.item.is_none() && request.left() > 1 {
                let tokens = chunk(request.left(), self.config.chunk_size, room.budget);
                let end = request.num_computed + tokens as u128;
                let needed = blocks_for(end, block_size) - request.table.len();
                if !self.make_room(id, needed, room) {
                    break;
                }
                self.plan_item(id, tokens, true, needed, &[]);
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
        let block_size = self.config.block_size;
        while room.budget > 0
            && room.prefills < self.config.max_prefills_per_step
            && self.running.len() < self.config.max_running
        {
            let Some(&Reverse(rank)) = self.waiting.peek() else {
                break;
            };
            let (_, seq, id) = rank;
            let live = (self.requests.get(&id))
                .is_some_and(|r| r.state == RequestState::Waiting && r.seq == seq);
            if !live {
                self.waiting.pop(); // stale: aborted or finished while waiting
                continue;
            }
            let running_need = self.deficit as u128;
            let mut hits = std::mem::take(&mut self.hits);
            hits.clear();
            let Some(request) = self.requests.get_mut(&id) else {
                self.hits = hits;
                break;
            };
            if self.config.prefix_caching {
                cached_prefix(
                    &self.pool,
                    request,
                    block_size,
                    &mut hits,
                    &mut self.message,
                );
            }
            let free_hits = hits.iter().filter(|&&b| self.pool.ref_count(b) == 0);
            let free = (self.pool.num_free() - free_hits.count()) as u128;
            let all_blocks = blocks_for(request.num_tokens(), block_size);
            let own_need = (all_blocks - hits.len()) as u128;
            if own_need + running_need + self.watermark_blocks as u128 > free {
                self.hits = hits;
                break;
            }

            self.waiting.pop();
            self.num_waiting -= 1;
            let cached = tokens_in(hits.len(), block_size);
            for &hit in &hits {
                self.pool.take_hit(hit);
            }
            request.table.extend_from_slice(&hits);
            request.num_computed = cached;
            request.num_cached_tokens += cached;
            self.num_cached_tokens += cached;
            request.state = RequestState::Running;
            self.deficit += all_blocks - hits.len();
            let at = self.running.partition_point(|other| *other < rank);
            self.running.insert(at, rank);

            let tokens = chunk(request.left(), self.config.chunk_size, room.budget);
            let end = request.num_computed + tokens as u128;
            let needed = blocks_for(end, block_size) - request.table.len();
            self.plan_item(id, tokens, true, needed, &hits);
            room.budget -= tokens;
            room.prefills += 1;
            self.hits = hits;
        }
    }

    /// Preempt the worst-ranked running requests until `needed` blocks are free. Returns
    /// false if `requester` itself was the worst-ranked and was preempted.
    fn make_room(&mut self, requester: u64, needed: usize, room: &mut Room) -> bool {
        while self.pool.num_free() < needed {
            let Some(&(_, _, victim)) = self.running.last() else {
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
        let Some(rank) = self.running.pop() else {
            return;
        };
        let Some(mut request) = self.requests.remove(&rank.2) else {
            return;
        };
        let short = shortfall(&request, self.config.block_size);
        self.deficit = self.deficit.saturating_sub(short);
        self.free_blocks(&mut request);
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
        self.requests.insert(rank.2, request);
        self.waiting.push(Reverse(rank));
        self.num_waiting += 1;
        self.batch.preempted.push(rank.2);
    }

    /// Append an item for `id`, allocating `needed` blocks from the head of the free queue;
    /// `hits` are the cache hits it was just admitted with.
    fn plan_item(
        &mut self,
        id: u64,
        tokens: usize,
        is_prefill: bool,
        needed: usize,
        hits: &[usize],
    ) {
        let Some(request) = self.requests.get_mut(&id) else {
            return;
        };
        let mut new_blocks = self.spare.pop().unwrap_or_default();
        new_blocks.extend_from_slice(hits);
        for _ in 0..needed {
            // `make_room` or the admission check made sure the blocks are free.
            if let Some(block) = self.pool.allocate() {
                request.table.push(block);
                new_blocks.push(block);
                self.deficit = self.deficit.saturating_sub(1);
            }
        }
        let start = request.num_computed;
        request.item = Some(self.batch.items.len());
        self.batch.items.push(BatchItem {
            request_id: id,
            start,
            tokens,
            is_prefill,
            samples: start + tokens as u128 == request.num_tokens(),
            new_blocks,
            cached_tokens: tokens_in(hits.len(), self.config.block_size),
        });
    }

    /// Drop the items of preempted requests and fill in the batch's totals.
    fn seal_batch(&mut self) {
        let spare = &mut self.spare;
        self.batch.items.retain_mut(|item| {
            if item.tokens > 0 {
                return true;
            }
            let mut blocks = std::mem::take(&mut item.new_blocks);
            blocks.clear();
            spare.push(blocks);
            false
        });
        self.batch.derive();
        self.batch.num_free_blocks = self.pool.num_free();
    }

    /// Empty the last batch, keeping its buffers.
    fn recycle_batch(&mut self) {
        for mut item in self.batch.items.drain(..) {
            if item.new_blocks.capacity() > 0 {
                item.new_blocks.clear();
                self.spare.push(item.new_blocks);
            }
        }
        self.batch.preempted.clear();
    }

    // ------------------------------------------------------------------ update

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
        self.check_pending(batch.step_index, |pending| pending == batch)?;
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
        if !same(&self.batch) {
            return Err(CoreError::BatchStale {
                got,
                expected: self.batch.step_index,
            });
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
        let batch = std::mem::take(&mut self.batch);
        self.advance(&batch, token_ids);
        if self.config.prefix_caching {
            self.hash_blocks(&batch);
        }
        self.finish(&batch, finished);
        self.batch = batch;
        self.pending = false;
        self.aborted_pending.clear();
        self.given.clear();
        self.finished_set.clear();
        Ok(&self.finished_out)
    }

    /// The checks of `update` on `token_ids` and `finished`; fills `given` and
    /// `finished_set`.
    fn check_update(&mut self, token_ids: TokenIds<'_>, finished: &[u64]) -> Result<(), CoreError> {
        match token_ids {
            TokenIds::None => {}
            TokenIds::Aligned(ids) => {
                let expected = self.batch.sampling_ids.len();
                if ids.len() != expected {
                    return Err(CoreError::TokenIdsLength {
                        expected,
                        got: ids.len(),
                    });
                }
            }
            TokenIds::ByRequest(pairs) => {
                self.sampling.clear();
                self.sampling
                    .extend(self.batch.sampling_ids.iter().copied());
                for &(request_id, token) in pairs {
                    if !self.sampling.contains(&request_id) {
                        return Err(CoreError::TokenIdsNotSampled {
                            request_id,
                            step_index: self.batch.step_index,
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
        if let Some(&request_id) = finished.iter().find(|id| !self.requests.contains_key(id)) {
            return Err(CoreError::UnknownRequest { request_id });
        }
        Ok(())
    }

    /// Computed tokens and sampled tokens of the batch's (not aborted) requests.
    fn advance(&mut self, batch: &Batch, token_ids: TokenIds<'_>) {
        let mut sampled = 0;
        for item in &batch.items {
            let token = if item.samples {
                sampled += 1;
                match token_ids {
                    TokenIds::None => None,
                    TokenIds::Aligned(ids) => ids.get(sampled - 1).copied(),
                    TokenIds::ByRequest(_) => self.given.get(&item.request_id).copied(),
                }
            } else {
                None
            };
            if let Some(request) = self.requests.get_mut(&item.request_id) {
                request.num_computed += item.tokens as u128;
                request.item = None;
                if item.samples {
                    let before = shortfall(request, self.config.block_size);
                    request.push_token(token);
                    self.deficit +=
                        shortfall(request, self.config.block_size).saturating_sub(before);
                }
            }
        }
    }

    /// Register the hashes of the blocks each item filled, in item order, while each
    /// request's chain of known tokens lasts.
    fn hash_blocks(&mut self, batch: &Batch) {
        let block_size = self.config.block_size;
        for item in &batch.items {
            let Some(request) = self.requests.get_mut(&item.request_id) else {
                continue;
            };
            let first = full_blocks(item.start, block_size);
            let end = full_blocks(item.start + item.tokens as u128, block_size);
            let end = end.min(request.table.len());
            let hashed = request.chain(end, block_size, &mut self.message);
            for block in first..hashed {
                self.pool
                    .register(request.table[block], request.hash(block));
            }
        }
    }

    /// Free and forget the requests that finished, in the order `update` returns them.
    fn finish(&mut self, batch: &Batch, finished: &[u64]) {
        self.finished_out.clear();
        for item in &batch.items {
            let id = item.request_id;
            let Some(request) = self.requests.get(&id) else {
                continue;
            };
            if request.num_generated() >= request.max_new_tokens || self.finished_set.contains(&id)
            {
                self.finished_out.push(id);
                let _ = self.forget(id);
            }
        }
        for &id in finished {
            if self.forget(id).is_ok() {
                self.finished_out.push(id);
            }
        }
    }

    /// Install restored requests (seq order), pool and counters into a new scheduler.
    pub(super) fn restore(
        &mut self,
        requests: impl Iterator<Item = Request>,
        pool: BlockPool,
        [step_index, num_preemptions, num_cached_tokens]: [u128; 3],
    ) {
        for request in requests {
            let rank = request.rank();
            match request.state {
                RequestState::Running => {
                    self.running.push(rank);
                    self.deficit += shortfall(&request, self.config.block_size);
                }
                RequestState::Waiting => {
                    self.waiting.push(Reverse(rank));
                    self.num_waiting += 1;
                }
            }
            self.next_seq = rank.1.wrapping_add(1);
            self.requests.insert(rank.2, request);
        }
        self.running.sort_unstable();
        self.pool = pool;
        self.step_index = step_index;
        self.num_preemptions = num_preemptions;
        self.num_cached_tokens = num_cached_tokens;
    }

    // ------------------------------------------------------------------ checks

    /// Check every invariant of the scheduler (for tests): blocks free xor held with ref
    /// counts equal to their holders, table sizes, queues and counters.
    ///
    /// # Errors
    ///
    /// A description of the first broken invariant.
    #[doc(hidden)]
    pub fn check_invariants(&self) -> Result<(), String> {
        let block_size = self.config.block_size;
        let mut owners: HashMap<usize, usize> = HashMap::new();
        let mut planned: HashMap<u64, usize> = HashMap::new();
        if self.pending {
            for item in &self.batch.items {
                planned.insert(item.request_id, item.tokens);
            }
        }
        let mut running = 0;
        for (&id, request) in &self.requests {
            let mut seen = HashSet::new();
            for &block in &request.table {
                if !seen.insert(block) {
                    return Err(format!("request {id} holds block {block} twice"));
                }
                *owners.entry(block).or_default() += 1;
            }
            let tokens = planned.get(&id).copied().unwrap_or(0) as u128;
            let want = blocks_for(request.num_computed + tokens, block_size);
            match request.state {
                RequestState::Running => {
                    running += 1;
                    if request.table.len() != want {
                        return Err(format!(
                            "request {id} holds {} blocks, not {want}",
                            request.table.len()
                        ));
                    }
                    if request.num_computed + tokens > request.num_tokens()
                        || (tokens == 0 && request.num_computed >= request.num_tokens())
                    {
                        return Err(format!("request {id} computed past its tokens"));
                    }
                    if self.running.binary_search(&request.rank()).is_err() {
                        return Err(format!("running request {id} not in the running list"));
                    }
                }
                RequestState::Waiting => {
                    if !request.table.is_empty() || request.num_computed != 0 || tokens != 0 {
                        return Err(format!("waiting request {id} holds blocks or work"));
                    }
                }
            }
            if request.num_generated() >= request.max_new_tokens {
                return Err(format!("request {id} should have finished"));
            }
        }
        if running != self.running.len() || self.running.len() > self.config.max_running {
            return Err("running list and running requests disagree".into());
        }
        if !self.running.windows(2).all(|pair| pair[0] < pair[1]) {
            return Err("running list not sorted by rank".into());
        }
        let deficit: usize = (self.requests.values())
            .filter(|request| request.state == RequestState::Running)
            .map(|request| shortfall(request, block_size))
            .sum();
        if deficit != self.deficit {
            return Err(format!(
                "deficit {} but running requests need {deficit}",
                self.deficit
            ));
        }
        if self.requests.len() - running != self.num_waiting {
            return Err("num_waiting disagrees".into());
        }
        if self.pending {
            let tokens = self.batch.num_prefill_tokens + self.batch.num_decode_tokens;
            if tokens > self.config.token_budget {
                return Err(format!("batch carries {tokens} tokens, above the budget"));
            }
        }
        self.pool.check(&owners)
    }
}
