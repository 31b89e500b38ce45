//! [`SimError`]: why a run could not finish.

use std::fmt;

/// Why a run could not finish.
#[derive(Debug, Clone, PartialEq)]
pub enum SimError {
    /// The configuration breaks a rule of the serving scheduler.
    Config(String),
    /// A request needs more blocks than the pool can ever give it.
    NeverFits {
        /// The request's index in the workload.
        request: usize,
        /// Its prompt length.
        prompt_tokens: u64,
        /// Its output length.
        output_tokens: u64,
        /// Blocks it needs at its longest.
        needed: u64,
        /// Blocks admission may use.
        usable: u64,
    },
    /// No replica can plan a step and no request is left to arrive (the scheduler's rules
    /// should make this impossible; reported instead of looping).
    Stalled {
        /// Requests finished by then.
        done: usize,
        /// Requests in the workload.
        requests: usize,
    },
    /// What the run would build does not fit in memory (a prompt's token ids, the
    /// per-request records); nothing ran past it.
    OutOfMemory {
        /// What was too big (`request 0's prompt of 1099511627776 token ids`).
        what: String,
    },
    /// The caller's stop hook asked the loop to stop ([`run_fleet_until`](super::run_fleet_until)); nothing is
    /// returned of the run.
    Interrupted {
        /// Requests finished by then.
        done: usize,
        /// Requests in the workload.
        requests: usize,
    },
    /// The run reached `max_steps`.
    StepLimit {
        /// The limit.
        steps: u64,
        /// Requests finished by then.
        done: usize,
        /// Requests in the workload.
        requests: usize,
    },
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Config(text) => f.write_str(text),
            Self::NeverFits {
                request,
                prompt_tokens,
                output_tokens,
                needed,
                usable,
            } => write!(
                f,
                "request {request} (prompt {prompt_tokens} tokens, output {output_tokens}) needs \
                 {needed} KV blocks at its longest, but the pool has {usable} usable blocks: it \
                 could never run"
            ),
            Self::OutOfMemory { what } => write!(f, "{what} does not fit in memory"),
            Self::Stalled { done, requests } => write!(
                f,
                "no replica can plan a step with {done} of {requests} requests done"
            ),
            Self::Interrupted { done, requests } => {
                write!(f, "interrupted with {done} of {requests} requests done")
            }
            Self::StepLimit {
                steps,
                done,
                requests,
            } => write!(
                f,
                "reached the limit of {steps} steps with {done} of {requests} requests done"
            ),
        }
    }
}

impl std::error::Error for SimError {}
