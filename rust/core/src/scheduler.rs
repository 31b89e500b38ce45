//! [`ChunkedPrefillScheduler`]: plans each engine step.

use std::collections::{BTreeMap, HashMap};

use hashlink::{DefaultHashBuilder, LinkedHashSet};

use crate::{Chunk, ChunkedPrefillConfig, ChunkedStep, CoreError, PrefillChunkState};

/// A tracked request: its state and the enqueue number that tells a current entry of the
/// completed list from one left behind by an aborted request of the same id.
#[derive(Debug, Clone)]
struct Slot {
    state: PrefillChunkState,
    seq: u64,
}

/// The largest counter value [`ChunkedPrefillScheduler::from_parts`] restores: `2**127 - 1`,
/// so that even 2**63 further steps of `usize::MAX` tokens each cannot wrap a 128-bit counter.
pub const COUNTER_MAX: u128 = (1 << 127) - 1;

/// The scheduler's counters, as exported by [`ChunkedPrefillScheduler::counters`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counters {
    /// The index the next step will get (the number of `next_step` calls so far).
    pub step_index: u128,
    /// Prefill chunks planned so far.
    pub chunks_scheduled: u128,
    /// Prompt tokens planned so far (cached tokens excluded).
    pub tokens_prefilled: u128,
}

/// Scheduler that splits long prompts into fixed-size chunks and optionally
/// interleaves decode requests within each step.
///
/// # Design notes
///
/// - Every tracked request lives in one map by id. Requests that have received a chunk sit
///   in an ordered set in the order they started; requests not yet started sit in
///   per-priority FIFO buckets of an ordered map; completed ones in a list. So `enqueue`,
///   `next_step` and `abort` touch only the requests they schedule or name: O(1) amortised
///   with one priority level, O(log p) with p distinct priorities waiting, whatever the
///   number of completed-but-undrained requests.
/// - Completed states are retained until [`drain_completed`](Self::drain_completed) is
///   called, which mirrors the explicit lifecycle in production schedulers.
/// - All mutating methods are `&mut self`; callers that share a scheduler between threads
///   wrap it in their own lock.
#[derive(Debug, Clone)]
pub struct ChunkedPrefillScheduler {
    config: ChunkedPrefillConfig,
    /// Every tracked request (including completed ones until drained).
    states: HashMap<u64, Slot, DefaultHashBuilder>,
    /// Started, incomplete requests, in the order they started.
    running: LinkedHashSet<u64>,
    /// Requests not yet started: FIFO buckets keyed by priority (lower first).
    waiting: BTreeMap<i64, LinkedHashSet<u64>>,
    /// Completed requests as `(id, seq)`, in completion order; stale entries (aborted) are
    /// skipped when draining.
    completed: Vec<(u64, u64)>,
    /// Tracked requests with prefill work left.
    incomplete: usize,
    next_seq: u64,
    /// Monotonically increasing step counter.
    step_counter: u128,
    /// Cumulative number of prefill chunks emitted.
    chunks_scheduled: u128,
    /// Cumulative number of tokens prefilled across all requests.
    tokens_prefilled: u128,
}

impl ChunkedPrefillScheduler {
    /// Create a new scheduler with the given configuration.
    ///
    /// # Errors
    ///
    /// The first rule `config` breaks (see [`ChunkedPrefillConfig::validate`]).
    pub fn new(config: ChunkedPrefillConfig) -> Result<Self, CoreError> {
        config.validate()?;
        Ok(Self {
            config,
            states: HashMap::default(),
            running: LinkedHashSet::new(),
            waiting: BTreeMap::new(),
            completed: Vec::new(),
            incomplete: 0,
            next_seq: 0,
            step_counter: 0,
            chunks_scheduled: 0,
            tokens_prefilled: 0,
        })
    }

    /// The scheduler's configuration.
    #[must_use]
    pub fn config(&self) -> &ChunkedPrefillConfig {
        &self.config
    }

    /// Enqueue `request_id` for chunked prefill of `total_tokens` prompt tokens.
    ///
    /// The request will be scheduled FIFO after any currently active prefill
    /// requests.
    ///
    /// # Errors
    ///
    /// [`CoreError::InvalidTotalTokens`] for an empty prompt,
    /// [`CoreError::DuplicateRequest`] if `request_id` is already tracked.
    pub fn enqueue(&mut self, request_id: u64, total_tokens: usize) -> Result<(), CoreError> {
        self.enqueue_with(request_id, total_tokens, 0, 0)
    }

    /// Enqueue a request whose first `cached_tokens` prompt tokens are already in the
    /// engine's prefix cache, at `priority` (lower starts first; ties in enqueue order).
    ///
    /// Prefill starts at `cached_tokens`; a fully cached prompt still gets its last token
    /// computed (one 1-token chunk), since the engine needs that token's logits.
    ///
    /// # Errors
    ///
    /// [`CoreError::InvalidTotalTokens`], [`CoreError::CachedExceedsTotal`] or
    /// [`CoreError::DuplicateRequest`], in that order.
    pub fn enqueue_with(
        &mut self,
        request_id: u64,
        total_tokens: usize,
        cached_tokens: usize,
        priority: i64,
    ) -> Result<(), CoreError> {
        let state =
            PrefillChunkState::with_prefix(request_id, total_tokens, cached_tokens, priority)?;
        if self.states.contains_key(&request_id) {
            return Err(CoreError::DuplicateRequest { request_id });
        }
        self.insert_waiting(state);
        Ok(())
    }

    fn insert_slot(&mut self, state: PrefillChunkState) -> u64 {
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        self.states.insert(state.request_id, Slot { state, seq });
        seq
    }

    fn insert_waiting(&mut self, state: PrefillChunkState) {
        let (id, priority) = (state.request_id, state.priority);
        self.insert_slot(state);
        self.waiting.entry(priority).or_default().insert(id);
        self.incomplete += 1;
    }

    /// Take the first waiting request in scheduling order out of its bucket.
    fn pop_waiting(&mut self) -> Option<u64> {
        let mut entry = self.waiting.first_entry()?;
        let id = entry.get_mut().pop_front();
        if entry.get().is_empty() {
            entry.remove();
        }
        id
    }

    /// Return the next [`ChunkedStep`] to execute.
    ///
    /// **Decodes first**: when `config.interleave_decode` is `true`, `decode_tokens` is
    /// `min(config.max_decode_tokens, active_decode_count)` (and at most `token_budget`);
    /// otherwise 0.
    ///
    /// **Prefill**: the rest of the step (`chunk_size` tokens for one request in the
    /// original mode; `token_budget - decode_tokens` tokens shared by up to
    /// `max_prefills_per_step` requests in budgeted mode) goes to requests in scheduling
    /// order: started ones in the order they started, then waiting ones by priority and
    /// enqueue order, each receiving `min(remaining, chunk_size, budget left)` tokens.
    /// States are advanced immediately so the caller does not need to report completion
    /// back.
    ///
    /// Returns a **pure decode step** (prefill fields zeroed, `prefill_request_id
    /// = None`) when there is no active prefill work.
    pub fn next_step(&mut self, active_decode_count: usize) -> ChunkedStep {
        let step_index = self.step_counter;
        self.step_counter += 1;
        let config = &self.config;
        let mut decode_tokens = if config.interleave_decode {
            active_decode_count.min(config.max_decode_tokens)
        } else {
            0
        };
        let mut left = match config.token_budget {
            None => config.chunk_size,
            Some(budget) => {
                decode_tokens = decode_tokens.min(budget);
                budget - decode_tokens
            }
        };
        let (chunk_size, cap) = (config.chunk_size, config.max_prefills_per_step);
        let mut chunks: Vec<Chunk> = Vec::with_capacity(cap.min(8));
        let mut prefill_tokens: usize = 0;

        // Started requests first, in the order they started.
        let mut finished = 0;
        for &id in self.running.iter().take(cap) {
            if left == 0 {
                break;
            }
            let Some(slot) = self.states.get_mut(&id) else {
                continue;
            };
            let chunk = Self::advance(&mut slot.state, chunk_size, left);
            left -= chunk.tokens;
            prefill_tokens += chunk.tokens;
            if chunk.is_last {
                self.completed.push((id, slot.seq));
                finished += 1;
            }
            chunks.push(chunk);
        }
        if finished > 0 {
            for chunk in &chunks {
                if chunk.is_last {
                    self.running.remove(&chunk.request_id);
                }
            }
            self.incomplete -= finished;
        }

        // Then requests not yet started, by priority and enqueue order.
        while chunks.len() < cap && left > 0 {
            let Some(id) = self.pop_waiting() else {
                break;
            };
            let Some(slot) = self.states.get_mut(&id) else {
                continue;
            };
            let chunk = Self::advance(&mut slot.state, chunk_size, left);
            left -= chunk.tokens;
            prefill_tokens += chunk.tokens;
            if chunk.is_last {
                self.completed.push((id, slot.seq));
                self.incomplete -= 1;
            } else {
                self.running.insert(id);
            }
            chunks.push(chunk);
        }

        self.chunks_scheduled += chunks.len() as u128;
        self.tokens_prefilled += prefill_tokens as u128;
        ChunkedStep::assemble(step_index, decode_tokens, chunks, prefill_tokens)
    }

    /// Give `state` its next chunk: `min(remaining, chunk_size, left)` tokens.
    fn advance(state: &mut PrefillChunkState, chunk_size: usize, left: usize) -> Chunk {
        let start = state.processed_tokens;
        let tokens = state.remaining().min(chunk_size).min(left);
        state.advance(tokens);
        Chunk {
            request_id: state.request_id,
            start,
            tokens,
            is_last: state.is_complete,
        }
    }

    /// Stop tracking `request_id` wherever it is (waiting, mid-prefill or completed) and
    /// return its last state.
    ///
    /// # Errors
    ///
    /// [`CoreError::UnknownRequest`] if `request_id` is not tracked.
    pub fn abort(&mut self, request_id: u64) -> Result<PrefillChunkState, CoreError> {
        let Some(slot) = self.states.remove(&request_id) else {
            return Err(CoreError::UnknownRequest { request_id });
        };
        let state = slot.state;
        if state.is_complete {
            // Its entry in `completed` is now stale and skipped by `drain_completed`.
            return Ok(state);
        }
        self.incomplete -= 1;
        if !self.running.remove(&request_id) {
            if let Some(bucket) = self.waiting.get_mut(&state.priority) {
                bucket.remove(&request_id);
                if bucket.is_empty() {
                    self.waiting.remove(&state.priority);
                }
            }
        }
        Ok(state)
    }

    /// The progress of `request_id`, or `None` if it is not tracked.
    #[must_use]
    pub fn state(&self, request_id: u64) -> Option<&PrefillChunkState> {
        self.states.get(&request_id).map(|slot| &slot.state)
    }

    /// Whether `request_id` is tracked.
    #[must_use]
    pub fn contains(&self, request_id: u64) -> bool {
        self.states.contains_key(&request_id)
    }

    /// Number of requests currently tracked (including completed ones not yet
    /// drained).
    #[must_use]
    pub fn active_count(&self) -> usize {
        self.states.len()
    }

    /// Number of tracked requests with prefill work left.
    #[must_use]
    pub fn incomplete_count(&self) -> usize {
        self.incomplete
    }

    /// `true` when there are no incomplete prefill requests.
    ///
    /// Note: returns `true` on an empty scheduler (nothing to do).
    #[must_use]
    pub fn is_idle(&self) -> bool {
        self.incomplete == 0
    }

    /// Remove all completed requests and return how many were removed.
    pub fn drain_completed(&mut self) -> usize {
        let mut removed = 0;
        for (id, seq) in self.completed.drain(..) {
            if self.states.get(&id).is_some_and(|slot| slot.seq == seq) {
                self.states.remove(&id);
                removed += 1;
            }
        }
        removed
    }

    /// Cumulative number of prefill chunks emitted by [`next_step`](Self::next_step).
    #[must_use]
    pub fn chunks_scheduled(&self) -> u128 {
        self.chunks_scheduled
    }

    /// Cumulative number of tokens prefilled across all requests.
    #[must_use]
    pub fn tokens_prefilled(&self) -> u128 {
        self.tokens_prefilled
    }

    /// The step counter and the cumulative counters.
    #[must_use]
    pub fn counters(&self) -> Counters {
        Counters {
            step_index: self.step_counter,
            chunks_scheduled: self.chunks_scheduled,
            tokens_prefilled: self.tokens_prefilled,
        }
    }

    /// Every tracked request: started ones in the order they started, waiting ones in
    /// scheduling order, then completed ones in the order they completed. Restoring this
    /// list with [`from_parts`](Self::from_parts) rebuilds an identical scheduler.
    pub fn requests(&self) -> impl Iterator<Item = &PrefillChunkState> + '_ {
        let running = self.running.iter();
        let waiting = self.waiting.values().flat_map(|bucket| bucket.iter());
        let live = running.chain(waiting).filter_map(|id| self.state(*id));
        let completed = self.completed.iter().filter_map(|(id, seq)| {
            self.states
                .get(id)
                .filter(|slot| slot.seq == *seq)
                .map(|slot| &slot.state)
        });
        live.chain(completed)
    }

    /// Rebuild a scheduler from its config, counters and requests (the form of
    /// [`requests`](Self::requests)): a complete request is restored as completed, a
    /// started one (past its prefill start) as started, in list order, the rest as waiting.
    ///
    /// # Errors
    ///
    /// The config's first broken rule, a counter above [`COUNTER_MAX`]
    /// ([`CoreError::CounterTooLarge`]), or the first invalid request (with its index in
    /// `requests`; `usize::MAX` for the config and the counters).
    pub fn from_parts(
        config: ChunkedPrefillConfig,
        counters: Counters,
        requests: impl IntoIterator<Item = PrefillChunkState>,
    ) -> Result<Self, (usize, CoreError)> {
        let mut scheduler = Self::new(config).map_err(|err| (usize::MAX, err))?;
        for (name, value) in [
            ("step_index", counters.step_index),
            ("chunks_scheduled", counters.chunks_scheduled),
            ("tokens_prefilled", counters.tokens_prefilled),
        ] {
            if value > COUNTER_MAX {
                return Err((usize::MAX, CoreError::CounterTooLarge { name, value }));
            }
        }
        for (index, state) in requests.into_iter().enumerate() {
            scheduler.restore(state).map_err(|err| (index, err))?;
        }
        scheduler.step_counter = counters.step_index;
        scheduler.chunks_scheduled = counters.chunks_scheduled;
        scheduler.tokens_prefilled = counters.tokens_prefilled;
        Ok(scheduler)
    }

    fn restore(&mut self, state: PrefillChunkState) -> Result<(), CoreError> {
        let checked = PrefillChunkState::restored(
            state.request_id,
            state.total_tokens,
            state.processed_tokens,
            state.cached_tokens,
            state.priority,
        )?;
        let id = checked.request_id;
        if self.states.contains_key(&id) {
            return Err(CoreError::DuplicateRequest { request_id: id });
        }
        if checked.is_complete {
            let seq = self.insert_slot(checked);
            self.completed.push((id, seq));
        } else if checked.is_started() {
            self.insert_slot(checked);
            self.running.insert(id);
            self.incomplete += 1;
        } else {
            self.insert_waiting(checked);
        }
        Ok(())
    }
}
