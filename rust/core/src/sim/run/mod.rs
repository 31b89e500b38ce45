//! [`run`] and [`run_fleet`]: the event loop over one or more replicas behind a router.
//!
//! One global clock. The next event is the earliest of the next arrival and the end of each
//! replica's step in flight. At an event time `t`, in this order: the steps ending at `t`
//! complete, in replica order (their tokens are sampled, `update` reports them); the
//! requests arrived by `t` are routed, in arrival order, each added to its replica's
//! scheduler at once; then every replica without a step in flight and with requests plans
//! one (`schedule`) in replica order, lasting the engine model's step time from `t`. A
//! replica whose plan is empty (nothing fits) waits for the next event. With one replica
//! this is the single-engine loop: a step starts when the previous one ends or, when idle,
//! when a request arrives.
//!
//! A long run can be stopped from outside ([`run_fleet_until`]): every [`POLL_EVERY`]
//! events and routed requests the loop asks its caller's hook whether to stop (the Python
//! binding runs the interpreter's signal handlers there, so Ctrl-C stops a run).
//!
//! A step's own life on a replica (planned and put in flight, then completed and recorded,
//! with a batch or, when it only decodes, without) is in `steps.rs`.

mod steps;

use std::sync::Arc;

use super::error::SimError;
use super::gap_runs::GapRun;
use super::metrics::Outcome;
use super::router::{outstanding, Fleet, Router};
use super::step::StepModel;
use super::tokens::{StepGaps, Track};
use super::workload::Workload;
use crate::serving::{Prompt, SampledTokens, ServingConfig, ServingScheduler};

/// What a run needs beside the workload.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// The serving scheduler's configuration (its pool is the engine's KV cache).
    pub config: ServingConfig,
    /// The engine's step-time model.
    pub engine: StepModel,
    /// Stop with [`SimError::StepLimit`] after this many steps.
    pub max_steps: u64,
}

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

/// One replica: its scheduler, the step it has in flight, and what the router sees of it.
struct Replica {
    sched: ServingScheduler,
    flight: Option<Flight>,
    /// Outstanding tokens of the requests routed to it (see [`outstanding`]).
    load: u128,
    /// Blocks in use as of its latest step (for the fleet's KV series).
    held: u64,
    /// The prefill chunks of its step in flight: the request and its prompt tokens
    /// computed once the step ends (noted while the step is planned, so completing it
    /// needs no second pass over its items, mostly decodes).
    chunks: Vec<(usize, u64)>,
    /// Its completed steps, for its decodes' gaps.
    gaps: StepGaps,
    /// Requests a chunk left one token to compute without sampling: their next decode is
    /// recorded on its own.
    silent: Vec<usize>,
}

/// A planned step, until it ends.
#[derive(Clone, Copy)]
struct Flight {
    step_index: u128,
    end: f64,
    duration: f64,
    /// Blocks in use in it.
    used: u64,
    /// The decode tokens of a decode-only step planned without a batch.
    decodes: Option<usize>,
}

/// How many ticks (events, routed requests) pass between two calls of the stop hook of
/// [`run_fleet_until`]: a tick is at least a scheduler call (a microsecond or more), so the
/// hook runs at most every few dozen microseconds, a dynamic call too rare to measure, while
/// a hook that reads a clock can answer within milliseconds.
pub const POLL_EVERY: u32 = 64;

/// The loop's state between events.
struct Loop<'a> {
    workload: &'a Workload,
    engine: StepModel,
    max_steps: u64,
    router: Router,
    replicas: Vec<Replica>,
    out: Outcome,
    /// Arrival order (empty: the workload's) and the next request in it not yet routed.
    order: Vec<usize>,
    next: usize,
    /// Per request, in workload order.
    tracks: Vec<Track>,
    gaps: GapRun,
    /// Steps planned (the step limit counts them), blocks in use over the fleet.
    started: u64,
    fleet_used: u64,
    done: usize,
    now: f64,
    /// Scratch: a prompt's ids, the ids sampled in a step, the silent decodes of a step.
    ids: Vec<u32>,
    sampled: Vec<u32>,
    silent_now: Vec<usize>,
    /// The caller's stop hook and the ticks left before it is asked again.
    stop: &'a mut dyn FnMut() -> bool,
    countdown: u32,
}

/// Run `workload` through a [`ServingScheduler`] built from `options.config`, every request
/// stopping at its `output_tokens`: [`run_fleet`] with one replica.
///
/// # Errors
///
/// As [`run_fleet`].
pub fn run(workload: &Workload, options: &SimOptions) -> Result<Outcome, SimError> {
    run_fleet(workload, options, &Fleet::default())
}

/// Run `workload` through `fleet.replicas` identical replicas, each a [`ServingScheduler`]
/// built from `options.config` with its own engine clock, behind `fleet.router` (see the
/// module docs for the order of events).
///
/// # Errors
///
/// [`SimError::Config`] for a bad configuration or no replica, [`SimError::NeverFits`] for
/// a request the pool can never hold (both before anything runs), [`SimError::StepLimit`]
/// (steps over the whole fleet), [`SimError::Stalled`].
pub fn run_fleet(
    workload: &Workload,
    options: &SimOptions,
    fleet: &Fleet,
) -> Result<Outcome, SimError> {
    run_fleet_until(workload, options, fleet, &mut || false)
}

/// [`run_fleet`], asking `stop` every [`POLL_EVERY`] ticks (events and routed requests)
/// whether to give up: once it returns `true` the run ends with [`SimError::Interrupted`],
/// its partial outcome dropped. The hook keeps what it needs to know why (the Python
/// binding keeps the exception a signal handler raised).
///
/// # Errors
///
/// As [`run_fleet`], and [`SimError::Interrupted`].
pub fn run_fleet_until(
    workload: &Workload,
    options: &SimOptions,
    fleet: &Fleet,
    stop: &mut dyn FnMut() -> bool,
) -> Result<Outcome, SimError> {
    if fleet.replicas == 0 {
        return Err(SimError::Config(
            "replicas must be at least 1, got 0".into(),
        ));
    }
    let sched = scheduler_for(workload, options)?;
    let mut sim = Loop::new(workload, options, fleet, sched, stop)?;
    sim.run()?;
    Ok(sim.finish())
}

/// The scheduler every replica starts as a copy of, once the workload is known to fit it:
/// told the tokens the decodes sample when the workload has token ids.
fn scheduler_for(workload: &Workload, options: &SimOptions) -> Result<ServingScheduler, SimError> {
    let mut sched = ServingScheduler::new(options.config.clone())
        .map_err(|e| SimError::Config(e.to_string()))?;
    check_fits(workload, &options.config)?;
    if !workload.tokens.known.is_empty() {
        // The decodes' sampled ids are the plan's: the scheduler takes them at the decode
        // group's events, and every step is lean (no decode listed, no id given per token).
        let plan = Arc::new(workload.tokens.clone());
        let runs = Arc::clone(&plan);
        let sampled = move |i: u64, at: u128| {
            let at = u64::try_from(at).unwrap_or(u64::MAX);
            plan.output_token(i as usize, at)
        };
        let run = move |i: u64, first: u128, count: u64, out: &mut Vec<u32>| {
            let first = u64::try_from(first).unwrap_or(u64::MAX);
            runs.extend_output(i as usize, first, count, out);
        };
        sched.set_sampled_tokens(Some(SampledTokens::with_runs(sampled, run)));
    }
    Ok(sched)
}

impl<'a> Loop<'a> {
    /// The loop before its first event: `fleet.replicas` copies of `sched`, the records of
    /// every request allocated (or [`SimError::OutOfMemory`]).
    fn new(
        workload: &'a Workload,
        options: &SimOptions,
        fleet: &Fleet,
        sched: ServingScheduler,
        stop: &'a mut dyn FnMut() -> bool,
    ) -> Result<Self, SimError> {
        let n = workload.len();
        let records = |_| SimError::OutOfMemory {
            what: format!("the records of {n} requests"),
        };
        let mut tracks = Vec::new();
        tracks.try_reserve_exact(n).map_err(records)?;
        tracks.resize(n, Track::default());
        let out = Outcome::try_new(n).map_err(records)?;
        let order = workload.try_arrival_order().map_err(records)?;
        let mut replicas = Vec::new();
        (replicas.try_reserve_exact(fleet.replicas)).map_err(|_| SimError::OutOfMemory {
            what: format!("{} replicas", fleet.replicas),
        })?;
        replicas.extend((0..fleet.replicas).map(|_| Replica {
            sched: sched.clone(),
            flight: None,
            load: 0,
            held: 0,
            chunks: Vec::new(),
            gaps: StepGaps::default(),
            silent: Vec::new(),
        }));
        Ok(Self {
            workload,
            engine: options.engine,
            max_steps: options.max_steps,
            router: fleet.router,
            replicas,
            out,
            order,
            next: 0,
            tracks,
            gaps: GapRun::default(),
            started: 0,
            fleet_used: 0,
            done: 0,
            now: 0.0,
            ids: Vec::new(),
            sampled: Vec::new(),
            silent_now: Vec::new(),
            stop,
            countdown: POLL_EVERY,
        })
    }

    /// Event after event until every request is done: the steps ending now complete, the
    /// requests arrived by now are routed, then each idle replica with requests starts a step.
    #[inline(always)] // called once: the loop stays one function, its callees inlined as before
    fn run(&mut self) -> Result<(), SimError> {
        let n = self.workload.len();
        while self.done < n {
            self.tick()?;
            let Some(t) = self.next_event() else {
                return Err(SimError::Stalled {
                    done: self.done,
                    requests: n,
                });
            };
            self.now = self.now.max(t);
            for r in 0..self.replicas.len() {
                if self.replicas[r].flight.is_some_and(|f| f.end <= self.now) {
                    self.complete(r);
                }
            }
            self.route_arrived()?;
            for r in 0..self.replicas.len() {
                let replica = &self.replicas[r];
                if replica.flight.is_none() && !replica.sched.is_empty() {
                    self.start(r)?;
                }
            }
        }
        Ok(())
    }

    /// The outcome, its gaps in order.
    fn finish(self) -> Outcome {
        // The records are dropped first: putting the gaps in order is the run's peak.
        let Loop {
            mut out,
            gaps,
            tracks,
            replicas,
            ..
        } = self;
        drop((tracks, replicas));
        out.gaps = gaps.finish();
        out
    }
}

impl Loop<'_> {
    /// Count one tick; every [`POLL_EVERY`]th asks the stop hook.
    ///
    /// # Errors
    ///
    /// [`SimError::Interrupted`] when the hook says stop.
    fn tick(&mut self) -> Result<(), SimError> {
        self.countdown -= 1;
        if self.countdown > 0 {
            return Ok(());
        }
        self.countdown = POLL_EVERY;
        if (self.stop)() {
            return Err(SimError::Interrupted {
                done: self.done,
                requests: self.workload.len(),
            });
        }
        Ok(())
    }

    /// The next request to arrive, if any.
    fn next_arrival(&self) -> Option<usize> {
        if self.order.is_empty() {
            (self.next < self.workload.len()).then_some(self.next)
        } else {
            self.order.get(self.next).copied()
        }
    }

    /// The earliest of the next arrival and the end of each step in flight.
    fn next_event(&self) -> Option<f64> {
        let mut next = self.next_arrival().map(|i| self.workload.arrival_s[i]);
        for flight in self.replicas.iter().filter_map(|r| r.flight) {
            // The first of equal times stays, as `min_by` keeps it.
            if next.is_none_or(|t| flight.end.total_cmp(&t).is_lt()) {
                next = Some(flight.end);
            }
        }
        next
    }

    /// Route every request that has arrived by now, in arrival order.
    fn route_arrived(&mut self) -> Result<(), SimError> {
        while let Some(i) = self.next_arrival() {
            if self.workload.arrival_s[i] > self.now {
                break;
            }
            // A burst (every request at t = 0) routes millions of requests in one event.
            self.tick()?;
            self.route(i)?;
            self.next += 1;
        }
        Ok(())
    }

    /// Pick request `i`'s replica and add it to that replica's scheduler.
    ///
    /// # Errors
    ///
    /// [`SimError::OutOfMemory`] when its prompt's token ids do not fit in memory.
    fn route(&mut self, i: usize) -> Result<(), SimError> {
        let wl = self.workload;
        let (prompt, output) = (wl.prompt_tokens[i], wl.output_tokens[i]);
        let known = wl.tokens.is_known(i);
        if known {
            (wl.tokens.try_fill(i, prompt, &mut self.ids)).map_err(|_| SimError::OutOfMemory {
                what: format!("request {i}'s prompt of {prompt} token ids"),
            })?;
        }
        let r = if self.replicas.len() == 1 {
            0 // the single-engine loop: no routing work
        } else {
            let loads: Vec<u128> = self.replicas.iter().map(|r| r.load).collect();
            let (replicas, ids) = (&self.replicas, &self.ids);
            let mut cached = |r: usize| replicas[r].sched.cached_prefix_tokens(ids, 0);
            let cached: Option<&mut dyn FnMut(usize) -> u128> = known.then_some(&mut cached);
            self.router.pick(self.next as u64, &loads, cached)
        };
        let request = if known {
            // The scheduler keeps the vector: the next known prompt fills a new one.
            Prompt::Tokens(std::mem::take(&mut self.ids))
        } else {
            Prompt::Length(prompt)
        };
        let replica = &mut self.replicas[r];
        replica.load += outstanding(prompt, output, 0, 0);
        if r > 0 {
            self.out.replica[i] = r as u64; // zeros are left unwritten (see `Outcome::try_new`)
        }
        // `check_fits` and the workload's own checks leave no error to meet here.
        let _ = replica
            .sched
            .add_request(i as u64, request, output, wl.priority(i), 0);
        Ok(())
    }
}
