//! Fleets: replicas behind a router, on hand-computable workloads (as `tests/test_sim_fleet.py`).

#![allow(clippy::unwrap_used, clippy::float_cmp)]

use chunked_prefill::sim::{
    outstanding, run, run_fleet, Fleet, Outcome, Router, SimError, SimOptions, StepModel,
    TokenPlan, Workload, NO_GROUP,
};
use chunked_prefill::ServingConfig;

mod common;
use common::{plain, ONE_SECOND};

/// One prefill per step, room for everything else; blocks of 4 tokens.
fn options() -> SimOptions {
    SimOptions {
        config: ServingConfig {
            block_size: 4,
            token_budget: 64,
            chunk_size: 64,
            max_prefills_per_step: 1,
            max_running: 8,
            ..ServingConfig::new(64)
        },
        engine: StepModel::Linear(ONE_SECOND),
        max_steps: 1000,
    }
}

fn fleet(workload: &Workload, replicas: usize, router: Router) -> Result<Outcome, SimError> {
    run_fleet(workload, &options(), &Fleet { replicas, router })
}

#[test]
fn routers_parse_their_names() {
    for name in Router::NAMES {
        assert_eq!(Router::parse(name).unwrap().as_str(), name);
    }
    assert_eq!(Router::parse("random"), None);
    assert_eq!(Fleet::default().replicas, 1);
    assert_eq!(outstanding(8, 10, 0, 0), 18);
    assert_eq!(outstanding(8, 10, 12, 3), 7);
}

#[test]
fn one_replica_is_run() {
    let wl = plain(&[0.0, 0.5, 0.5], &[8, 30, 5], &[3, 2, 4]);
    assert_eq!(
        fleet(&wl, 1, Router::PrefixAware).unwrap(),
        run(&wl, &options()).unwrap()
    );
}

#[test]
fn round_robin_alternates() {
    let wl = plain(&[0.0; 4], &[8; 4], &[1; 4]);
    assert_eq!(run(&wl, &options()).unwrap().finish, [1.0, 2.0, 3.0, 4.0]);
    let two = fleet(&wl, 2, Router::RoundRobin).unwrap();
    assert_eq!(two.replica, [0, 1, 0, 1]);
    assert_eq!(two.finish, [1.0, 1.0, 2.0, 2.0]);
    assert_eq!(two.steps, 4);
}

#[test]
fn least_loaded_picks_the_idle_replica() {
    let wl = plain(&[0.0, 0.0, 0.0, 2.5], &[8; 4], &[10, 1, 1, 1]);
    let least = fleet(&wl, 2, Router::LeastLoaded).unwrap();
    assert_eq!(least.replica, [0, 1, 1, 1]);
    assert_eq!(least.finish, [10.0, 1.0, 2.0, 3.5]);
    assert_eq!(
        fleet(&wl, 2, Router::RoundRobin).unwrap().replica,
        [0, 1, 0, 1]
    );
}

#[test]
fn prefix_aware_follows_the_cached_system_prompt() {
    let mut wl = plain(&[0.0, 0.0, 5.0, 6.0], &[12; 4], &[20, 1, 1, 1]);
    wl.tokens = TokenPlan {
        known: vec![true, false, true, true],
        prefix_tokens: 8,
        group: vec![7, NO_GROUP, 7, 7],
        ..TokenPlan::default()
    };
    let aware = fleet(&wl, 2, Router::PrefixAware).unwrap();
    assert_eq!(aware.replica, [0, 1, 0, 0]);
    assert_eq!(aware.cached_tokens, [0, 0, 8, 8]);
    let least = fleet(&wl, 2, Router::LeastLoaded).unwrap();
    assert_eq!(least.replica, [0, 1, 1, 1]);
    assert_eq!(least.cached_tokens, [0, 0, 0, 8]);
}

#[test]
fn no_replica_is_refused() {
    let wl = plain(&[0.0], &[8], &[1]);
    let err = fleet(&wl, 0, Router::RoundRobin).unwrap_err();
    assert_eq!(err.to_string(), "replicas must be at least 1, got 0");
}

#[test]
fn the_step_limit_counts_the_fleet() {
    let wl = plain(&[0.0; 4], &[8; 4], &[1; 4]);
    let options = SimOptions {
        max_steps: 3,
        ..options()
    };
    let fleet = Fleet {
        replicas: 2,
        router: Router::RoundRobin,
    };
    let err = run_fleet(&wl, &options, &fleet).unwrap_err();
    assert_eq!(
        err.to_string(),
        "reached the limit of 3 steps with 2 of 4 requests done"
    );
}
