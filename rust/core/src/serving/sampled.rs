//! [`SampledTokens`]: the token each request samples at each position, where that is known
//! in advance (a simulator's workload, whose ids are a function of the position).
//!
//! Given one ([`ServingScheduler::set_sampled_tokens`](super::ServingScheduler::set_sampled_tokens)),
//! the scheduler needs no token ids from `update` for the members of its decode group: a
//! member is given the tokens of the ticks it lagged when it is next settled (a block it
//! fills and registers, a preemption), so a lean step (`schedule_lean`) keeps the prefix
//! cache of generated blocks exactly as full steps given the same ids would.

use std::fmt;
use std::sync::Arc;

/// `tokens(request_id, position)`: the token request `request_id` samples at `position`
/// (its prompt's length for its first sampled token).
#[derive(Clone)]
pub struct SampledTokens(Arc<dyn Fn(u64, u128) -> u32 + Send + Sync>);

impl SampledTokens {
    /// The tokens `tokens` gives.
    pub fn new(tokens: impl Fn(u64, u128) -> u32 + Send + Sync + 'static) -> Self {
        Self(Arc::new(tokens))
    }

    /// The token request `request_id` samples at `position`.
    #[must_use]
    #[inline]
    pub fn at(&self, request_id: u64, position: u128) -> u32 {
        (self.0)(request_id, position)
    }
}

impl fmt::Debug for SampledTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SampledTokens(..)")
    }
}
