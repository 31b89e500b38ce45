//! Chunked prefill scheduler — interleaves prefill chunks with decode steps.
//!
//! For long prompts, processing the entire prompt in one shot causes quadratic
//! attention memory (`O(seq^2)`) and starves decode requests waiting in queue.
//! Chunked prefill (Sarathi, arXiv:2308.16369; Sarathi-Serve, arXiv:2403.02310)
//! solves this by:
//!
//! - Splitting each prompt into fixed-size *chunks* (default: 512 tokens).
//! - Scheduling one chunk per step, optionally co-scheduling active decode
//!   requests in the same GPU step.
//! - Bounding first-token latency for long prompts while sustaining throughput.
//!
//! With a `token_budget`, each step instead carries at most that many tokens: decodes
//! first, then chunks of up to `max_prefills_per_step` requests share the rest.
//!
//! # Example
//!
//! ```rust
//! use chunked_prefill::{
//!     ChunkedPrefillConfig, ChunkedPrefillScheduler, PrefillChunkState,
//! };
//!
//! let config = ChunkedPrefillConfig {
//!     chunk_size: 512,
//!     max_decode_tokens: 128,
//!     interleave_decode: true,
//!     ..Default::default()
//! };
//!
//! let mut scheduler = ChunkedPrefillScheduler::new(config)?;
//!
//! // Enqueue a 1024-token prompt.
//! scheduler.enqueue(42, 1024)?;
//!
//! // First step: 512 prefill tokens + up to 128 decode tokens.
//! let step = scheduler.next_step(8);
//! assert_eq!(step.prefill_tokens, 512);
//! assert_eq!(step.decode_tokens, 8); // min(128, 8)
//! assert_eq!(step.prefill_request_id, Some(42));
//!
//! // Second step: remaining 512 tokens.
//! let step = scheduler.next_step(8);
//! assert_eq!(step.prefill_tokens, 512);
//!
//! // Prefill is now complete; drain and confirm.
//! assert_eq!(scheduler.drain_completed(), 1);
//! assert!(scheduler.is_idle());
//! # let _ = PrefillChunkState::new(1, 1)?;
//! # Ok::<(), chunked_prefill::CoreError>(())
//! ```

#![forbid(unsafe_code)]

mod config;
mod error;
pub mod random;
mod scheduler;
pub mod serving;
pub mod sim;
mod state;
mod step;
pub mod trace;

pub use config::ChunkedPrefillConfig;
pub use error::{py_float_repr, CoreError};
pub use scheduler::{ChunkedPrefillScheduler, Counters, COUNTER_MAX};
pub use serving::{
    Batch, BatchItem, Prompt, RequestRecord, RequestState, RequestView, SampledTokens,
    ServingConfig, ServingScheduler, ServingState, TokenIds,
};
pub use state::{prefill_start, PrefillChunkState};
pub use step::{Chunk, ChunkedStep};
