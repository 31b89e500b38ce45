//! Property tests of the serving scheduler (issue 11): random configs and operation
//! sequences (adds, schedules, updates with random token ids and finished ids, aborts, also
//! while a batch is pending), checking after every operation that every block is free or
//! held, never both, with ref counts equal to its holders; tables sized as specified; steps
//! within the budget, the chunk size and the prefill cap; `num_computed` moving only forward
//! except on preemption, which frees all of a request's blocks; refused calls changing
//! nothing; exports that restore to the same scheduler; and, once arrivals stop, every request finishing within a bounded number of steps.
//!
//! `PROPTEST_CASES` sets the number of cases (default 256).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;

use chunked_prefill::{
    Batch, CoreError, Prompt, RequestState, RequestView, ServingConfig, ServingScheduler, TokenIds,
};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Add {
        id: u64,
        /// Possibly empty (refused).
        tokens: Vec<u32>,
        known: bool,
        max_new: u64,
        priority: i64,
        salt: u64,
    },
    Schedule,
    /// `tokens`: 0 none, 1 aligned, 2 by request (every other sampling id).
    Update {
        tokens: u8,
        finished: Vec<u64>,
        stale: bool,
    },
    Abort(u64),
    /// Replace the scheduler by `from_state(to_state())` (refused while a batch is pending).
    Restore,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (
            0..10_u64,
            (0..16_u32, prop::collection::vec(0..3_u32, 0..6)),
            prop::bool::weighted(0.8),
            1..10_u64,
            -2..2_i64,
            0..2_u64,
        )
            .prop_map(|(id, (shared, tail), known, max_new, priority, salt)| Op::Add {
                id,
                // A common prefix of random length, then a random tail: prefix-cache hits.
                tokens: (100..100 + shared).chain(tail).collect(),
                known,
                max_new,
                priority,
                salt
            }),
        4 => Just(Op::Schedule),
        4 => (0..3_u8, prop::collection::vec(0..10_u64, 0..3), prop::bool::weighted(0.05))
            .prop_map(|(tokens, finished, stale)| Op::Update { tokens, finished, stale }),
        1 => (0..10_u64).prop_map(Op::Abort),
        1 => Just(Op::Restore),
    ]
}

fn config() -> impl Strategy<Value = ServingConfig> {
    (
        4..24_usize,
        1..5_usize,
        2..24_usize,
        1..10_usize,
        1..4_usize,
        prop::sample::select(vec![0.0, 0.1, 0.3]),
        any::<bool>(),
    )
        .prop_flat_map(
            |(num_blocks, block_size, budget, chunk, prefills, wm, caching)| {
                (1..budget).prop_map(move |max_running| ServingConfig {
                    num_blocks,
                    block_size,
                    token_budget: budget,
                    chunk_size: chunk,
                    max_prefills_per_step: prefills,
                    max_running,
                    watermark: wm,
                    prefix_caching: caching,
                })
            },
        )
}

/// Everything observable about the tracked requests, to check that refused calls change
/// nothing.
type Snapshot = (Vec<(RequestView, Vec<usize>)>, [u128; 3], usize);

fn snapshot(s: &ServingScheduler) -> Snapshot {
    let views = (0..10)
        .filter_map(|id| s.request(id).ok())
        .map(|v| (v.clone(), s.block_table(v.request_id).unwrap().to_vec()))
        .collect();
    let counters = [s.step_index(), s.num_preemptions(), s.num_cached_tokens()];
    (views, counters, s.num_free_blocks())
}

fn check_batch(cfg: &ServingConfig, batch: &Batch) {
    let tokens = batch.num_prefill_tokens() + batch.num_decode_tokens();
    assert!(tokens <= cfg.token_budget, "{tokens} tokens in one step");
    let prefills = batch.items().iter().filter(|i| i.is_prefill).count();
    assert!(prefills <= cfg.max_prefills_per_step);
    for item in batch.items() {
        assert!(item.tokens >= 1 && item.tokens <= cfg.chunk_size.max(1));
        assert!(item.is_prefill || item.tokens == 1);
    }
}

/// Follows `num_computed` of each request between operations.
struct Watch {
    computed: HashMap<u64, (u128, u128)>,
}

impl Watch {
    fn check(&mut self, s: &ServingScheduler) {
        s.check_invariants().unwrap();
        let mut now = HashMap::new();
        for id in 0..10 {
            let Ok(view) = s.request(id) else { continue };
            if let Some(&(computed, preemptions)) = self.computed.get(&id) {
                if view.num_computed < computed {
                    assert!(view.num_preemptions > preemptions, "{id} went back");
                    assert!(view.state == RequestState::Running || view.num_computed == 0);
                }
            }
            if view.state == RequestState::Waiting {
                assert!(s.block_table(id).unwrap().is_empty());
                assert_eq!(view.num_computed, 0);
            }
            now.insert(id, (view.num_computed, view.num_preemptions));
        }
        self.computed = now;
    }
}

fn run(cfg: ServingConfig, ops: Vec<Op>) {
    let mut s = ServingScheduler::new(cfg.clone()).unwrap();
    let mut watch = Watch {
        computed: HashMap::new(),
    };
    let mut pending: Option<Batch> = None;
    for op in ops {
        let before = snapshot(&s);
        let refused = match op {
            Op::Add {
                id,
                tokens,
                known,
                max_new,
                priority,
                salt,
            } => {
                let prompt = if known {
                    Prompt::Tokens(tokens)
                } else {
                    Prompt::Length(tokens.len() as u64)
                };
                s.add_request(id, prompt, max_new, priority, salt).is_err()
            }
            Op::Schedule => match s.schedule() {
                Ok(batch) => {
                    check_batch(&cfg, batch);
                    assert!(pending.is_none());
                    pending = Some(batch.clone());
                    false
                }
                Err(err) => {
                    assert!(matches!(err, CoreError::BatchPending { .. }));
                    true
                }
            },
            Op::Update {
                tokens,
                finished,
                stale,
            } => {
                let batch = pending.clone().unwrap_or_default();
                let aligned: Vec<u32> = batch.sampling_ids().iter().map(|&i| i as u32).collect();
                let pairs: Vec<(u64, u32)> = (batch.sampling_ids().iter().step_by(2))
                    .map(|&i| (i, 7))
                    .collect();
                let ids = match tokens {
                    0 => TokenIds::None,
                    1 => TokenIds::Aligned(&aligned),
                    _ => TokenIds::ByRequest(&pairs),
                };
                let target = if stale {
                    Batch::new(batch.step_index() + 1, vec![], vec![], 0)
                } else {
                    batch.clone()
                };
                match s.update(&target, ids, &finished) {
                    Ok(done) => {
                        let done = done.to_vec();
                        pending = None;
                        for id in done {
                            assert!(!s.contains(id));
                        }
                        false
                    }
                    Err(_) => true,
                }
            }
            Op::Abort(id) => s.abort(id).is_err(),
            Op::Restore => match s.to_state() {
                Ok(state) => {
                    let restored = ServingScheduler::from_state(state.clone()).unwrap();
                    assert_eq!(restored.to_state().unwrap(), state);
                    s = restored;
                    false
                }
                Err(err) => {
                    assert!(matches!(err, CoreError::StateBatchPending { .. }));
                    true
                }
            },
        };
        if refused {
            assert_eq!(snapshot(&s), before);
        }
        watch.check(&s);
    }
    // Arrivals stop: everything finishes within a bound.
    if let Some(batch) = pending.take() {
        s.update(&batch, TokenIds::None, &[]).unwrap();
    }
    let mut steps = 0;
    while !s.is_empty() {
        let batch = s.schedule().unwrap().clone();
        check_batch(&cfg, &batch);
        s.update(&batch, TokenIds::None, &[]).unwrap();
        watch.check(&s);
        steps += 1;
        assert!(steps <= 2000, "not drained after {steps} steps");
    }
    assert_eq!(s.num_free_blocks(), cfg.num_blocks);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256)
    ))]

    #[test]
    fn random_operations_keep_every_invariant(
        cfg in config(),
        ops in prop::collection::vec(op(), 1..80),
    ) {
        run(cfg, ops);
    }
}

/// Extreme values everywhere (counts up to `usize::MAX`, prompts up to `u64::MAX` tokens,
/// ids, priorities and salts at their bounds): no operation panics (the tests run in debug
/// builds, so an arithmetic overflow would), refused calls change nothing, and the
/// invariants hold. Block sizes stay huge so that no request needs more than 2**15 blocks.
fn extreme_config() -> impl Strategy<Value = ServingConfig> {
    let count = || prop::sample::select(vec![1_usize, 2, 3, 1 << 40, usize::MAX - 1, usize::MAX]);
    (
        count(),
        prop::sample::select(vec![1_usize << 50, 1 << 62, usize::MAX]),
        count(),
        count(),
        count(),
        any::<bool>(),
        prop::sample::select(vec![0.0, 0.5, 0.999_999_999_999]),
        any::<bool>(),
    )
        .prop_filter_map(
            "budget above 1",
            |(num_blocks, block_size, budget, chunk, prefills, full, watermark, caching)| {
                (budget > 1).then(|| ServingConfig {
                    num_blocks,
                    block_size,
                    token_budget: budget,
                    chunk_size: chunk,
                    max_prefills_per_step: prefills,
                    max_running: if full { budget - 1 } else { 1 },
                    watermark,
                    prefix_caching: caching,
                })
            },
        )
}

#[derive(Debug, Clone)]
enum Extreme {
    Add(u64, u64, u64, i64, u64, bool),
    Step(bool, Vec<u64>),
    Abort(u64),
}

fn extreme_op() -> impl Strategy<Value = Extreme> {
    let id = || prop::sample::select(vec![0_u64, 1, u64::MAX]);
    let big = || prop::sample::select(vec![1_u64, 2, 1 << 40, 1 << 63, u64::MAX]);
    prop_oneof![
        (
            id(),
            big(),
            big(),
            prop::sample::select(vec![i64::MIN, 0, i64::MAX]),
            prop::sample::select(vec![0, u64::MAX]),
            any::<bool>()
        )
            .prop_map(|(a, b, c, d, e, f)| Extreme::Add(a, b, c, d, e, f)),
        (any::<bool>(), prop::collection::vec(id(), 0..3))
            .prop_map(|(tokens, finished)| Extreme::Step(tokens, finished)),
        id().prop_map(Extreme::Abort),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256)
    ))]

    #[test]
    fn extreme_values_never_panic(
        cfg in extreme_config(),
        ops in prop::collection::vec(extreme_op(), 1..24),
    ) {
        let Ok(mut s) = ServingScheduler::new(cfg) else { return Ok(()) };
        for op in ops {
            let before = (s.len(), s.num_free_blocks(), s.step_index(), s.num_waiting());
            let refused = match op {
                Extreme::Add(id, len, max_new, priority, salt, known) => {
                    // Token prompts stay small; int prompts take any length.
                    let prompt = if known {
                        Prompt::Tokens(vec![u32::MAX, 0, 7][..(len % 4) as usize].to_vec())
                    } else {
                        Prompt::Length(len)
                    };
                    s.add_request(id, prompt, max_new, priority, salt).is_err()
                }
                Extreme::Step(tokens, finished) => {
                    let batch = s.schedule().unwrap().clone();
                    let ids: Vec<u32> = vec![u32::MAX; batch.sampling_ids().len()];
                    let ids = if tokens { TokenIds::Aligned(&ids) } else { TokenIds::None };
                    if s.update(&batch, ids, &finished).is_err() {
                        s.update(&batch, TokenIds::None, &[]).unwrap();
                    }
                    false
                }
                Extreme::Abort(id) => s.abort(id).is_err(),
            };
            if refused {
                let after = (s.len(), s.num_free_blocks(), s.step_index(), s.num_waiting());
                prop_assert_eq!(after, before);
            }
            s.check_invariants().unwrap();
            let small = s.num_free_blocks() < 1 << 16
                && (0..2).chain([u64::MAX]).all(|id| {
                    s.request(id).map_or(true, |r| r.num_tokens < 1 << 16)
                });
            if let (true, Ok(state)) = (small, s.to_state()) {
                {
                    let restored = ServingScheduler::from_state(state.clone()).unwrap();
                    prop_assert_eq!(restored.to_state().unwrap(), state);
                }
            }
        }
    }
}
