//! [`Fleet`] and [`Router`]: N identical replicas, and the rule that assigns each arriving
//! request to one of them (at its arrival time, seeing each replica as of its last completed
//! step).

use std::fmt;

/// How many replicas, and how requests are spread over them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fleet {
    /// Identical replicas, each its own serving scheduler and engine clock (at least 1).
    pub replicas: usize,
    /// The router in front of them.
    pub router: Router,
}

impl Default for Fleet {
    /// One replica behind a round-robin router: the single-engine simulation.
    fn default() -> Self {
        Self {
            replicas: 1,
            router: Router::RoundRobin,
        }
    }
}

/// The routing rule. Every rule is deterministic; ties go to the lowest replica index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Router {
    /// The k-th request in arrival order goes to replica `k mod N`.
    RoundRobin,
    /// The replica with the fewest outstanding tokens (see [`outstanding`]).
    LeastLoaded,
    /// The replica whose prefix cache holds the longest prefix of the request's prompt
    /// (`ServingScheduler::cached_prefix_tokens`), ties by outstanding tokens then index.
    /// A request added as a bare length shares nothing: least-loaded.
    PrefixAware,
}

impl Router {
    /// The routers' names, as `--router` spells them.
    pub const NAMES: [&'static str; 3] = ["round-robin", "least-loaded", "prefix-aware"];

    /// The router named `name` (one of [`Router::NAMES`]).
    #[must_use]
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "round-robin" => Some(Self::RoundRobin),
            "least-loaded" => Some(Self::LeastLoaded),
            "prefix-aware" => Some(Self::PrefixAware),
            _ => None,
        }
    }

    /// Its name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RoundRobin => "round-robin",
            Self::LeastLoaded => "least-loaded",
            Self::PrefixAware => "prefix-aware",
        }
    }

    /// The replica for the `routed`-th request (0-based, arrival order), given each
    /// replica's outstanding tokens and, for the prefix-aware rule, a way to ask a replica
    /// how many leading prompt tokens it has cached (`None`: the request has no ids).
    pub fn pick(
        self,
        routed: u64,
        loads: &[u128],
        cached: Option<&mut dyn FnMut(usize) -> u128>,
    ) -> usize {
        let n = loads.len();
        if n == 1 {
            return 0;
        }
        match (self, cached) {
            (Self::RoundRobin, _) => (routed % n as u64) as usize,
            (Self::PrefixAware, Some(cached)) => {
                let key = |r: usize, hit: u128| (std::cmp::Reverse(hit), loads[r], r);
                (0..n)
                    .map(|r| key(r, cached(r)))
                    .min()
                    .map_or(0, |(_, _, r)| r)
            }
            (Self::LeastLoaded | Self::PrefixAware, _) => {
                (0..n).min_by_key(|&r| (loads[r], r)).unwrap_or(0)
            }
        }
    }
}

impl fmt::Display for Router {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A request's outstanding tokens, the least-loaded router's measure: its prompt tokens not
/// yet computed (`prompt - min(computed, prompt)`, where a preemption sets `computed` back
/// to 0) plus its output tokens not yet sampled. A replica's load is the sum over the
/// requests routed to it and not finished, as of its last completed step.
#[must_use]
pub fn outstanding(prompt: u64, output: u64, computed: u64, emitted: u64) -> u128 {
    u128::from(prompt - computed.min(prompt)) + u128::from(output - emitted)
}
