//! The sampled ids a host gives `update` reach each request's exported tokens, whether they
//! wait in the decode group's id log (full batches, every id given, block sizes up to 64) or
//! are stored as they come (ids by request, none, larger blocks), across aborts that free a
//! slot a later request reuses, and lean batches, whose decodes are not listed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use chunked_prefill::{Prompt, ServingConfig, ServingScheduler, TokenIds};
use proptest::prelude::*;

/// How one `update` gives the sampled ids.
#[derive(Debug, Clone, Copy)]
enum Mode {
    Aligned,
    /// A lean batch (its decodes unlisted, their ids unknown), its prefills' ids given.
    Lean,
    /// Only every other sampling request's.
    ByRequest,
    None,
}

fn mode() -> impl Strategy<Value = Mode> {
    prop_oneof![
        3 => Just(Mode::Aligned),
        1 => Just(Mode::Lean),
        1 => Just(Mode::ByRequest),
        1 => Just(Mode::None),
    ]
}

/// The id sampling request `k` of step `step` samples.
fn id_at(step: usize, k: usize) -> u32 {
    ((step * 7 + k * 3) % 50) as u32
}

/// Runs `modes.len()` steps; before the update of step `abort_at`, request 2 is aborted and
/// request 9 added (it takes the freed slot). Checks every exported request's tokens
/// against the plain record of what each update gave after every step.
fn run(block_size: usize, modes: &[Mode], abort_at: usize) {
    let mut s = ServingScheduler::new(ServingConfig {
        block_size,
        token_budget: 64,
        chunk_size: 64,
        max_running: 8,
        ..ServingConfig::new(4096)
    })
    .unwrap();
    let mut expected: BTreeMap<u64, Vec<Option<u32>>> = BTreeMap::new();
    for (id, len) in [(1u64, 5u32), (2, 3), (3, 9)] {
        let prompt: Vec<u32> = (100 * id as u32..).take(len as usize).collect();
        expected.insert(id, prompt.iter().copied().map(Some).collect());
        s.add_request(id, Prompt::Tokens(prompt), 1_000, 0, 0)
            .unwrap();
    }
    for (step, &mode) in modes.iter().enumerate() {
        let batch = match mode {
            Mode::Lean => s.schedule_lean(),
            _ => s.schedule(),
        };
        let batch = batch.unwrap().clone();
        if step == abort_at {
            s.abort(2).unwrap();
            expected.remove(&2);
            s.add_request(9, Prompt::Tokens(vec![1, 2, 3]), 1_000, 0, 0)
                .unwrap();
            expected.insert(9, vec![Some(1), Some(2), Some(3)]);
        }
        let sampling = batch.sampling_ids().to_vec();
        let ids: Vec<u32> = (0..sampling.len()).map(|k| id_at(step, k)).collect();
        let pairs: Vec<(u64, u32)> = (sampling.iter().zip(&ids))
            .step_by(2)
            .map(|(&request, &id)| (request, id))
            .collect();
        let given = match mode {
            Mode::Aligned | Mode::Lean => TokenIds::Aligned(&ids),
            Mode::ByRequest => TokenIds::ByRequest(&pairs),
            Mode::None => TokenIds::None,
        };
        let generated = |s: &ServingScheduler, id: u64| s.request(id).unwrap().num_generated;
        let before: Vec<(u64, u64)> = (expected.keys())
            .map(|&id| (id, generated(&s, id)))
            .collect();
        s.update(&batch, given, &[]).unwrap();
        // Every request that sampled a token: the id given for it, if any.
        for (id, before) in before {
            if generated(&s, id) == before {
                continue;
            }
            let k = sampling.iter().position(|&request| request == id);
            let token = k.and_then(|k| match mode {
                Mode::Aligned | Mode::Lean => Some(ids[k]),
                Mode::ByRequest => (k % 2 == 0).then_some(ids[k]),
                Mode::None => None,
            });
            expected.get_mut(&id).unwrap().push(token);
        }
        s.check_invariants().unwrap();
        let state = s.to_state().unwrap();
        let exported: BTreeMap<u64, Vec<Option<u32>>> = (state.requests.iter())
            .map(|r| (r.request_id, r.tokens.clone()))
            .collect();
        assert_eq!(
            exported, expected,
            "block size {block_size}, after step {step}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_given_id_reaches_the_exported_tokens(
        block_size in prop::sample::select(vec![1usize, 2, 3, 4, 16, 64, 65, 128]),
        modes in prop::collection::vec(mode(), 1..40),
        abort_at in 0usize..40,
    ) {
        run(block_size, &modes, abort_at);
    }
}

#[test]
fn ids_given_in_every_mode_in_turn_reach_the_exported_tokens() {
    let modes = [Mode::Aligned, Mode::Lean, Mode::ByRequest, Mode::None];
    let modes: Vec<Mode> = (0..36).map(|step| modes[(step / 2) % 4]).collect();
    for block_size in [1, 4, 16, 128] {
        run(block_size, &modes, 5);
    }
}
