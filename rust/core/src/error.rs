//! The one error type of the core: every rejected input, with the offending value.

use std::fmt;

/// Why the scheduler rejected a call. A rejected call changes nothing.
///
/// The `Display` texts are the messages of `python/chunked_prefill/_messages.json`, which the
/// pure-Python twin raises too; a test checks that the two agree.
#[derive(Debug, Clone, PartialEq)]
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
    /// A serving-config count is 0 (`num_blocks`, `block_size`, `token_budget`, `chunk_size`,
    /// `max_prefills_per_step` or `max_running`): the scheduler could never run a step.
    CountZero {
        /// Which field.
        name: &'static str,
        /// The rejected value.
        value: usize,
    },
    /// `max_running >= token_budget`: the decodes of a full running set could fill a step and
    /// starve every prefill.
    MaxRunningTooLarge {
        /// The rejected value.
        max_running: usize,
        /// The budget it must stay below.
        token_budget: usize,
    },
    /// `watermark` outside `[0, 1)` or NaN.
    WatermarkRange {
        /// The rejected value.
        value: f64,
    },
    /// A prompt of 0 tokens: there are no logits to sample the first token from.
    PromptEmpty,
    /// `max_new_tokens` is 0: the request would be finished before it started.
    MaxNewTokensZero,
    /// The id is already tracked by the serving scheduler.
    ServingDuplicate {
        /// The rejected id.
        request_id: u64,
    },
    /// The id was aborted while it had an item in the pending batch; it can be added again
    /// after that batch's `update`.
    RequestPending {
        /// The rejected id.
        request_id: u64,
        /// The pending batch.
        step_index: u128,
    },
    /// Prompt plus generated tokens need more blocks than the pool can ever give one request.
    RequestNeverFits {
        /// The rejected id.
        request_id: u64,
        /// The prompt length.
        prompt_tokens: u64,
        /// The requested generation length.
        max_new_tokens: u64,
        /// `ceil((prompt_tokens + max_new_tokens - 1) / block_size)`.
        needed: u128,
        /// Tokens per block.
        block_size: usize,
        /// `num_blocks - watermark_blocks`.
        usable: usize,
        /// The pool size.
        num_blocks: usize,
        /// Blocks admission keeps free.
        watermark_blocks: usize,
    },
    /// `finished` names the same id twice.
    FinishedDuplicate {
        /// The repeated id.
        request_id: u64,
    },
    /// Aligned `token_ids` of the wrong length.
    TokenIdsLength {
        /// `len(batch.sampling_ids)`.
        expected: usize,
        /// The given length.
        got: usize,
    },
    /// A `token_ids` mapping names a request that did not sample in the batch.
    TokenIdsNotSampled {
        /// The key.
        request_id: u64,
        /// The batch being updated.
        step_index: u128,
    },
    /// A token id above `u32::MAX` (raised by the binding, which converts the ids).
    TokenIdRange {
        /// Where the id was (`token_ids[3]`, `prompt[0]`).
        name: String,
        /// The rejected id.
        value: u64,
    },
    /// `schedule()` while a batch awaits `update()`.
    BatchPending {
        /// The pending batch.
        step_index: u128,
    },
    /// `update()` with no batch pending.
    BatchNotPending {
        /// The given batch's step index.
        got: u128,
    },
    /// `update()` with a batch that is not the pending one.
    BatchStale {
        /// The given batch's step index.
        got: u128,
        /// The pending batch's step index.
        expected: u128,
    },
    /// A state export while a batch awaits `update()`.
    StateBatchPending {
        /// The pending batch.
        step_index: u128,
    },
    /// What a call would build does not fit in memory (a fallible allocation failed); the
    /// call changed nothing. The binding raises `MemoryError`.
    OutOfMemory {
        /// What was too big (`a step of 1073741824 KV blocks`).
        what: String,
    },
    /// A restored serving state breaks one of the scheduler's invariants.
    StateRule {
        /// Where (`requests[2].block_table`).
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A state export holds a list too long to allocate (a pool or an int prompt of
    /// astronomical size): Python's `MemoryError`, as the twin's list would raise.
    StateTooLarge {
        /// The list (`free_queue`, `requests[0].tokens`).
        path: String,
        /// Its entries.
        len: u128,
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
            Self::CountZero { name, value } => write!(f, "{name} must be at least 1, got {value}"),
            Self::MaxRunningTooLarge {
                max_running,
                token_budget,
            } => write!(
                f,
                "max_running must be less than token_budget ({token_budget}), got {max_running}"
            ),
            Self::WatermarkRange { value } => write!(
                f,
                "watermark must be at least 0 and less than 1, got {}",
                py_float_repr(*value)
            ),
            Self::PromptEmpty => f.write_str("prompt must hold at least 1 token, got 0"),
            Self::MaxNewTokensZero => f.write_str("max_new_tokens must be at least 1, got 0"),
            Self::ServingDuplicate { request_id } => write!(
                f,
                "request_id {request_id} is already tracked; abort it or let it finish first"
            ),
            Self::RequestPending {
                request_id,
                step_index,
            } => write!(
                f,
                "request_id {request_id} has an item in the pending batch {step_index}; \
                 call update() first"
            ),
            Self::RequestNeverFits {
                request_id,
                prompt_tokens,
                max_new_tokens,
                needed,
                block_size,
                usable,
                num_blocks,
                watermark_blocks,
            } => write!(
                f,
                "request_id {request_id} can never fit: {prompt_tokens} prompt tokens and \
                 max_new_tokens {max_new_tokens} need {needed} blocks of {block_size} tokens, \
                 above the {usable} usable blocks (num_blocks {num_blocks} minus \
                 {watermark_blocks} watermark blocks)"
            ),
            Self::FinishedDuplicate { request_id } => {
                write!(f, "finished names request_id {request_id} more than once")
            }
            Self::TokenIdsLength { expected, got } => write!(
                f,
                "token_ids must hold one id per sampling item ({expected}), got {got}"
            ),
            Self::TokenIdsNotSampled {
                request_id,
                step_index,
            } => write!(
                f,
                "token_ids has request_id {request_id}, which did not sample in batch {step_index}"
            ),
            Self::TokenIdRange { name, value } => write!(
                f,
                "{name} must be a token id between 0 and 4294967295, got {value}"
            ),
            Self::BatchPending { step_index } => write!(
                f,
                "schedule() called while batch {step_index} awaits update()"
            ),
            Self::BatchNotPending { got } => {
                write!(f, "update() got batch {got}, but no batch is pending")
            }
            Self::BatchStale { got, expected } => write!(
                f,
                "update() got batch {got}, which is not the pending batch {expected} (an earlier \
                 step's, another scheduler's, or a batch changed since)"
            ),
            Self::StateBatchPending { step_index } => write!(
                f,
                "to_state() called while batch {step_index} awaits update()"
            ),
            Self::OutOfMemory { what } => write!(f, "{what} does not fit in memory"),
            Self::StateRule { path, message } => write!(f, "{path}: {message}"),
            Self::StateTooLarge { path, len } => {
                write!(f, "{path}: {len} entries do not fit in memory")
            }
        }
    }
}

impl std::error::Error for CoreError {}

/// `value` as Python's `repr(float)` prints it, so that both backends word a rejected
/// watermark alike.
///
/// Rust's `{:?}` of an `f64` is the same shortest round-trip digits as Python's `repr`, and
/// switches to scientific notation at the same thresholds (below `1e-4`, from `1e16`); only
/// the spelling differs: Python writes `nan`, `inf` and a signed exponent of at least two
/// digits (`1e-05`, `1e+16`) where Rust writes `NaN`, `inf` and `1e-5`, `1e16`.
#[must_use]
pub fn py_float_repr(value: f64) -> String {
    if value.is_nan() {
        return "nan".to_owned();
    }
    let text = format!("{value:?}");
    match text.split_once('e') {
        None => text,
        Some((mantissa, exponent)) => {
            let (sign, digits) = match exponent.strip_prefix('-') {
                Some(digits) => ('-', digits),
                None => ('+', exponent),
            };
            format!("{mantissa}e{sign}{digits:0>2}")
        }
    }
}
