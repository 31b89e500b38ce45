#![allow(clippy::unwrap_used, clippy::expect_used)]
//! A scheduler given its requests' sampled tokens in advance (`set_sampled_tokens`) and run
//! with lean steps ends every step in the state of one run with full steps whose `update`
//! is given the same tokens: the same plans, preemptions, block tables, generated ids and
//! prefix-cache registrations (the exports are equal), with prompts that share prefixes
//! and generated blocks that repeat each other's contents under a pool small enough to
//! preempt. The tokens are given one at a time or, as the simulator gives them, with a
//! function that appends a run at once.
//!
//! The decode lane (issue 25), which lists the decode group's members in a full batch, is
//! kept across full steps, dropped at a lean one and rebuilt at the next full one: a
//! scheduler whose steps are a random mix of lean and full ones, with requests aborted
//! and preempted in between, lists in each full batch exactly the items of a run with full
//! steps only (its decodes' ids, starts and new blocks, in rank order), ends every step in
//! its state, and keeps every invariant (among them: the lane's live members are the
//! group's, in rank order, at their positions).
//!
//! `PROPTEST_CASES` sets the number of cases (default 256).

use chunked_prefill::{
    BatchItem, Prompt, SampledTokens, ServingConfig, ServingScheduler, TokenIds,
};
use proptest::prelude::*;

/// The token request `id` samples at `position`: a small alphabet, so generated blocks of
/// different requests often hold the same ids.
fn token(id: u64, position: u128) -> u32 {
    ((id % 3) as u128 + position % 3) as u32
}

/// [`token`] at positions `first..first + count`, appended to `out`.
fn run(id: u64, first: u128, count: u64, out: &mut Vec<u32>) {
    out.extend((0..count).map(|k| token(id, first + u128::from(k))));
}

fn prompt(id: u64, shared: bool, own: u32) -> Prompt {
    let prefix = if shared { 0..6 } else { 0..0 };
    Prompt::Tokens(
        prefix
            .chain(100 * (id as u32 + 1)..100 * (id as u32 + 1) + own)
            .collect(),
    )
}

/// The ids the batch's sampling requests sample, each at its next position.
fn sampled(s: &ServingScheduler, ids: &[u64]) -> Vec<u32> {
    let at = |&id: &u64| token(id, s.request(id).unwrap().num_tokens);
    ids.iter().map(at).collect()
}

/// One step of `s`, lean or full, each sampling request given its next token; returns the
/// batch's items when it is full, and the ids that finished.
fn step(s: &mut ServingScheduler, lean: bool) -> (Option<Vec<BatchItem>>, Vec<u64>) {
    let batch = if lean {
        s.schedule_lean()
    } else {
        s.schedule()
    }
    .unwrap()
    .clone();
    let items = (!lean).then(|| batch.items().to_vec());
    let tokens = sampled(s, batch.sampling_ids());
    let finished = s.update(&batch, TokenIds::Aligned(&tokens), &[]);
    (items, finished.unwrap().to_vec())
}

/// The small scheduler both properties run: a pool of `num_blocks` 4-token blocks.
fn config(num_blocks: usize, max_running: usize) -> ServingConfig {
    ServingConfig {
        block_size: 4,
        token_budget: 16,
        chunk_size: 8,
        max_running,
        ..ServingConfig::new(num_blocks)
    }
}

/// What a step of the mixed run does besides scheduling.
#[derive(Debug, Clone, Copy)]
enum Mixed {
    Full,
    Lean,
    /// A full step after aborting request `id` (if it is still tracked).
    AbortThenFull(u64),
}

fn mixed_steps() -> impl Strategy<Value = Vec<Mixed>> {
    let step = prop_oneof![
        4 => Just(Mixed::Full),
        3 => Just(Mixed::Lean),
        1 => (0..10_u64).prop_map(Mixed::AbortThenFull),
    ];
    prop::collection::vec(step, 1..120)
}

proptest! {
    #[test]
    fn lean_steps_with_sampled_tokens_end_as_full_steps_given_them(
        num_blocks in 12usize..40,
        // Requests: (shares the prefix, own prompt length, max_new_tokens, arrives at step).
        specs in prop::collection::vec((any::<bool>(), 1u32..20, 1u64..22, 0usize..12), 1..7),
        runs in any::<bool>(),
    ) {
        let mut full = ServingScheduler::new(config(num_blocks, 4)).unwrap();
        let mut lean = ServingScheduler::new(config(num_blocks, 4)).unwrap();
        let given = if runs {
            SampledTokens::with_runs(token, run)
        } else {
            SampledTokens::new(token)
        };
        lean.set_sampled_tokens(Some(given));
        for at in 0..200 {
            for (id, &(shared, own, max_new, arrives)) in specs.iter().enumerate() {
                if arrives == at {
                    let id = id as u64;
                    full.add_request(id, prompt(id, shared, own), max_new, 0, 0).unwrap();
                    lean.add_request(id, prompt(id, shared, own), max_new, 0, 0).unwrap();
                }
            }
            let (_, finished) = step(&mut full, false);
            prop_assert_eq!(step(&mut lean, true).1, finished, "step {}", at);
            let state = full.to_state().unwrap();
            prop_assert_eq!(lean.to_state().unwrap(), state.clone(), "step {}", at);
            lean.check_invariants().unwrap();
            if at >= 12 && state.requests.is_empty() {
                break; // every request arrived and finished
            }
        }
    }

    #[test]
    fn mixed_lean_and_full_steps_list_the_decodes_of_full_steps(
        num_blocks in 10usize..40,
        // Requests: (shares the prefix, own prompt length, max_new_tokens, arrives at step).
        specs in prop::collection::vec((any::<bool>(), 1u32..20, 1u64..30, 0usize..20), 1..10),
        plan in mixed_steps(),
    ) {
        let mut full = ServingScheduler::new(config(num_blocks, 6)).unwrap();
        let mut mixed = ServingScheduler::new(config(num_blocks, 6)).unwrap();
        for s in [&mut full, &mut mixed] {
            s.set_sampled_tokens(Some(SampledTokens::with_runs(token, run)));
        }
        for (at, &what) in plan.iter().enumerate() {
            for (id, &(shared, own, max_new, arrives)) in specs.iter().enumerate() {
                if arrives == at {
                    let id = id as u64;
                    // Refused alike when it could never fit the pool.
                    let added = full.add_request(id, prompt(id, shared, own), max_new, 0, 0);
                    let again = mixed.add_request(id, prompt(id, shared, own), max_new, 0, 0);
                    prop_assert_eq!(again.is_ok(), added.is_ok());
                }
            }
            if let Mixed::AbortThenFull(id) = what {
                prop_assert_eq!(full.abort(id).is_ok(), mixed.abort(id).is_ok());
            }
            let (expected, finished) = step(&mut full, false);
            let (listed, mixed_finished) = step(&mut mixed, matches!(what, Mixed::Lean));
            prop_assert_eq!(mixed_finished, finished, "step {}", at);
            if let Some(listed) = listed {
                prop_assert_eq!(listed, expected.unwrap(), "step {}", at);
            }
            prop_assert_eq!(mixed.to_state().unwrap(), full.to_state().unwrap(), "step {}", at);
            mixed.check_invariants().unwrap();
        }
    }
}
