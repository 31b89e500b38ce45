//! [`ServingState`]: a plain export of a [`ServingScheduler`] and its checked restore.
//!
//! The binding converts it to and from the Python dict of the contract (`to_state()`,
//! `from_state()`); hashes are bytes here and hex strings there.

use std::collections::{HashMap, HashSet};

use super::block_pool::BlockPool;
use super::hash::BlockHash;
use super::request::{PromptIds, Request, RequestState};
use super::scheduler::ServingScheduler;
use super::ServingConfig;
use crate::{CoreError, COUNTER_MAX};

/// One tracked request in a [`ServingState`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RequestRecord {
    /// The id given to `add_request`.
    pub request_id: u64,
    /// Lower runs first.
    pub priority: i64,
    /// Mixed into the first block's hash.
    pub cache_salt: u64,
    /// Generated tokens at which it finishes.
    pub max_new_tokens: u64,
    /// How many of `tokens` are the prompt.
    pub prompt_len: u64,
    /// Prompt then generated tokens, `None` where unknown (an int prompt, a sampled token not
    /// given).
    pub tokens: Vec<Option<u32>>,
    /// Tokens whose KV is in the cache.
    pub num_computed: u128,
    /// Waiting or running.
    pub state: RequestState,
    /// Its blocks, position order (`ceil(num_computed / block_size)` of them).
    pub block_table: Vec<usize>,
    /// Times it lost its blocks.
    pub num_preemptions: u128,
    /// Tokens it found in the prefix cache, summed over its admissions.
    pub num_cached_tokens: u128,
}

/// Everything a [`ServingScheduler`] holds between steps.
#[derive(Debug, Clone, PartialEq)]
pub struct ServingState {
    /// The configuration.
    pub config: ServingConfig,
    /// The index the next batch gets.
    pub step_index: u128,
    /// Preemptions so far.
    pub num_preemptions: u128,
    /// Tokens found in the prefix cache so far.
    pub num_cached_tokens: u128,
    /// Tracked requests in `add_request` order.
    pub requests: Vec<RequestRecord>,
    /// The free queue, head first.
    pub free_queue: Vec<usize>,
    /// `(block id, hash)` of every block with a registered hash, by block id.
    pub block_hashes: Vec<(usize, BlockHash)>,
}

fn rule(path: impl Into<String>, message: impl Into<String>) -> CoreError {
    CoreError::StateRule {
        path: path.into(),
        message: message.into(),
    }
}

/// The scheduler's counters, then every record's, at most [`COUNTER_MAX`].
fn check_counters(counters: [u128; 3], requests: &[RequestRecord]) -> Result<(), CoreError> {
    let names = ["step_index", "num_preemptions", "num_cached_tokens"];
    for (name, value) in names.into_iter().zip(counters) {
        if value > COUNTER_MAX {
            return Err(CoreError::CounterTooLarge { name, value });
        }
    }
    for (at, record) in requests.iter().enumerate() {
        for (name, value) in [
            ("num_preemptions", record.num_preemptions),
            ("num_cached_tokens", record.num_cached_tokens),
        ] {
            if value > COUNTER_MAX {
                let path = format!("requests[{at}].{name}");
                return Err(rule(
                    path,
                    format!("must be at most {COUNTER_MAX}, got {value}"),
                ));
            }
        }
    }
    Ok(())
}

/// The free queue: blocks of the pool, none held, none twice, and with the held ones every
/// block of the pool.
fn check_free_queue(
    free_queue: &[usize],
    held: &HashMap<usize, usize>,
    num_blocks: usize,
) -> Result<(), CoreError> {
    let mut queued = HashSet::new();
    for (j, &block) in free_queue.iter().enumerate() {
        let path = format!("free_queue[{j}]");
        if block >= num_blocks {
            return Err(rule(
                path,
                format!("block {block} is not below num_blocks {num_blocks}"),
            ));
        }
        if held.contains_key(&block) {
            return Err(rule(path, format!("block {block} is held by a request")));
        }
        if !queued.insert(block) {
            return Err(rule(path, format!("block {block} is queued twice")));
        }
    }
    let missing = num_blocks - free_queue.len() - held.len();
    if missing > 0 {
        return Err(rule(
            "free_queue",
            format!("{missing} blocks are neither free nor held"),
        ));
    }
    Ok(())
}

/// The registered hashes: blocks of the pool in increasing order, each hash once.
fn check_block_hashes(
    block_hashes: &[(usize, BlockHash)],
    num_blocks: usize,
) -> Result<(), CoreError> {
    let mut hashes = HashSet::new();
    for (j, &(block, hash)) in block_hashes.iter().enumerate() {
        let path = format!("block_hashes[{j}]");
        if block >= num_blocks {
            return Err(rule(
                path,
                format!("block {block} is not below num_blocks {num_blocks}"),
            ));
        }
        if j > 0 && block_hashes[j - 1].0 >= block {
            return Err(rule(path, "block ids must be strictly increasing"));
        }
        if !hashes.insert(hash) {
            return Err(rule(path, "hash already registered for another block"));
        }
    }
    Ok(())
}

/// The pool of a checked state: every block free or held, so exactly as large as the state.
fn restored_pool(
    held: &HashMap<usize, usize>,
    free_queue: &[usize],
    block_hashes: &[(usize, BlockHash)],
    config: &ServingConfig,
) -> Result<BlockPool, CoreError> {
    let num_blocks = config.num_blocks;
    let too_big = || CoreError::OutOfMemory {
        what: format!("from_state(): a pool of {num_blocks} KV blocks"),
    };
    let mut owners: Vec<usize> = Vec::new();
    owners
        .try_reserve_exact(num_blocks)
        .map_err(|_| too_big())?;
    owners.extend((0..num_blocks).map(|b| held.get(&b).copied().unwrap_or(0)));
    BlockPool::restore(&owners, config.block_size, free_queue, block_hashes).map_err(|_| too_big())
}

impl ServingScheduler {
    /// Export the scheduler between steps.
    ///
    /// # Errors
    ///
    /// [`CoreError::StateBatchPending`] while a batch awaits `update`;
    /// [`CoreError::StateTooLarge`] naming `free_queue` or a request's `tokens` when that
    /// list cannot be allocated (a pool or an int prompt of astronomical size), requests
    /// first, in seq order.
    pub fn to_state(&self) -> Result<ServingState, CoreError> {
        if let Some(batch) = self.pending_batch() {
            return Err(CoreError::StateBatchPending {
                step_index: batch.step_index(),
            });
        }
        if self.decodes_pending {
            // A decode-only step planned without a batch (the simulator's).
            return Err(CoreError::StateBatchPending {
                step_index: self.step_index - 1,
            });
        }
        let mut requests: Vec<&Request> = self.requests.values().collect();
        requests.sort_unstable_by_key(|request| request.seq);
        let clock = self.group.clock;
        let record = |(at, request): (usize, &Request)| match request.in_group() {
            true => {
                // A member's slot, for the ids the log keeps for it.
                let slot = self.requests.slot_of(request.id).unwrap_or(usize::MAX);
                let source = self.group.log.source(self.sampled.as_ref(), slot);
                request.settled(clock, source).record(at)
            }
            false => request.record(at),
        };
        let requests = (requests.into_iter().enumerate())
            .map(record)
            .collect::<Result<_, _>>()?;
        let mut free_queue = Vec::new();
        reserve(&mut free_queue, self.pool.num_free() as u128, "free_queue")?;
        free_queue.extend(self.pool.free_queue());
        Ok(ServingState {
            config: self.config().clone(),
            step_index: self.step_index(),
            num_preemptions: self.num_preemptions(),
            num_cached_tokens: self.num_cached_tokens(),
            requests,
            free_queue,
            block_hashes: self.pool.hashes(),
        })
    }

    /// Rebuild a scheduler from an export, checking every invariant first. Request seqs are
    /// renumbered `0..n` in list order.
    ///
    /// # Errors
    ///
    /// The config's first broken rule; [`CoreError::CounterTooLarge`] for a counter above
    /// [`COUNTER_MAX`]; otherwise [`CoreError::StateRule`] naming the first offending path,
    /// checked in this order: each request in list order (duplicate id, `prompt_len`,
    /// `max_new_tokens`, `tokens`, fit in the pool, `num_computed`, `block_table`), the number
    /// running, each `free_queue` entry, the free queue's length, each `block_hashes` entry.
    pub fn from_state(state: ServingState) -> Result<Self, CoreError> {
        let ServingState {
            config,
            step_index,
            num_preemptions,
            num_cached_tokens,
            requests,
            free_queue,
            block_hashes,
        } = state;
        let mut scheduler = Self::new(config)?;
        check_counters([step_index, num_preemptions, num_cached_tokens], &requests)?;
        let held = scheduler.check_tables(&requests)?;
        let config = scheduler.config();
        check_free_queue(&free_queue, &held, config.num_blocks)?;
        check_block_hashes(&block_hashes, config.num_blocks)?;
        let pool = restored_pool(&held, &free_queue, &block_hashes, config)?;
        let requests = (requests.into_iter().enumerate())
            .map(|(seq, record)| Request::restore(record, seq as u64));
        scheduler.restore(
            requests,
            pool,
            [step_index, num_preemptions, num_cached_tokens],
        );
        Ok(scheduler)
    }

    /// Every record's own rules and its block table's, then `max_running`: the owners of
    /// each block held.
    fn check_tables(&self, requests: &[RequestRecord]) -> Result<HashMap<usize, usize>, CoreError> {
        let config = self.config();
        let num_blocks = config.num_blocks;
        let mut ids = HashSet::new();
        let mut held: HashMap<usize, usize> = HashMap::new();
        let mut running = 0_usize;
        for (at, record) in requests.iter().enumerate() {
            self.check_record(at, record, &mut ids)?;
            let mut own = HashSet::new();
            for (j, &block) in record.block_table.iter().enumerate() {
                let path = format!("requests[{at}].block_table[{j}]");
                if block >= num_blocks {
                    return Err(rule(
                        path,
                        format!("block {block} is not below num_blocks {num_blocks}"),
                    ));
                }
                if !own.insert(block) {
                    return Err(rule(
                        path,
                        format!("block {block} appears twice in the table"),
                    ));
                }
                *held.entry(block).or_default() += 1;
            }
            running += usize::from(record.state == RequestState::Running);
        }
        if running > config.max_running {
            return Err(rule(
                "requests",
                format!(
                    "{running} requests are running, above max_running {}",
                    config.max_running
                ),
            ));
        }
        Ok(held)
    }

    /// The per-request rules of [`from_state`](Self::from_state).
    fn check_record(
        &self,
        at: usize,
        record: &RequestRecord,
        ids: &mut HashSet<u64>,
    ) -> Result<(), CoreError> {
        let path = |field: &str| format!("requests[{at}].{field}");
        let config = self.config();
        if !ids.insert(record.request_id) {
            let id = record.request_id;
            return Err(rule(
                path("request_id"),
                format!("request_id {id} appears twice"),
            ));
        }
        if record.prompt_len == 0 {
            return Err(rule(path("prompt_len"), "must be at least 1, got 0"));
        }
        if record.max_new_tokens == 0 {
            return Err(rule(path("max_new_tokens"), "must be at least 1, got 0"));
        }
        let prompt_len = usize::try_from(record.prompt_len).unwrap_or(usize::MAX);
        let Some(prompt) = record.tokens.get(..prompt_len) else {
            let (len, want) = (record.tokens.len(), record.prompt_len);
            return Err(rule(
                path("tokens"),
                format!("holds {len} tokens, fewer than prompt_len {want}"),
            ));
        };
        let known = prompt.iter().filter(|token| token.is_some()).count();
        if known != 0 && known != prompt.len() {
            return Err(rule(path("tokens"), "the prompt mixes token ids and None"));
        }
        let generated = (record.tokens.len() - prompt_len) as u64;
        if generated >= record.max_new_tokens {
            let most = record.max_new_tokens;
            return Err(rule(
                path("tokens"),
                format!("holds {generated} generated tokens, not fewer than max_new_tokens {most}"),
            ));
        }
        let most = u128::from(record.prompt_len) + u128::from(record.max_new_tokens) - 1;
        let needed = most.div_ceil(config.block_size as u128);
        let usable = config.num_blocks.saturating_sub(config.watermark_blocks());
        if needed > usable as u128 {
            return Err(rule(
                format!("requests[{at}]"),
                format!("needs {needed} blocks, above the {usable} usable blocks"),
            ));
        }
        let num_tokens = record.tokens.len() as u128;
        let computed = record.num_computed;
        match record.state {
            RequestState::Waiting => {
                if computed != 0 {
                    return Err(rule(
                        path("num_computed"),
                        format!("must be 0 for a waiting request, got {computed}"),
                    ));
                }
            }
            RequestState::Running => {
                if computed >= num_tokens {
                    return Err(rule(
                        path("num_computed"),
                        format!("must be less than num_tokens ({num_tokens}), got {computed}"),
                    ));
                }
            }
        }
        let want = computed.div_ceil(config.block_size as u128);
        let len = record.block_table.len();
        if len as u128 != want {
            return Err(rule(
                path("block_table"),
                format!("holds {len} blocks, not ceil(num_computed / block_size) = {want}"),
            ));
        }
        Ok(())
    }
}

/// Make room for `len` entries of an export without aborting the process when a pool or an
/// int prompt is too large to list in memory.
fn reserve<T>(list: &mut Vec<T>, len: u128, path: &str) -> Result<(), CoreError> {
    let too_large = || CoreError::StateTooLarge {
        path: path.into(),
        len,
    };
    let len = usize::try_from(len).map_err(|_| too_large())?;
    list.try_reserve_exact(len).map_err(|_| too_large())
}

impl Request {
    fn record(&self, at: usize) -> Result<RequestRecord, CoreError> {
        let mut tokens = Vec::new();
        reserve(
            &mut tokens,
            self.num_tokens(),
            &format!("requests[{at}].tokens"),
        )?;
        self.tokens(&mut tokens);
        Ok(RequestRecord {
            request_id: self.id,
            priority: self.priority,
            cache_salt: self.cache_salt,
            max_new_tokens: self.max_new_tokens,
            prompt_len: self.prompt_len(),
            tokens,
            num_computed: self.num_computed,
            state: self.state,
            block_table: self.table.clone(),
            num_preemptions: self.num_preemptions,
            num_cached_tokens: self.num_cached_tokens,
        })
    }

    /// A request from a checked record.
    fn restore(record: RequestRecord, seq: u64) -> Self {
        let prompt_len = usize::try_from(record.prompt_len).unwrap_or(usize::MAX);
        let (prompt, generated) = record.tokens.split_at(prompt_len.min(record.tokens.len()));
        let prompt = match prompt.iter().copied().collect::<Option<Vec<u32>>>() {
            Some(ids) => PromptIds::Known(ids.into()),
            None => PromptIds::Unknown(record.prompt_len),
        };
        let mut request = Self::new(
            record.request_id,
            seq,
            prompt,
            record.max_new_tokens,
            record.priority,
            record.cache_salt,
        );
        for &token in generated {
            request.push_token(token);
        }
        request.num_computed = record.num_computed;
        request.table = record.block_table;
        request.num_preemptions = record.num_preemptions;
        request.num_cached_tokens = record.num_cached_tokens;
        request.state = record.state;
        request
    }
}
