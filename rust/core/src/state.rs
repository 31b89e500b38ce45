//! [`PrefillChunkState`]: one request's progress through prefill.

use crate::{ChunkedPrefillConfig, CoreError};

/// Progress state for a single request that is being chunked through prefill.
///
/// Created by [`ChunkedPrefillScheduler::enqueue`](crate::ChunkedPrefillScheduler::enqueue)
/// and updated by each call to
/// [`ChunkedPrefillScheduler::next_step`](crate::ChunkedPrefillScheduler::next_step).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefillChunkState {
    /// Unique identifier supplied by the caller (mirrors request IDs in the
    /// surrounding scheduler infrastructure).
    pub request_id: u64,
    /// Total prompt tokens for this request.
    pub total_tokens: usize,
    /// Prompt position up to which prefill is done: starts at the prefill start
    /// (see [`PrefillChunkState::prefill_start`]) and ends at `total_tokens`.
    pub processed_tokens: usize,
    /// `true` once `processed_tokens == total_tokens`.
    pub is_complete: bool,
    /// Prompt tokens already in the engine's prefix cache when the request was enqueued.
    pub cached_tokens: usize,
    /// Scheduling priority among requests not yet started: lower starts first.
    pub priority: i64,
}

/// Where prefill starts for a prompt of `total_tokens` with `cached_tokens` cached: after the
/// cached prefix, except that the last token is always computed (the engine needs its
/// logits to sample the first output token).
#[must_use]
pub fn prefill_start(total_tokens: usize, cached_tokens: usize) -> usize {
    if cached_tokens >= total_tokens {
        total_tokens.saturating_sub(1)
    } else {
        cached_tokens
    }
}

pub(crate) fn check_prompt(total_tokens: usize, cached_tokens: usize) -> Result<(), CoreError> {
    if total_tokens == 0 {
        return Err(CoreError::InvalidTotalTokens {
            value: total_tokens,
        });
    }
    if cached_tokens > total_tokens {
        return Err(CoreError::CachedExceedsTotal {
            cached_tokens,
            total_tokens,
        });
    }
    Ok(())
}

impl PrefillChunkState {
    /// Create a new state for `request_id` with `total_tokens` to process.
    ///
    /// # Errors
    ///
    /// [`CoreError::InvalidTotalTokens`] if `total_tokens == 0` (the original only
    /// debug-asserted this).
    pub fn new(request_id: u64, total_tokens: usize) -> Result<Self, CoreError> {
        Self::with_prefix(request_id, total_tokens, 0, 0)
    }

    /// Create a state whose first `cached_tokens` prompt tokens are already in the engine's
    /// prefix cache, at scheduling `priority`.
    ///
    /// # Errors
    ///
    /// [`CoreError::InvalidTotalTokens`] or [`CoreError::CachedExceedsTotal`].
    pub fn with_prefix(
        request_id: u64,
        total_tokens: usize,
        cached_tokens: usize,
        priority: i64,
    ) -> Result<Self, CoreError> {
        check_prompt(total_tokens, cached_tokens)?;
        Ok(Self {
            request_id,
            total_tokens,
            processed_tokens: prefill_start(total_tokens, cached_tokens),
            is_complete: false,
            cached_tokens,
            priority,
        })
    }

    /// Rebuild a state that had reached `processed_tokens` (from an exported scheduler).
    ///
    /// # Errors
    ///
    /// As [`PrefillChunkState::with_prefix`], and [`CoreError::ProcessedOutOfRange`] when
    /// `processed_tokens` is before the prefill start or past `total_tokens`.
    pub fn restored(
        request_id: u64,
        total_tokens: usize,
        processed_tokens: usize,
        cached_tokens: usize,
        priority: i64,
    ) -> Result<Self, CoreError> {
        let mut state = Self::with_prefix(request_id, total_tokens, cached_tokens, priority)?;
        let start = state.processed_tokens;
        if processed_tokens < start || processed_tokens > total_tokens {
            return Err(CoreError::ProcessedOutOfRange {
                processed_tokens,
                start,
                total_tokens,
            });
        }
        state.processed_tokens = processed_tokens;
        state.is_complete = processed_tokens == total_tokens;
        Ok(state)
    }

    /// Where this request's prefill starts in its prompt (see [`prefill_start`]).
    #[must_use]
    pub fn prefill_start(&self) -> usize {
        prefill_start(self.total_tokens, self.cached_tokens)
    }

    /// Whether the request has received at least one chunk.
    #[must_use]
    pub fn is_started(&self) -> bool {
        self.processed_tokens > self.prefill_start()
    }

    /// Advance by `n` tokens.
    ///
    /// Clamps to `total_tokens` so callers do not need to guard against
    /// overshooting. Sets `is_complete` when all tokens are processed.
    pub fn advance(&mut self, n: usize) {
        self.processed_tokens = self
            .processed_tokens
            .saturating_add(n)
            .min(self.total_tokens);
        self.is_complete = self.processed_tokens >= self.total_tokens;
    }

    /// Number of tokens still to be prefilled.
    #[must_use]
    pub fn remaining(&self) -> usize {
        self.total_tokens.saturating_sub(self.processed_tokens)
    }

    /// Fraction of the prompt that has been processed, in `0.0..=1.0`, in double precision
    /// (the pure-Python twin computes the same `processed / total`).
    ///
    /// Returns `1.0` for a zero-length prompt, which the constructors reject anyway.
    #[must_use]
    #[allow(clippy::cast_precision_loss)]
    pub fn progress(&self) -> f64 {
        if self.total_tokens == 0 {
            return 1.0;
        }
        self.processed_tokens as f64 / self.total_tokens as f64
    }

    /// Size of the next chunk to schedule, given `config`.
    ///
    /// Always `<= config.chunk_size` and `<= self.remaining()`.
    /// Returns `0` when `is_complete`.
    #[must_use]
    pub fn next_chunk_size(&self, config: &ChunkedPrefillConfig) -> usize {
        self.remaining().min(config.chunk_size)
    }
}
