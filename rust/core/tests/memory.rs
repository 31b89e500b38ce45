//! What does not fit in memory is refused with `OutOfMemory`, never an abort: sizes from the
//! caller are allocated fallibly, and a refused call changes nothing. The sizes here pass
//! `isize::MAX` bytes, so the refusal does not depend on the machine.

#![allow(clippy::unwrap_used)]

use chunked_prefill::sim::{run, SimError, SimOptions, StepModel, TokenPlan};
use chunked_prefill::{CoreError, Prompt, ServingConfig, ServingScheduler};

mod common;
use common::{plain, ONE_SECOND};

const HUGE: usize = 1 << 62;

fn huge_config() -> ServingConfig {
    ServingConfig {
        block_size: 1,
        token_budget: HUGE,
        chunk_size: HUGE,
        ..ServingConfig::new(HUGE)
    }
}

#[test]
fn a_step_too_big_for_memory_is_refused_and_changes_nothing() {
    let mut sched = ServingScheduler::new(huge_config()).unwrap();
    sched
        .add_request(7, Prompt::Tokens(vec![1, 2, 3]), 5, 0, 0)
        .unwrap();
    let step = sched.schedule().unwrap().step_index();
    sched
        .update_step(step, chunked_prefill::TokenIds::None, &[])
        .unwrap();
    sched
        .add_request(1, Prompt::Length(1 << 61), 1, 0, 0)
        .unwrap();
    let before = (sched.request(7).unwrap(), sched.request(1).unwrap());
    let counts = (
        sched.step_index(),
        sched.num_free_blocks(),
        sched.num_waiting(),
    );
    let err = sched.schedule().unwrap_err();
    assert_eq!(
        err,
        CoreError::OutOfMemory {
            what: format!(
                "schedule(): a step of up to {} KV blocks",
                (1_usize << 61) + 1
            ),
        }
    );
    assert_eq!(
        (sched.request(7).unwrap(), sched.request(1).unwrap()),
        before
    );
    let after = (
        sched.step_index(),
        sched.num_free_blocks(),
        sched.num_waiting(),
    );
    assert_eq!(after, counts);
    // Without the huge request the same step is planned as before.
    sched.abort(1).unwrap();
    let batch = sched.schedule().unwrap();
    assert_eq!(batch.step_index(), 1);
    assert_eq!(batch.request_ids().collect::<Vec<_>>(), [7]);
}

#[test]
fn a_simulated_prompt_too_big_for_memory_is_refused() {
    let mut workload = plain(&[0.0], &[1 << 62], &[1]);
    workload.tokens = TokenPlan {
        known: vec![true],
        ..TokenPlan::default()
    };
    let options = SimOptions {
        config: ServingConfig {
            chunk_size: 512,
            token_budget: 512,
            ..huge_config()
        },
        engine: StepModel::Linear(ONE_SECOND),
        max_steps: 10,
    };
    let err = run(&workload, &options).unwrap_err();
    assert_eq!(
        err,
        SimError::OutOfMemory {
            what: format!("request 0's prompt of {} token ids", 1_u64 << 62),
        }
    );
    assert_eq!(
        err.to_string(),
        format!(
            "request 0's prompt of {} token ids does not fit in memory",
            1_u64 << 62
        )
    );
}

#[test]
fn a_simulated_step_too_big_for_memory_is_refused() {
    let workload = plain(&[0.0], &[1 << 61], &[1]);
    let options = SimOptions {
        config: huge_config(),
        engine: StepModel::Linear(ONE_SECOND),
        max_steps: 10,
    };
    let err = run(&workload, &options).unwrap_err();
    let what = format!("schedule(): a step of up to {} KV blocks", 1_usize << 61);
    assert_eq!(err, SimError::OutOfMemory { what });
}
