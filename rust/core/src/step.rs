//! [`ChunkedStep`] and [`Chunk`]: the plan of one engine step.

/// One request's share of a step: prompt tokens `start .. start + tokens` of `request_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Chunk {
    /// The request whose prompt the chunk belongs to.
    pub request_id: u64,
    /// Prompt position of the chunk's first token (the KV cache holds everything before it).
    pub start: usize,
    /// How many prompt tokens the chunk holds (at least 1).
    pub tokens: usize,
    /// Whether the chunk finishes the prompt: the engine samples the request's first output
    /// token from its last position.
    pub is_last: bool,
}

/// One scheduling decision returned by
/// [`ChunkedPrefillScheduler::next_step`](crate::ChunkedPrefillScheduler::next_step).
///
/// The executing engine should:
/// 1. Run every chunk of `chunks` (the first one is also described by
///    `prefill_request_id`, `prefill_start` and `is_last_chunk`).
/// 2. Run `decode_tokens` tokens for the currently active decode requests.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct ChunkedStep {
    /// Request of the first prefill chunk scheduled this step.
    ///
    /// `None` when there is no active prefill (pure decode step).
    pub prefill_request_id: Option<u64>,
    /// Number of prefill tokens to process this step (the sum over `chunks`).
    ///
    /// `0` when there is no active prefill request.
    pub prefill_tokens: usize,
    /// Number of decode tokens to process this step.
    ///
    /// `0` when `interleave_decode` is `false` or `active_decode_count == 0`.
    pub decode_tokens: usize,
    /// Monotonically increasing step counter (zero-based; 128-bit so it never wraps).
    pub step_index: u128,
    /// Prompt position where the first chunk starts (`0` in a pure decode step).
    pub prefill_start: usize,
    /// Whether the first chunk completes its prompt (`false` in a pure decode step).
    pub is_last_chunk: bool,
    /// Every prefill chunk of the step, in scheduling order.
    pub chunks: Vec<Chunk>,
}

impl ChunkedStep {
    /// A step of `decode_tokens` decodes and `chunks`, with the summary fields derived from
    /// the chunks. `None` if their token counts add up past `usize::MAX`.
    #[must_use]
    pub fn from_chunks(step_index: u128, decode_tokens: usize, chunks: Vec<Chunk>) -> Option<Self> {
        let mut prefill_tokens: usize = 0;
        for chunk in &chunks {
            prefill_tokens = prefill_tokens.checked_add(chunk.tokens)?;
        }
        Some(Self::assemble(
            step_index,
            decode_tokens,
            chunks,
            prefill_tokens,
        ))
    }

    /// The step, given the sum of its chunks' tokens (`prefill_tokens`).
    pub(crate) fn assemble(
        step_index: u128,
        decode_tokens: usize,
        chunks: Vec<Chunk>,
        prefill_tokens: usize,
    ) -> Self {
        let first = chunks.first();
        Self {
            prefill_request_id: first.map(|c| c.request_id),
            prefill_tokens,
            decode_tokens,
            step_index,
            prefill_start: first.map_or(0, |c| c.start),
            is_last_chunk: first.is_some_and(|c| c.is_last),
            chunks,
        }
    }
}
