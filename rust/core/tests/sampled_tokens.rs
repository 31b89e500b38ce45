#![allow(clippy::unwrap_used, clippy::expect_used)]
//! A scheduler given its requests' sampled tokens in advance (`set_sampled_tokens`) and run
//! with lean steps ends every step in the state of one run with full steps whose `update`
//! is given the same tokens: the same plans, preemptions, block tables, generated ids and
//! prefix-cache registrations (the exports are equal), with prompts that share prefixes
//! and generated blocks that repeat each other's contents under a pool small enough to
//! preempt. The tokens are given one at a time or, as the simulator gives them, with a
//! function that appends a run at once.
//!
//! `PROPTEST_CASES` sets the number of cases (default 256).

use chunked_prefill::{Prompt, SampledTokens, ServingConfig, ServingScheduler, TokenIds};
use proptest::prelude::*;

/// The token request `id` samples at `position`: a small alphabet, so generated blocks of
/// different requests often hold the same ids.
fn token(id: u64, position: u128) -> u32 {
    ((id % 3) as u128 + position % 3) as u32
}

/// [`token`] at positions `first..first + count`, appended to `out`.
fn run(id: u64, first: u128, count: u64, out: &mut Vec<Option<u32>>) {
    out.extend((0..count).map(|k| Some(token(id, first + u128::from(k)))));
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

fn step(s: &mut ServingScheduler, lean: bool) -> Vec<u64> {
    let batch = if lean {
        s.schedule_lean()
    } else {
        s.schedule()
    }
    .unwrap()
    .clone();
    let tokens = sampled(s, batch.sampling_ids());
    s.update(&batch, TokenIds::Aligned(&tokens), &[])
        .unwrap()
        .to_vec()
}

proptest! {
    #[test]
    fn lean_steps_with_sampled_tokens_end_as_full_steps_given_them(
        num_blocks in 12usize..40,
        // Requests: (shares the prefix, own prompt length, max_new_tokens, arrives at step).
        specs in prop::collection::vec((any::<bool>(), 1u32..20, 1u64..22, 0usize..12), 1..7),
        runs in any::<bool>(),
    ) {
        let config = ServingConfig {
            block_size: 4,
            token_budget: 16,
            chunk_size: 8,
            max_running: 4,
            ..ServingConfig::new(num_blocks)
        };
        let mut full = ServingScheduler::new(config.clone()).unwrap();
        let mut lean = ServingScheduler::new(config).unwrap();
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
            let finished = step(&mut full, false);
            prop_assert_eq!(step(&mut lean, true), finished, "step {}", at);
            let state = full.to_state().unwrap();
            prop_assert_eq!(lean.to_state().unwrap(), state.clone(), "step {}", at);
            lean.check_invariants().unwrap();
            if at >= 12 && state.requests.is_empty() {
                break; // every request arrived and finished
            }
        }
    }
}
