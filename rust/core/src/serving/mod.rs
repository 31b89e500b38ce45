//! The serving scheduler (issue 11): it owns the request lifecycle (prefill, decode, finish),
//! a paged KV-block pool with prefix caching, and preemption.
//!
//! Small parts with one job each: [`ServingConfig`]; the block pool (ref counts, the free
//! queue, registrations; it knows nothing of requests) and its content tree (the block
//! contents the prefix cache knows, compared instead of hashed; `content_tree.rs`); the
//! content hash chain, computed when a hash is asked for; the request record;
//! the request slab; the tokens requests sample where known in advance (`sampled.rs`); the
//! decode group (`group.rs`: the running requests that only decode, advanced by a clock and
//! visited at their events), its lane (`lane.rs`: its members in rank order, as a host's
//! batch lists them) and its id log (`id_log.rs`: the ids a host gives its members, kept by
//! slot until each takes its own); [`ServingScheduler`]'s state and request
//! lifecycle, its step rule (`step.rs`) and the memory a step is sure of before it is
//! planned (`reserve.rs`), its `update` (`update.rs`) and invariant checks;
//! [`Batch`], the plan of one step.
//!
//! # The rule of one step
//!
//! Requests are ranked by `(priority, order of add_request)`, lower first; `left = num_tokens
//! - num_computed`; a running request with `left == 1` is a decode.
//! 1. Decodes, in rank order, get 1 token each; a decode that needs a block when none is free
//!    preempts the worst-ranked running request, repeatedly, or is preempted itself.
//! 2. Running prefills, in rank order, get `min(left, chunk_size, budget left)` tokens and
//!    all their blocks (same preemption rule), up to `max_prefills_per_step` chunks.
//! 3. If nothing was preempted, waiting requests are admitted in rank order while
//!    `ceil(num_tokens / block_size) - hits <= free - still needed by running - watermark`.
//! 4. Items are listed in pass order, each pass in rank order.

mod batch;
mod block_pool;
mod config;
mod content_tree;
mod counts;
mod decode_step;
mod group;
mod hash;
mod id_log;
mod invariants;
mod lane;
mod prefix_query;
mod request;
mod reserve;
mod sampled;
mod scheduler;
mod slab;
mod state;
mod step;
mod update;

pub use batch::{Batch, BatchItem};
pub use config::ServingConfig;
pub use hash::{block_hash, root_hash, BlockHash};
pub use request::{Prompt, RequestState, RequestView};
pub use sampled::SampledTokens;
pub use scheduler::ServingScheduler;
pub use state::{RequestRecord, ServingState};
pub use update::TokenIds;
