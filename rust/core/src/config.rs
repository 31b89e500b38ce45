//! [`ChunkedPrefillConfig`]: how prompts are split and how each step is filled.

use crate::CoreError;

/// Configuration for chunked prefill scheduling.
///
/// All fields have sensible defaults via [`Default`]:
/// - `chunk_size = 512`
/// - `max_decode_tokens = 128`
/// - `interleave_decode = true`
/// - `token_budget = None` (the original rule: one chunk per step, decodes beside it)
/// - `max_prefills_per_step = 1`
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ChunkedPrefillConfig {
    /// Maximum number of prompt tokens one request receives in one step.
    ///
    /// Smaller values reduce peak attention memory at the cost of more
    /// scheduling overhead. 512 is a good default for 80 GB A100s.
    pub chunk_size: usize,
    /// Maximum decode tokens to process alongside the prefill chunks.
    ///
    /// When `interleave_decode` is `true`, each step runs at most this many
    /// decode tokens in parallel with the prefill chunk. The actual count is
    /// `min(max_decode_tokens, active_decode_count)` (and at most `token_budget`).
    pub max_decode_tokens: usize,
    /// Whether to interleave decode requests with prefill chunks.
    ///
    /// Set to `false` to dedicate each GPU step entirely to prefill (useful
    /// when decode latency is not a concern, e.g. offline batch processing).
    pub interleave_decode: bool,
    /// The most tokens (decode + prefill) one step may carry, shared by decodes (first) and
    /// the prefill chunks of up to `max_prefills_per_step` requests.
    ///
    /// `None` keeps the original rule: one chunk of up to `chunk_size` per step, decode
    /// tokens counted beside it.
    pub token_budget: Option<usize>,
    /// How many requests may receive a prefill chunk in one step (needs a `token_budget`
    /// when above 1).
    pub max_prefills_per_step: usize,
}

impl Default for ChunkedPrefillConfig {
    fn default() -> Self {
        Self {
            chunk_size: 512,
            max_decode_tokens: 128,
            interleave_decode: true,
            token_budget: None,
            max_prefills_per_step: 1,
        }
    }
}

impl ChunkedPrefillConfig {
    /// Check the rules every scheduler relies on; the first broken one is the error.
    ///
    /// # Errors
    ///
    /// [`CoreError::InvalidChunkSize`], [`CoreError::InvalidTokenBudget`],
    /// [`CoreError::TokenBudgetTooSmall`], [`CoreError::InvalidMaxPrefills`] or
    /// [`CoreError::PrefillsNeedBudget`], in that order.
    pub fn validate(&self) -> Result<(), CoreError> {
        if self.chunk_size == 0 {
            return Err(CoreError::InvalidChunkSize {
                value: self.chunk_size,
            });
        }
        if let Some(budget) = self.token_budget {
            if budget == 0 {
                return Err(CoreError::InvalidTokenBudget { value: budget });
            }
            if self.interleave_decode && budget <= self.max_decode_tokens {
                return Err(CoreError::TokenBudgetTooSmall {
                    token_budget: budget,
                    max_decode_tokens: self.max_decode_tokens,
                });
            }
        }
        if self.max_prefills_per_step == 0 {
            return Err(CoreError::InvalidMaxPrefills {
                value: self.max_prefills_per_step,
            });
        }
        if self.max_prefills_per_step > 1 && self.token_budget.is_none() {
            return Err(CoreError::PrefillsNeedBudget {
                value: self.max_prefills_per_step,
            });
        }
        Ok(())
    }
}
