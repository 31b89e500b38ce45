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
type At = dyn Fn(u64, u128) -> u32 + Send + Sync;

/// `run(request_id, first, count, out)`: appends the tokens of positions `first..first +
/// count`, as `count` calls of [`At`] would give them.
type Run = dyn Fn(u64, u128, u64, &mut Vec<u32>) + Send + Sync;

/// The tokens each request samples: one at a time, and optionally a run at once (a member
/// of the decode group is given the tokens of every tick it lagged when it is settled, a
/// run of up to a block's worth; a workload whose ids come from one stream per request
/// computes the run without a call per token).
#[derive(Clone)]
pub struct SampledTokens {
    at: Arc<At>,
    run: Option<Arc<Run>>,
}

impl SampledTokens {
    /// The tokens `tokens` gives.
    pub fn new(tokens: impl Fn(u64, u128) -> u32 + Send + Sync + 'static) -> Self {
        Self {
            at: Arc::new(tokens),
            run: None,
        }
    }

    /// The tokens `tokens` gives, whose runs `run` appends at once: `run(request_id, first,
    /// count, out)` must append what `tokens(request_id, first + k)` gives for each `k` in
    /// `0..count`, in that order.
    pub fn with_runs(
        tokens: impl Fn(u64, u128) -> u32 + Send + Sync + 'static,
        run: impl Fn(u64, u128, u64, &mut Vec<u32>) + Send + Sync + 'static,
    ) -> Self {
        Self {
            at: Arc::new(tokens),
            run: Some(Arc::new(run)),
        }
    }

    /// The token request `request_id` samples at `position`.
    #[must_use]
    #[inline]
    pub fn at(&self, request_id: u64, position: u128) -> u32 {
        (self.at)(request_id, position)
    }

    /// Append the tokens request `request_id` samples at positions `first..first + count`
    /// to `out`.
    pub fn extend(&self, request_id: u64, first: u128, count: u64, out: &mut Vec<u32>) {
        match &self.run {
            Some(run) => run(request_id, first, count, out),
            None => out.extend((0..count).map(|k| self.at(request_id, first + u128::from(k)))),
        }
    }
}

impl fmt::Debug for SampledTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SampledTokens(..)")
    }
}
