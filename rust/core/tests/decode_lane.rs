#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The decode lane (issue 25) lists the decode group's members in a host's batch without
//! reading their requests; it is kept across full steps, dropped at a lean one and rebuilt
//! at the next full one. A scheduler whose steps are a random mix of lean and full ones,
//! with requests aborted and preempted in between, lists in each full batch exactly the
//! items of a scheduler run with full steps only (its decodes' ids, starts and new
//! blocks, in rank order), ends every step in its state, and keeps every invariant (among
//! them: the lane's live members are the group's, in rank order, at their positions).
//!
//! `PROPTEST_CASES` sets the number of cases (default 256).

use chunked_prefill::{
    BatchItem, Prompt, SampledTokens, ServingConfig, ServingScheduler, TokenIds,
};
use proptest::prelude::*;

/// The token request `id` samples at `position`.
fn token(id: u64, position: u128) -> u32 {
    ((id % 5) as u128 + position % 7) as u32
}

fn run(id: u64, first: u128, count: u64, out: &mut Vec<Option<u32>>) {
    out.extend((0..count).map(|k| Some(token(id, first + u128::from(k)))));
}

/// What a step does besides scheduling.
#[derive(Debug, Clone, Copy)]
enum Step {
    Full,
    Lean,
    /// A full step after aborting request `id` (if it is still tracked).
    AbortThenFull(u64),
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        4 => Just(Step::Full),
        3 => Just(Step::Lean),
        1 => (0..10_u64).prop_map(Step::AbortThenFull),
    ];
    prop::collection::vec(step, 1..120)
}

/// One step of `s`; returns the batch's items when it is full, and the ids that finished.
fn step(s: &mut ServingScheduler, lean: bool) -> (Option<Vec<BatchItem>>, Vec<u64>) {
    let batch = if lean {
        s.schedule_lean()
    } else {
        s.schedule()
    }
    .unwrap()
    .clone();
    let items = (!lean).then(|| batch.items().to_vec());
    let ids = batch.sampling_ids();
    let tokens: Vec<u32> = (ids.iter())
        .map(|&id| token(id, s.request(id).unwrap().num_tokens))
        .collect();
    let finished = s.update(&batch, TokenIds::Aligned(&tokens), &[]).unwrap();
    (items, finished.to_vec())
}

proptest! {
    #[test]
    fn mixed_lean_and_full_steps_list_the_decodes_of_full_steps(
        num_blocks in 10usize..40,
        specs in prop::collection::vec((1u32..20, 1u64..30, 0usize..20), 1..10),
        plan in steps(),
    ) {
        let config = ServingConfig {
            block_size: 4,
            token_budget: 16,
            chunk_size: 8,
            max_running: 6,
            ..ServingConfig::new(num_blocks)
        };
        let mut full = ServingScheduler::new(config.clone()).unwrap();
        let mut mixed = ServingScheduler::new(config).unwrap();
        for s in [&mut full, &mut mixed] {
            s.set_sampled_tokens(Some(SampledTokens::with_runs(token, run)));
        }
        for (at, &what) in plan.iter().enumerate() {
            for (id, &(own, max_new, arrives)) in specs.iter().enumerate() {
                if arrives == at {
                    let id = id as u64;
                    let prompt = || Prompt::Tokens((0..own).map(|k| k % 5).collect());
                    // Refused alike when it could never fit the pool.
                    let added = full.add_request(id, prompt(), max_new, 0, 0).is_ok();
                    prop_assert_eq!(mixed.add_request(id, prompt(), max_new, 0, 0).is_ok(), added);
                }
            }
            if let Step::AbortThenFull(id) = what {
                prop_assert_eq!(full.abort(id).is_ok(), mixed.abort(id).is_ok());
            }
            let (expected, finished) = step(&mut full, false);
            let (listed, mixed_finished) = step(&mut mixed, matches!(what, Step::Lean));
            prop_assert_eq!(mixed_finished, finished, "step {}", at);
            if let Some(listed) = listed {
                prop_assert_eq!(listed, expected.unwrap(), "step {}", at);
            }
            prop_assert_eq!(mixed.to_state().unwrap(), full.to_state().unwrap(), "step {}", at);
            mixed.check_invariants().unwrap();
        }
    }
}
