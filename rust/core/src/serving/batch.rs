//! [`Batch`] and [`BatchItem`]: the plan of one step, which the engine runs and reports back.

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

/// The plan of one step. `Eq`/`Hash` follow `(step_index, items, preempted,
/// num_free_blocks)`, of which the other fields are functions.
///
/// A *lean* batch ([`ServingScheduler::schedule_lean`](super::ServingScheduler::schedule_lean))
/// lists its prefill items only: its decodes are counted (`num_decode_tokens`,
/// `decode_context_tokens`) but not listed, and its `sampling_ids` are its prefill items'.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Batch {
    pub(crate) step_index: u128,
    pub(crate) items: Vec<BatchItem>,
    pub(crate) preempted: Vec<u64>,
    pub(crate) sampling_ids: Vec<u64>,
    pub(crate) num_prefill_tokens: usize,
    pub(crate) num_decode_tokens: usize,
    pub(crate) num_free_blocks: usize,
    /// The decode items' `start + 1` (their context), summed.
    pub(crate) decode_context_tokens: u128,
    /// Its decodes are counted, not listed.
    pub(crate) lean: bool,
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

    /// [`push`](Self::push) for decodes (most items of a step), given as `(request_id,
    /// start)`: one token each, sampled, no block yet (the caller gives the few that take
    /// one theirs). Their context is counted by the caller.
    #[inline]
    pub(crate) fn push_decodes(
        &mut self,
        decodes: impl ExactSizeIterator<Item = (u64, u128)> + Clone,
    ) {
        // Counts items, which a vector's length bounds: no saturation needed.
        self.num_decode_tokens += decodes.len();
        self.sampling_ids.extend(decodes.clone().map(|(id, _)| id));
        self.items
            .extend(decodes.map(|(request_id, start)| BatchItem {
                request_id,
                start,
                tokens: 1,
                is_prefill: false,
                samples: true,
                new_blocks: Vec::new(),
                cached_tokens: 0,
            }));
    }

    /// The decode items at the front of `items` (none in a lean batch).
    pub(crate) fn decode_items(&self) -> usize {
        if self.lean {
            0
        } else {
            self.num_decode_tokens
        }
    }

    /// Empty the items and the fields that follow from them, keeping their buffers.
    pub(crate) fn clear(&mut self) {
        self.items.clear();
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
        &self.items
    }

    /// Ids whose blocks were taken back in this step, in the order preempted.
    #[must_use]
    pub fn preempted(&self) -> &[u64] {
        &self.preempted
    }

    /// Ids of the items that sample, in item order: the order of aligned `token_ids`.
    #[must_use]
    pub fn sampling_ids(&self) -> &[u64] {
        &self.sampling_ids
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
        self.items.len()
    }

    /// Whether the step computes nothing (it still awaits its `update`).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.items.is_empty() && self.num_decode_tokens == 0
    }

    /// The request ids of the items, in item order.
    pub fn request_ids(&self) -> impl ExactSizeIterator<Item = u64> + '_ {
        self.items.iter().map(|item| item.request_id)
    }
}
