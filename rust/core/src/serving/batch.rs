//! [`Batch`] and [`BatchItem`]: the plan of one step, which the engine runs and reports back.
//!
//! A batch the scheduler plans lists its decodes in compact form ([`Decodes`]): the decode
//! group's members as its lane lists them, shared with the lane, and the blocks some of them
//! were given. Its items are made from them when first read, so a step whose members did not
//! change costs no work per decode unless a host reads the decode items themselves.

use std::hash::{Hash, Hasher};
use std::sync::{Arc, OnceLock};

use super::lane::Listed;

/// The work of one request in one step: compute positions `start..start + tokens`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct BatchItem {
    /// The request.
    pub request_id: u64,
    /// The first position computed (`num_computed` when planned).
    pub start: u128,
    /// How many positions are computed.
    pub tokens: usize,
    /// False only for a decode planned in the decode pass.
    pub is_prefill: bool,
    /// The step computes up to `num_tokens`: the engine samples a token for this request.
    pub samples: bool,
    /// Block ids appended to the request's table in this step; for a request admitted in this
    /// step, its whole table, cache hits first.
    pub new_blocks: Vec<usize>,
    /// Tokens found in the prefix cache at admission in this step, 0 otherwise.
    pub cached_tokens: u128,
}

/// The decode items of a full batch: the decode group's members in rank order as the lane
/// listed them at group tick `clock`, the blocks pass 1 gave some of them, and the batch's
/// lists made from them when first read. Boxed in the batch: a lean batch has none.
#[derive(Debug, Clone, Default)]
pub(super) struct Decodes {
    /// Shared with the lane until its members change.
    members: Option<Arc<Vec<Listed>>>,
    clock: u64,
    /// `(index in members, block)`, ascending index.
    blocks: Vec<(usize, usize)>,
    /// These items then the batch's `items`.
    items: OnceLock<Vec<BatchItem>>,
    /// These ids then the batch's `sampling_ids`.
    sampling_ids: OnceLock<Vec<u64>>,
}

impl Decodes {
    /// The members, in rank order.
    fn members(&self) -> &[Listed] {
        self.members.as_deref().map_or(&[], Vec::as_slice)
    }

    /// Empty, keeping the buffer of the blocks.
    fn clear(&mut self) {
        self.members = None;
        self.blocks.clear();
        self.items = OnceLock::new();
        self.sampling_ids = OnceLock::new();
    }

    /// The items, in rank order: one token each, sampled, and their blocks.
    fn items(&self) -> impl Iterator<Item = BatchItem> + '_ {
        let mut blocks = self.blocks.iter().peekable();
        (self.members().iter().enumerate()).map(move |(at, member)| {
            let mut new_blocks = Vec::new();
            while let Some(&(_, block)) = blocks.next_if(|&&(of, _)| of == at) {
                new_blocks.push(block);
            }
            BatchItem {
                request_id: member.id(),
                start: member.start_at(self.clock),
                tokens: 1,
                is_prefill: false,
                samples: true,
                new_blocks,
                cached_tokens: 0,
            }
        })
    }
}

/// The plan of one step. `Eq`/`Hash` follow `(step_index, items, preempted,
/// num_free_blocks)`, of which the other fields are functions.
///
/// A *lean* batch ([`ServingScheduler::schedule_lean`](super::ServingScheduler::schedule_lean))
/// lists its prefill items only: its decodes are counted (`num_decode_tokens`,
/// `decode_context_tokens`) but not listed, and its `sampling_ids` are its prefill items'.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    pub(crate) step_index: u128,
    /// The items listed one by one: a planned batch's prefill items (its decodes are in
    /// `decodes`), or every item of a batch built by hand.
    pub(crate) items: Vec<BatchItem>,
    /// A full planned batch's decode items, in compact form.
    decodes: Option<Box<Decodes>>,
    pub(crate) preempted: Vec<u64>,
    /// The ids of the sampling items of `items`.
    pub(crate) sampling_ids: Vec<u64>,
    pub(crate) num_prefill_tokens: usize,
    pub(crate) num_decode_tokens: usize,
    pub(crate) num_free_blocks: usize,
    /// The decode items' `start + 1` (their context), summed.
    pub(crate) decode_context_tokens: u128,
    /// Its decodes are counted, not listed.
    pub(crate) lean: bool,
}

impl PartialEq for Batch {
    fn eq(&self, other: &Self) -> bool {
        self.step_index == other.step_index
            && self.num_free_blocks == other.num_free_blocks
            && self.preempted == other.preempted
            && self.items() == other.items()
    }
}

impl Eq for Batch {}

impl Hash for Batch {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.step_index.hash(state);
        self.items().hash(state);
        self.preempted.hash(state);
        self.num_free_blocks.hash(state);
    }
}

impl Batch {
    /// A batch built from its defining fields (for a binding that rebuilds one, e.g. when
    /// unpickling); the sampling ids and token counts are derived from the items.
    #[must_use]
    pub fn new(
        step_index: u128,
        items: Vec<BatchItem>,
        preempted: Vec<u64>,
        num_free_blocks: usize,
    ) -> Self {
        let mut batch = Self {
            step_index,
            items,
            preempted,
            num_free_blocks,
            ..Self::default()
        };
        batch.derive();
        batch
    }

    /// Recompute the fields that follow from the items (sums saturate: a hand-built batch
    /// may claim anything).
    pub(crate) fn derive(&mut self) {
        let items = std::mem::take(&mut self.items);
        self.clear();
        for item in items {
            self.push(item);
        }
    }

    /// Append an item, keeping the fields that follow from the items up to date (the
    /// scheduler plans into a batch this way, so sealing it needs no second pass).
    #[inline]
    pub(crate) fn push(&mut self, item: BatchItem) {
        if item.samples {
            self.sampling_ids.push(item.request_id);
        }
        let sum = if item.is_prefill {
            &mut self.num_prefill_tokens
        } else {
            let context = item.start.saturating_add(item.tokens as u128);
            self.decode_context_tokens = self.decode_context_tokens.saturating_add(context);
            &mut self.num_decode_tokens
        };
        *sum = sum.saturating_add(item.tokens);
        self.items.push(item);
    }

    /// List the decode group's `members` (the lane's list, shared) as the decode items, at
    /// group tick `clock`; the caller then gives the few that take a block theirs
    /// ([`give_block`](Self::give_block)) and counts their context.
    pub(super) fn list_decodes(&mut self, members: &Arc<Vec<Listed>>, clock: u64) {
        // Counts items, which a vector's length bounds: no saturation needed.
        self.num_decode_tokens += members.len();
        let decodes = self.decodes.get_or_insert_default();
        decodes.members = Some(Arc::clone(members));
        decodes.clock = clock;
    }

    /// Decode item `at` (ascending from one call to the next) takes `block`.
    pub(super) fn give_block(&mut self, at: usize, block: usize) {
        let decodes = self.decodes.get_or_insert_default();
        decodes.blocks.push((at, block));
    }

    /// The listed decodes' members, in rank order (none in a lean batch).
    pub(super) fn decode_members(&self) -> &[Listed] {
        self.decodes.as_deref().map_or(&[], Decodes::members)
    }

    /// The listed decodes, if there are any.
    fn listed_decodes(&self) -> Option<&Decodes> {
        (self.decodes.as_deref()).filter(|decodes| !decodes.members().is_empty())
    }

    /// The list of the listed decodes' members, shared with the lane.
    fn shared_members(&self) -> Option<&Arc<Vec<Listed>>> {
        self.decodes.as_deref()?.members.as_ref()
    }

    /// Whether `other` lists the same decodes (the same list of members, shared).
    fn same_decodes(&self, other: &Batch) -> bool {
        match (self.shared_members(), other.shared_members()) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }

    /// Empty the items and the fields that follow from them, keeping their buffers.
    pub(crate) fn clear(&mut self) {
        self.items.clear();
        if let Some(decodes) = self.decodes.as_deref_mut() {
            decodes.clear();
        }
        self.sampling_ids.clear();
        self.num_prefill_tokens = 0;
        self.num_decode_tokens = 0;
        self.decode_context_tokens = 0;
        self.lean = false;
    }

    /// The step this batch plans (0 for the first `schedule()`).
    #[must_use]
    pub fn step_index(&self) -> u128 {
        self.step_index
    }

    /// The items: decodes, then started prefills, then admissions, each in rank order.
    #[must_use]
    pub fn items(&self) -> &[BatchItem] {
        let Some(decodes) = self.listed_decodes() else {
            return &self.items;
        };
        decodes.items.get_or_init(|| {
            let mut items = Vec::with_capacity(self.len());
            items.extend(decodes.items());
            items.extend_from_slice(&self.items);
            items
        })
    }

    /// Ids whose blocks were taken back in this step, in the order preempted.
    #[must_use]
    pub fn preempted(&self) -> &[u64] {
        &self.preempted
    }

    /// Ids of the items that sample, in item order: the order of aligned `token_ids`.
    #[must_use]
    pub fn sampling_ids(&self) -> &[u64] {
        let Some(decodes) = self.listed_decodes() else {
            return &self.sampling_ids;
        };
        decodes.sampling_ids.get_or_init(|| {
            let mut ids = Vec::with_capacity(self.num_sampling());
            ids.extend(decodes.members().iter().map(Listed::id));
            ids.extend_from_slice(&self.sampling_ids);
            ids
        })
    }

    /// How many items sample: the length of `sampling_ids`, without making it.
    #[must_use]
    pub fn num_sampling(&self) -> usize {
        self.decode_members().len() + self.sampling_ids.len()
    }

    /// Whether `other` names the same requests, item by item and preempted: at no cost per
    /// decode when both list the same members of the decode group (one step and the next
    /// with no member joining or leaving).
    #[must_use]
    pub fn same_requests(&self, other: &Batch) -> bool {
        if self.same_decodes(other) {
            return self.preempted == other.preempted
                && (self.items.iter().map(|item| item.request_id))
                    .eq(other.items.iter().map(|item| item.request_id));
        }
        self.preempted == other.preempted && self.request_ids().eq(other.request_ids())
    }

    /// Whether `other` has the same `sampling_ids`, at no cost per decode as
    /// [`same_requests`](Self::same_requests).
    #[must_use]
    pub fn same_sampling_ids(&self, other: &Batch) -> bool {
        if self.same_decodes(other) {
            return self.sampling_ids == other.sampling_ids;
        }
        self.sampling_ids() == other.sampling_ids()
    }

    /// Tokens of prefill items (passes 2 and 3).
    #[must_use]
    pub fn num_prefill_tokens(&self) -> usize {
        self.num_prefill_tokens
    }

    /// Tokens of decode items (pass 1): one per decode, listed or not.
    #[must_use]
    pub fn num_decode_tokens(&self) -> usize {
        self.num_decode_tokens
    }

    /// The decodes' contexts (prompt and generated tokens, the one computed included),
    /// summed: what a step-time model reads of them.
    #[must_use]
    pub fn decode_context_tokens(&self) -> u128 {
        self.decode_context_tokens
    }

    /// Whether its decodes are counted rather than listed (see the type's docs).
    #[must_use]
    pub fn is_lean(&self) -> bool {
        self.lean
    }

    /// Free blocks after this step's allocation.
    #[must_use]
    pub fn num_free_blocks(&self) -> usize {
        self.num_free_blocks
    }

    /// Number of items (listed ones: a lean batch's decodes are not).
    #[must_use]
    pub fn len(&self) -> usize {
        self.decode_members().len() + self.items.len()
    }

    /// Whether the step computes nothing (it still awaits its `update`).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.items.is_empty() && self.num_decode_tokens == 0
    }

    /// The request ids of the items, in item order.
    pub fn request_ids(&self) -> impl ExactSizeIterator<Item = u64> + '_ {
        let decodes = self.decode_members();
        (0..self.len()).map(move |at| match decodes.get(at) {
            Some(member) => member.id(),
            None => self.items[at - decodes.len()].request_id,
        })
    }
}
