//! The request record and its public view.

use std::ops::Range;
use std::sync::Arc;

use super::block_pool::BlockPool;
use super::content_tree::NodeId;
use super::counts::{blocks_for, div_blocks};
use super::id_log::{IdLog, TokenSource};
use super::sampled::SampledTokens;

/// A request's prompt as `add_request` takes it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Prompt {
    /// The token ids: its full blocks can be hashed, so later requests can reuse them.
    Tokens(Vec<u32>),
    /// Only the length, when the engine wants no prefix caching for this request.
    Length(u64),
}

/// Where a tracked request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestState {
    /// Holds no blocks and has `num_computed == 0`: new, or preempted.
    Waiting,
    /// Holds the blocks of its computed tokens.
    Running,
}

impl RequestState {
    /// `"waiting"` or `"running"`, as Python spells it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Waiting => "waiting",
            Self::Running => "running",
        }
    }
}

/// A snapshot of one tracked request (see [`ServingScheduler::request`](super::ServingScheduler::request)).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RequestView {
    /// The id given to `add_request`.
    pub request_id: u64,
    /// Waiting or running.
    pub state: RequestState,
    /// Prompt plus generated tokens.
    pub num_tokens: u128,
    /// Tokens whose KV is in the cache (with a batch pending: before that batch).
    pub num_computed: u128,
    /// Tokens sampled so far.
    pub num_generated: u64,
    /// Generated tokens at which it finishes.
    pub max_new_tokens: u64,
    /// Lower runs first.
    pub priority: i64,
    /// Times it lost its blocks.
    pub num_preemptions: u128,
    /// Tokens it found in the prefix cache, summed over its admissions.
    pub num_cached_tokens: u128,
}

/// The prompt as stored: ids, or a count of unknown tokens. The ids never change once
/// added, so copies of a scheduler share them. They stay in the vector `add_request` was
/// given (an `Arc<[u32]>` would copy them, a second prompt's worth of memory at once).
#[derive(Debug, Clone)]
pub(crate) enum PromptIds {
    Known(Arc<Vec<u32>>),
    Unknown(u64),
}

/// A tracked request.
///
/// Laid out by hand (`repr(C)`), what a step reads first: the decode group's events read a
/// member's membership and rank, then its counts and block table, at random slots of a
/// long run. In the compiler's order they were spread over the record's 288 bytes, and the
/// events' cache misses were twice what they are (`valgrind --tool=cachegrind`).
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Request {
    // What an event checks of its membership, and the counts it advances.
    /// `Some(clock)` while it is a member of the decode group (see `group.rs`): its counts
    /// are as of that value of the group clock, and advance with it.
    group: Option<u64>,
    pub(crate) id: u64,
    /// The `add_request` order: the tie-break of the rank.
    pub(crate) seq: u64,
    pub(crate) priority: i64,
    /// Times it joined the decode group: tells its current membership's events from those
    /// of an earlier one.
    pub(crate) joins: u32,
    pub(crate) state: RequestState,
    /// Tokens sampled so far.
    num_generated: usize,
    pub(crate) max_new_tokens: u64,
    // Its counts and block table.
    pub(crate) num_computed: u128,
    /// Prompt plus generated tokens, kept beside the two it sums: the step rule reads it
    /// several times per request and step.
    num_tokens: u128,
    /// Block ids, position order.
    pub(crate) table: Vec<usize>,
    /// How many of `generated` are known before the first unknown one.
    known_generated: usize,
    // The rest: its tokens, its item and the counters only a caller reads.
    pub(crate) prompt: PromptIds,
    /// Sampled tokens up to the last known one (0 at the [`holes`](Self::holes), where the
    /// engine did not say which): plain ids, so a block of them is hashed from a slice and
    /// a run of them stored by a copy. The `num_generated - generated.len()` tokens after
    /// them are all unknown: they are only counted, so a run that never gives ids writes no
    /// vector per token.
    generated: Vec<u32>,
    /// The positions of `generated` whose token is unknown, ascending (usually none: ids
    /// are given for every sampled token, or for none).
    holes: Vec<usize>,
    /// `nodes[i]` is the content node of block `i` (see `ContentTree`), extended on demand.
    nodes: Vec<NodeId>,
    /// Its item's index in the batch being planned, or `Some` while that batch is pending
    /// (prefill items only: a member of the decode group has no index).
    pub(crate) item: Option<usize>,
    /// The block pass 1 gave it in the step being planned, until its decode item is listed.
    pub(crate) new_block: Option<usize>,
    pub(crate) cache_salt: u64,
    pub(crate) num_preemptions: u128,
    pub(crate) num_cached_tokens: u128,
}

/// The room a request's first known sampled token reserves for those that follow.
const FIRST_GENERATED_ROOM: u64 = 128;

/// The generated tokens a request's block table has room for from its first block on: a
/// table is 8 bytes a block, so up to this many (its whole answer in a simulation, whose
/// `max_new_tokens` is the answer's length) cost at most 2 KB at a block size of 16.
const TABLE_ROOM_TOKENS: u64 = 4096;

/// The most blocks a table reserves room for ahead of its need (8 KB): a longer prompt's
/// table grows with its chunks.
const TABLE_ROOM_BLOCKS: usize = 1024;

/// A copy of `items` with the spare capacity of the original: a copied scheduler goes on
/// growing these vectors, and a copy at exact capacity would reallocate every one of them
/// in its first step.
pub(crate) fn with_room<T: Clone>(items: &Vec<T>) -> Vec<T> {
    let mut copy = Vec::with_capacity(items.capacity());
    copy.extend_from_slice(items);
    copy
}

impl Clone for Request {
    fn clone(&self) -> Self {
        Self {
            prompt: self.prompt.clone(),
            generated: with_room(&self.generated),
            holes: self.holes.clone(),
            table: with_room(&self.table),
            nodes: with_room(&self.nodes),
            ..*self
        }
    }
}

impl Request {
    pub(crate) fn new(
        id: u64,
        seq: u64,
        prompt: PromptIds,
        max_new_tokens: u64,
        priority: i64,
        cache_salt: u64,
    ) -> Self {
        let prompt_len = match &prompt {
            PromptIds::Known(ids) => ids.len() as u128,
            PromptIds::Unknown(len) => u128::from(*len),
        };
        Self {
            id,
            seq,
            priority,
            cache_salt,
            max_new_tokens,
            prompt,
            generated: Vec::new(),
            holes: Vec::new(),
            num_generated: 0,
            num_tokens: prompt_len,
            known_generated: 0,
            num_computed: 0,
            table: Vec::new(),
            nodes: Vec::new(),
            num_preemptions: 0,
            num_cached_tokens: 0,
            state: RequestState::Waiting,
            item: None,
            group: None,
            joins: 0,
            new_block: None,
        }
    }

    /// Make room in its block table for `more` blocks. A table's first blocks reserve room
    /// for its prompt and up to [`TABLE_ROOM_TOKENS`] of its answer at once (at most
    /// [`TABLE_ROOM_BLOCKS`]), rather than growing by doubling from four: a reallocation
    /// and a copy every few blocks of a young request.
    #[inline]
    pub(crate) fn reserve_table(&mut self, more: usize, block_size: usize) {
        if self.table.capacity() == 0 {
            let answer = self.max_new_tokens.min(TABLE_ROOM_TOKENS);
            let tokens = self.prompt_len().saturating_add(answer);
            let expected = blocks_for(u128::from(tokens), block_size).min(TABLE_ROOM_BLOCKS);
            self.table.reserve_exact(expected.max(more));
        } else {
            self.table.reserve(more);
        }
    }

    /// Whether it is a member of the decode group.
    #[inline]
    pub(crate) fn in_group(&self) -> bool {
        self.group.is_some()
    }

    /// Join the decode group at group clock `clock`: from now on its counts advance with it.
    pub(crate) fn join_group(&mut self, clock: u64) {
        self.group = Some(clock);
        self.joins = self.joins.wrapping_add(1);
    }

    /// Bring its counts up to group clock `clock` (a member decodes one token per tick), and
    /// the tokens of those ticks from `source` (with a function of the position, only for a
    /// prompt of ids: else they stay unknown).
    #[inline]
    pub(crate) fn settle(&mut self, clock: u64, source: TokenSource<'_>) {
        let Some(base) = self.group else {
            return;
        };
        let ticks = clock - base;
        self.group = Some(clock);
        self.num_computed += u128::from(ticks);
        match source {
            TokenSource::Sampled(tokens) if self.has_known_tokens() => {
                self.take_sampled(ticks, tokens);
            }
            TokenSource::Log(log, slot) if ticks > 0 => self.take_logged(base..clock, log, slot),
            _ => {
                self.num_tokens += u128::from(ticks);
                self.num_generated += ticks as usize;
            }
        }
    }

    /// Count the sampled tokens of `ticks` and store those `log` kept under `slot`, as
    /// `update` would have stored them. Out of line, as `take_sampled`.
    #[inline(never)]
    fn take_logged(&mut self, ticks: Range<u64>, log: &IdLog, slot: usize) {
        if self.all_stored() && log.kept(slot, ticks.clone()) {
            // The usual case, every earlier token stored and every tick kept: appended at
            // once, from at most two runs of the slot's row.
            let count = (ticks.end - ticks.start) as usize;
            self.generated.reserve(count);
            let (first, second) = log.runs(slot, ticks);
            self.generated.extend_from_slice(first);
            self.generated.extend_from_slice(second);
            self.count_stored(count);
            return;
        }
        for tick in ticks {
            self.push_token(log.get(slot, tick));
        }
    }

    /// Count `ticks` sampled tokens and store them from `tokens`, each at its position, as
    /// `update` would have stored them (one `update` did store is kept). Out of line: with
    /// it inlined, `settle` (a few additions on every decode of a host's step) is too large
    /// to inline where it is called.
    #[inline(never)]
    fn take_sampled(&mut self, ticks: u64, tokens: &SampledTokens) {
        let id = self.id;
        if self.all_stored() {
            // The usual case, every earlier token stored: the run appended at once.
            tokens.extend(id, self.num_tokens, ticks, &mut self.generated);
            self.count_stored(ticks as usize);
            return;
        }
        for _ in 0..ticks {
            if self.generated.len() <= self.num_generated {
                self.store_token(tokens.at(id, self.num_tokens));
            }
            self.num_generated += 1;
            self.num_tokens += 1;
        }
    }

    /// Whether every token sampled so far is stored and known: a run of known ones can be
    /// appended to `generated` as it is.
    fn all_stored(&self) -> bool {
        self.known_generated == self.num_generated && self.generated.len() == self.num_generated
    }

    /// Count `count` known tokens just appended to `generated`.
    fn count_stored(&mut self, count: usize) {
        self.known_generated += count;
        self.num_generated += count;
        self.num_tokens += count as u128;
    }

    /// Settle it at `clock` and leave the decode group.
    pub(crate) fn leave_group(&mut self, clock: u64, source: TokenSource<'_>) {
        self.settle(clock, source);
        self.group = None;
    }

    /// Ticks of the group clock its stored counts lag behind `clock`.
    #[inline]
    fn lag(&self, clock: u64) -> u64 {
        self.group.map_or(0, |base| clock - base)
    }

    /// `num_computed` at group clock `clock`.
    #[inline]
    pub(crate) fn computed_at(&self, clock: u64) -> u128 {
        self.num_computed + u128::from(self.lag(clock))
    }

    /// `num_tokens` at group clock `clock`.
    #[inline]
    pub(crate) fn tokens_at(&self, clock: u64) -> u128 {
        self.num_tokens + u128::from(self.lag(clock))
    }

    /// A copy brought up to group clock `clock` (for the read-only exports and checks).
    pub(crate) fn settled(&self, clock: u64, source: TokenSource<'_>) -> Self {
        let mut copy = self.clone();
        copy.settle(clock, source);
        copy
    }

    /// `(priority, seq, id)`: lower is served first and preempted last.
    pub(crate) fn rank(&self) -> (i64, u64, u64) {
        (self.priority, self.seq, self.id)
    }

    pub(crate) fn prompt_len(&self) -> u64 {
        match &self.prompt {
            PromptIds::Known(ids) => ids.len() as u64,
            PromptIds::Unknown(len) => *len,
        }
    }

    pub(crate) fn num_generated(&self) -> u64 {
        self.num_generated as u64
    }

    pub(crate) fn num_tokens(&self) -> u128 {
        self.num_tokens
    }

    /// Tokens not yet computed.
    pub(crate) fn left(&self) -> u128 {
        self.num_tokens() - self.num_computed
    }

    /// Append a sampled token (`None`: not given).
    #[inline]
    pub(crate) fn push_token(&mut self, token: Option<u32>) {
        if let Some(token) = token {
            self.store_token(token);
        }
        self.num_generated += 1;
        self.num_tokens += 1;
    }

    /// Store the known token sampled next (its position is `num_generated`, which the
    /// caller then counts: `push_token`, or the decode group's clock).
    #[inline]
    pub(crate) fn store_token(&mut self, token: u32) {
        if self.known_generated == self.num_generated {
            self.known_generated += 1;
        }
        // The usual case: every earlier token stored, room left.
        if self.generated.len() == self.num_generated
            && self.generated.len() < self.generated.capacity()
        {
            self.generated.push(token);
            return;
        }
        self.store_token_slow(token);
    }

    /// [`store_token`](Self::store_token) after unknown tokens, or at a full vector.
    #[inline(never)]
    fn store_token_slow(&mut self, token: u32) {
        if self.generated.capacity() == 0 {
            // Room for a typical answer at once, not four reallocations on the way.
            let expected = self.max_new_tokens.min(FIRST_GENERATED_ROOM) as usize;
            self.generated
                .reserve_exact(expected.max(self.num_generated + 1));
        }
        let stored = self.generated.len();
        if stored < self.num_generated {
            // The tokens between the last stored and this one are unknown.
            self.holes.extend(stored..self.num_generated);
        }
        self.generated.resize(self.num_generated, 0);
        self.generated.push(token);
    }

    /// Whether any of its tokens are known (a prompt of ids): else no block of it is ever
    /// hashed.
    #[inline]
    pub(crate) fn has_known_tokens(&self) -> bool {
        matches!(self.prompt, PromptIds::Known(_))
    }

    /// Blocks whose tokens (and all before) are known: the most its chain can hold now.
    pub(crate) fn hashable_blocks(&self, block_size: usize) -> usize {
        div_blocks(self.known_prefix(), block_size)
    }

    /// Tokens known from the start, before the first unknown one.
    fn known_prefix(&self) -> usize {
        match &self.prompt {
            PromptIds::Known(ids) => ids.len() + self.known_generated,
            PromptIds::Unknown(_) => 0,
        }
    }

    /// Extend the chain of content nodes to `blocks` blocks where their tokens are all
    /// known, interning them in `pool`; returns how many blocks the chain covers, at most
    /// `blocks`. `ids` is scratch for a block that holds generated tokens.
    pub(crate) fn chain(
        &mut self,
        blocks: usize,
        block_size: usize,
        pool: &mut BlockPool,
        ids: &mut Vec<u32>,
    ) -> usize {
        let limit = blocks.min(self.hashable_blocks(block_size));
        if limit > self.nodes.capacity() {
            // As many as its table has room for: a decode's chain grows a node a block.
            let room = limit.max(self.table.capacity());
            self.nodes.reserve_exact(room - self.nodes.len());
        }
        while self.nodes.len() < limit {
            let i = self.nodes.len();
            let parent = i.checked_sub(1).map(|before| self.nodes[before]);
            let node = match self.prompt_block(i, block_size) {
                Some(block) => pool.intern(parent, self.cache_salt, block),
                None => {
                    self.block_ids_into(i, block_size, ids);
                    pool.intern(parent, self.cache_salt, ids)
                }
            };
            self.nodes.push(node);
        }
        self.nodes.len().min(blocks)
    }

    /// The ids of block `block`, which are all known, into `ids`.
    fn block_ids_into(&self, block: usize, block_size: usize, ids: &mut Vec<u32>) {
        ids.clear();
        let start = block * block_size;
        let prompt = self.prompt_ids().len();
        // A block of generated tokens alone (every block a decode fills): a slice of them.
        let generated = (start.checked_sub(prompt))
            .and_then(|from| self.generated.get(from..from.checked_add(block_size)?));
        match generated {
            // All known, as the chain reaches no other block: copied at once.
            Some(tokens) => ids.extend_from_slice(tokens),
            None => ids.extend(self.known_tokens(start, block_size)),
        }
    }

    /// The known ids of block `block` (all of them for a block its chain reached).
    pub(crate) fn block_ids(&self, block: usize, block_size: usize) -> Vec<u32> {
        self.known_tokens(block * block_size, block_size).collect()
    }

    /// The content node of block `block`, which [`chain`](Self::chain) reached.
    pub(crate) fn node(&self, block: usize) -> NodeId {
        self.nodes[block]
    }

    /// The content nodes of its blocks, as far as [`chain`](Self::chain) went.
    pub(crate) fn nodes(&self) -> &[NodeId] {
        &self.nodes
    }

    /// The ids of block `block` if the prompt holds all of them.
    pub(crate) fn prompt_block(&self, block: usize, block_size: usize) -> Option<&[u32]> {
        let start = block * block_size;
        self.prompt_ids().get(start..start + block_size)
    }

    /// The prompt's ids (none for a length-only prompt).
    fn prompt_ids(&self) -> &[u32] {
        match &self.prompt {
            PromptIds::Known(ids) => ids,
            PromptIds::Unknown(_) => &[],
        }
    }

    /// Up to `len` tokens from position `start` among those known from the start (a prompt
    /// of ids and the generated tokens before the first unknown one).
    fn known_tokens(&self, start: usize, len: usize) -> impl Iterator<Item = u32> + '_ {
        let prompt = self.prompt_ids();
        let from_prompt = prompt.get(start..).unwrap_or(&[]);
        let known = &self.generated[..self.known_generated.min(self.generated.len())];
        let from_generated = known
            .get(start.saturating_sub(prompt.len())..)
            .unwrap_or(&[]);
        (from_prompt.iter().chain(from_generated))
            .copied()
            .take(len)
    }

    /// Append prompt and generated tokens, `None` where unknown (for the state export).
    pub(crate) fn tokens(&self, out: &mut Vec<Option<u32>>) {
        match &self.prompt {
            PromptIds::Known(ids) => out.extend(ids.iter().map(|&id| Some(id))),
            PromptIds::Unknown(len) => out.resize(*len as usize, None),
        }
        let first = out.len();
        out.extend(self.generated.iter().map(|&id| Some(id)));
        for &hole in &self.holes {
            out[first + hole] = None;
        }
        out.resize(
            out.len() + (self.num_generated - self.generated.len()),
            None,
        );
    }

    /// Its snapshot at group clock `clock`.
    pub(crate) fn view(&self, clock: u64) -> RequestView {
        RequestView {
            request_id: self.id,
            state: self.state,
            num_tokens: self.tokens_at(clock),
            num_computed: self.computed_at(clock),
            num_generated: self.num_generated() + self.lag(clock),
            max_new_tokens: self.max_new_tokens,
            priority: self.priority,
            num_preemptions: self.num_preemptions,
            num_cached_tokens: self.num_cached_tokens,
        }
    }
}
