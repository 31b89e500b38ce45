//! The one error type of the core: every rejected input, with the offending value.

use std::fmt;

/// Why the scheduler rejected a call. A rejected call changes nothing.
///
/// The `Display` texts are the messages of `python/chunked_prefill/_messages.json`, which the
/// pure-Python twin raises too; a test checks that the two agree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoreError {
    /// `chunk_size` is 0: no request could ever finish.
    InvalidChunkSize {
        /// The rejected value.
        value: usize,
    },
    /// `token_budget` is `Some(0)`: no step could carry a token.
    InvalidTokenBudget {
        /// The rejected value.
        value: usize,
    },
    /// With `interleave_decode`, `token_budget <= max_decode_tokens` could leave no room for
    /// prompt tokens, so a prompt could starve behind decodes.
    TokenBudgetTooSmall {
        /// The rejected budget.
        token_budget: usize,
        /// The decode cap it must exceed.
        max_decode_tokens: usize,
    },
    /// `max_prefills_per_step` is 0: no prompt could ever be scheduled.
    InvalidMaxPrefills {
        /// The rejected value.
        value: usize,
    },
    /// `max_prefills_per_step > 1` without a `token_budget` to share between the chunks.
    PrefillsNeedBudget {
        /// The rejected value.
        value: usize,
    },
    /// A prompt of 0 tokens: there is nothing to prefill and no logits to sample from.
    InvalidTotalTokens {
        /// The rejected value.
        value: usize,
    },
    /// More cached prompt tokens than the prompt has.
    CachedExceedsTotal {
        /// The rejected cached-token count.
        cached_tokens: usize,
        /// The prompt length.
        total_tokens: usize,
    },
    /// A restored `processed_tokens` outside `prefill start ..= total_tokens`.
    ProcessedOutOfRange {
        /// The rejected value.
        processed_tokens: usize,
        /// Where prefill starts for this prompt.
        start: usize,
        /// The prompt length.
        total_tokens: usize,
    },
    /// A restored counter above [`COUNTER_MAX`](crate::COUNTER_MAX), which a run could wrap.
    CounterTooLarge {
        /// Which counter (`step_index`, `chunks_scheduled` or `tokens_prefilled`).
        name: &'static str,
        /// The rejected value.
        value: u128,
    },
    /// The id is already tracked (waiting, in prefill, or completed but not drained).
    DuplicateRequest {
        /// The rejected id.
        request_id: u64,
    },
    /// The id is not tracked.
    UnknownRequest {
        /// The unknown id.
        request_id: u64,
    },
}

impl fmt::Display for CoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidChunkSize { value } => {
                write!(f, "chunk_size must be at least 1, got {value}")
            }
            Self::InvalidTokenBudget { value } => {
                write!(f, "token_budget must be at least 1, got {value}")
            }
            Self::TokenBudgetTooSmall {
                token_budget,
                max_decode_tokens,
            } => write!(
                f,
                "token_budget must be greater than max_decode_tokens ({max_decode_tokens}) \
                 when interleave_decode is true, got {token_budget}"
            ),
            Self::InvalidMaxPrefills { value } => {
                write!(f, "max_prefills_per_step must be at least 1, got {value}")
            }
            Self::PrefillsNeedBudget { value } => write!(
                f,
                "max_prefills_per_step above 1 needs a token_budget, \
                 got max_prefills_per_step={value} with token_budget=None"
            ),
            Self::InvalidTotalTokens { value } => {
                write!(f, "total_tokens must be at least 1, got {value}")
            }
            Self::CachedExceedsTotal {
                cached_tokens,
                total_tokens,
            } => write!(
                f,
                "cached_tokens must be at most total_tokens ({total_tokens}), got {cached_tokens}"
            ),
            Self::ProcessedOutOfRange {
                processed_tokens,
                start,
                total_tokens,
            } => write!(
                f,
                "processed_tokens must be between the prefill start ({start}) and \
                 total_tokens ({total_tokens}), got {processed_tokens}"
            ),
            Self::CounterTooLarge { name, value } => write!(
                f,
                "{name} must be at most 170141183460469231731687303715884105727 \
                 (2**127 - 1, so that no run can wrap it), got {value}"
            ),
            Self::DuplicateRequest { request_id } => write!(
                f,
                "request_id {request_id} is already tracked; abort or drain it first"
            ),
            Self::UnknownRequest { request_id } => {
                write!(f, "request_id {request_id} is not tracked")
            }
        }
    }
}

impl std::error::Error for CoreError {}
