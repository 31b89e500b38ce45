//! The simulation loop (issue 12): a workload through the [`ServingScheduler`] against a
//! step-time model of the engine (linear or roofline, [`StepModel`]), with the KV-cache pool the engine's memory allows.
//!
//! Small parts with one job each: [`Workload`] (the requests as plain arrays, and the
//! token ids prefix caching sees, generated when a request arrives); [`EngineModel`] (the
//! duration of one step, the Python formula with its float operations in the same order);
//! [`Outcome`] (what the run recorded, per request and per step); [`run`] (the event
//! loop). Summaries (percentiles, SLOs) are left to the caller, which computes them from
//! the raw arrays of [`Outcome`], so that a Rust run and a pure-Python run of the same
//! loop give identical reports.
//!
//! [`ServingScheduler`]: crate::serving::ServingScheduler

mod engine;
mod error;
mod gap_runs;
mod metrics;
mod roofline;
mod router;
mod run;
mod step;
mod synthetic;
mod tokens;
mod workload;

pub use engine::{chunk_pairs, EngineModel, StepShape};
pub use error::SimError;
pub use metrics::{Outcome, KV_SERIES_CAP};
pub use roofline::{pow_int, Roofline};
pub use router::{outstanding, Fleet, Router};
pub use run::{check_fits, run, run_fleet, run_fleet_until, SimOptions, POLL_EVERY};
pub use step::StepModel;
pub use synthetic::{draw_chat, ChatDraws, ChatFigures, ChatLengths};
pub use workload::{token_id, TokenPlan, Workload, NO_GROUP};
