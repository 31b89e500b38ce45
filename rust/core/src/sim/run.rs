//! [`run`]: the event loop. Each turn: add the requests that have arrived, plan a step with
//! the serving scheduler, give it the engine model's duration, report it back, record.

use std::fmt;

use super::engine::{EngineModel, StepShape};
use super::metrics::Outcome;
use super::workload::Workload;
use crate::serving::{Prompt, ServingConfig, ServingScheduler, TokenIds};

/// What a run needs beside the workload.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// The serving scheduler's configuration (its pool is the engine's KV cache).
    pub config: ServingConfig,
    /// The engine's step-time model.
    pub engine: EngineModel,
    /// Stop with [`SimError::StepLimit`] after this many steps.
    pub max_steps: u64,
}

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

/// The first request that can never fit the pool: it needs `ceil((prompt + output - 1) /
/// block_size)` blocks at its longest, above `num_blocks - watermark blocks`.
///
/// # Errors
///
/// [`SimError::NeverFits`] naming it.
pub fn check_fits(workload: &Workload, config: &ServingConfig) -> Result<(), SimError> {
    let bs = config.block_size as u128;
    let usable = config.num_blocks.saturating_sub(config.watermark_blocks()) as u64;
    for i in 0..workload.len() {
        let (p, o) = (workload.prompt_tokens[i], workload.output_tokens[i]);
        let needed = (u128::from(p) + u128::from(o) - 1).div_ceil(bs);
        if needed > u128::from(usable) {
            return Err(SimError::NeverFits {
                request: i,
                prompt_tokens: p,
                output_tokens: o,
                needed: u64::try_from(needed).unwrap_or(u64::MAX),
                usable,
            });
        }
    }
    Ok(())
}

/// The loop's state between steps.
struct Loop<'a> {
    workload: &'a Workload,
    sched: ServingScheduler,
    out: Outcome,
    /// Admission order and the next request in it not yet added.
    order: Vec<usize>,
    next: usize,
    /// Per request: what its tokens so far were, one record per request so that a step
    /// touches one place per sampling request.
    progress: Vec<Progress>,
    done: usize,
    now: f64,
    /// Scratch: a prompt's ids, the ids sampled in a step.
    ids: Vec<u32>,
    sampled: Vec<u32>,
}

/// A request's tokens so far, as the loop reads and writes them every step.
#[derive(Debug, Clone, Copy, Default)]
struct Progress {
    /// Tokens sampled so far.
    emitted: u64,
    /// When the last one was.
    last: f64,
    /// The longest gap between two of them (copied to the outcome when it finishes).
    max_gap: f64,
}

/// Run `workload` through a [`ServingScheduler`] built from `options.config`, every request
/// stopping at its `output_tokens`.
///
/// # Errors
///
/// [`SimError::Config`] for a bad configuration, [`SimError::NeverFits`] for a request the
/// pool can never hold (both before anything runs), [`SimError::StepLimit`].
pub fn run(workload: &Workload, options: &SimOptions) -> Result<Outcome, SimError> {
    let sched = ServingScheduler::new(options.config.clone())
        .map_err(|e| SimError::Config(e.to_string()))?;
    check_fits(workload, &options.config)?;
    let n = workload.len();
    let mut sim = Loop {
        workload,
        sched,
        out: Outcome::new(n),
        order: workload.arrival_order(),
        next: 0,
        progress: vec![Progress::default(); n],
        done: 0,
        now: 0.0,
        ids: Vec::new(),
        sampled: Vec::new(),
    };
    while sim.done < n {
        sim.add_arrived();
        if sim.sched.is_empty() {
            sim.now = workload.arrival_s[sim.order[sim.next]];
            continue;
        }
        if sim.out.steps == options.max_steps {
            return Err(SimError::StepLimit {
                steps: options.max_steps,
                done: sim.done,
                requests: n,
            });
        }
        sim.step(&options.engine);
    }
    Ok(sim.out)
}

impl Loop<'_> {
    /// Add every request that has arrived by now, in arrival order.
    fn add_arrived(&mut self) {
        let wl = self.workload;
        while self.next < self.order.len() {
            let i = self.order[self.next];
            if wl.arrival_s[i] > self.now {
                break;
            }
            let prompt = if wl.tokens.is_known(i) {
                wl.tokens.fill(i, wl.prompt_tokens[i], &mut self.ids);
                Prompt::Tokens(self.ids.clone())
            } else {
                Prompt::Length(wl.prompt_tokens[i])
            };
            // `check_fits` and the workload's own checks leave no error to meet here.
            let _ =
                self.sched
                    .add_request(i as u64, prompt, wl.output_tokens[i], wl.priority(i), 0);
            self.next += 1;
        }
    }

    /// Plan, time, report back and record one step. An empty plan (nothing fits until
    /// something arrives) moves the clock to the next arrival.
    fn step(&mut self, engine: &EngineModel) {
        let num_blocks = self.sched.config().num_blocks;
        let Ok(batch) = self.sched.schedule() else {
            return;
        };
        let step_index = batch.step_index();
        if batch.is_empty() {
            let _ = self.sched.update_step(step_index, TokenIds::None, &[]);
            if let Some(&i) = self.order.get(self.next) {
                self.now = self.now.max(self.workload.arrival_s[i]);
            }
            return;
        }
        let out = &mut self.out;
        let start = self.now;
        let mut shape = StepShape::default();
        for &id in batch.preempted() {
            out.preemptions[id as usize] += 1;
        }
        for item in batch.items() {
            let r = item.request_id as usize;
            if item.is_prefill {
                // A request's first item is its admission's, a prefill.
                if out.admitted[r].is_nan() {
                    out.admitted[r] = start;
                    out.cached_tokens[r] = item.cached_tokens as u64;
                }
                shape.add_chunk(item.start, item.tokens as u64);
                if out.preemptions[r] > 0 {
                    out.recomputed_tokens[r] += item.tokens as u64;
                }
            } else {
                shape.add_decode(item.start + 1);
            }
        }
        let prefill = batch.num_prefill_tokens() as u64;
        let decode = batch.num_decode_tokens() as u64;
        // The batch's own counts (as the pure loop reads them), not the sums of the items.
        (shape.prefill_tokens, shape.decode_tokens) = (prefill, decode);
        let duration = engine.step_time(&shape);
        self.now = start + duration;
        let used = (num_blocks - batch.num_free_blocks()) as u64;
        out.kv(used, duration, self.now);
        out.steps += 1;
        out.prefill_tokens += prefill;
        out.decode_tokens += decode;
        self.sampled.clear();
        let plan = &self.workload.tokens;
        let known = !plan.known.is_empty();
        for &id in batch.sampling_ids() {
            let r = id as usize;
            let progress = &mut self.progress[r];
            if known {
                let prompt = self.workload.prompt_tokens[r];
                self.sampled
                    .push(plan.token(r, prompt + progress.emitted, prompt));
            }
            if progress.emitted == 0 {
                out.first_token[r] = self.now;
            } else {
                let gap = self.now - progress.last;
                out.gap_run(gap);
                if gap > progress.max_gap {
                    progress.max_gap = gap;
                }
            }
            progress.last = self.now;
            progress.emitted += 1;
        }
        let ids = if known {
            TokenIds::Aligned(&self.sampled)
        } else {
            TokenIds::None
        };
        if let Ok(finished) = self.sched.update_step(step_index, ids, &[]) {
            for &id in finished {
                self.out.finish[id as usize] = self.now;
                self.out.max_gap[id as usize] = self.progress[id as usize].max_gap;
                self.done += 1;
            }
        }
    }
}
