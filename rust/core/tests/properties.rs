#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Property tests of the core alone (issue 5): random configs and operation sequences
//! (enqueues with cached tokens and priorities, steps, drains, aborts, restores through
//! `from_parts(requests())`) checked against a plain reference model and against the
//! invariants: chunks cover each prompt exactly once from its prefill start, no chunk exceeds
//! `chunk_size`, starts are contiguous, `ceil(total / chunk_size)` chunks in the original mode,
//! completion in scheduling order in the original mode, consecutive step indices, counters
//! equal to the sums over the steps, and the budget rules of issue 4. Extreme values must
//! never panic (the tests run in debug builds, so any arithmetic overflow would).
//!
//! `PROPTEST_CASES` sets the number of cases (default 256 per property).

use std::collections::BTreeMap;

use chunked_prefill::{
    prefill_start, Chunk, ChunkedPrefillConfig, ChunkedPrefillScheduler, ChunkedStep, CoreError,
    Counters, PrefillChunkState, COUNTER_MAX,
};
use proptest::prelude::*;

// --------------------------------------------------------------------------- the model

/// One enqueue of a request, as the model tracks it.
#[derive(Debug, Clone)]
struct Req {
    id: u64,
    total: usize,
    cached: usize,
    priority: i64,
    seq: u64,
    processed: usize,
    chunks: Vec<(usize, usize)>,
}

impl Req {
    fn start(&self) -> usize {
        prefill_start(self.total, self.cached)
    }

    fn complete(&self) -> bool {
        self.processed == self.total
    }

    fn state(&self) -> PrefillChunkState {
        PrefillChunkState::restored(
            self.id,
            self.total,
            self.processed,
            self.cached,
            self.priority,
        )
        .unwrap()
    }
}

/// The scheduler of issues 3 and 4, written plainly: a map, a list and a sort.
#[derive(Debug, Clone)]
struct Model {
    cfg: ChunkedPrefillConfig,
    tracked: BTreeMap<u64, Req>,
    /// Started, incomplete ids in start order.
    running: Vec<u64>,
    /// Completed `(id, seq)` in completion order, until drained.
    completed: Vec<(u64, u64)>,
    seq: u64,
    counters: Counters,
    /// Original mode: the seq of every request in the order it started / completed
    /// (aborted ones removed).
    start_order: Vec<u64>,
    completion_order: Vec<u64>,
}

impl Model {
    fn new(cfg: ChunkedPrefillConfig, counters: Counters) -> Self {
        Self {
            cfg,
            tracked: BTreeMap::new(),
            running: Vec::new(),
            completed: Vec::new(),
            seq: 0,
            counters,
            start_order: Vec::new(),
            completion_order: Vec::new(),
        }
    }

    fn waiting(&self) -> Vec<u64> {
        let mut reqs: Vec<&Req> = self
            .tracked
            .values()
            .filter(|r| !r.complete() && r.processed == r.start())
            .collect();
        reqs.sort_by_key(|r| (r.priority, r.seq));
        reqs.iter().map(|r| r.id).collect()
    }

    fn incomplete(&self) -> usize {
        self.tracked.values().filter(|r| !r.complete()).count()
    }

    fn enqueue(
        &mut self,
        id: u64,
        total: usize,
        cached: usize,
        priority: i64,
    ) -> Result<(), CoreError> {
        if total == 0 {
            return Err(CoreError::InvalidTotalTokens { value: 0 });
        }
        if cached > total {
            return Err(CoreError::CachedExceedsTotal {
                cached_tokens: cached,
                total_tokens: total,
            });
        }
        if self.tracked.contains_key(&id) {
            return Err(CoreError::DuplicateRequest { request_id: id });
        }
        let req = Req {
            id,
            total,
            cached,
            priority,
            seq: self.seq,
            processed: prefill_start(total, cached),
            chunks: Vec::new(),
        };
        self.seq += 1;
        self.tracked.insert(id, req);
        Ok(())
    }

    /// The step the scheduler must return, and the model advanced past it.
    fn step(&mut self, n: usize) -> ChunkedStep {
        let cfg = self.cfg.clone();
        let mut decode = if cfg.interleave_decode {
            n.min(cfg.max_decode_tokens)
        } else {
            0
        };
        let mut left = match cfg.token_budget {
            None => cfg.chunk_size,
            Some(budget) => {
                decode = decode.min(budget);
                budget - decode
            }
        };
        let mut order = self.running.clone();
        order.extend(self.waiting());
        let mut chunks = Vec::new();
        for id in order {
            if chunks.len() == cfg.max_prefills_per_step || left == 0 {
                break;
            }
            let req = self.tracked.get_mut(&id).unwrap();
            let start = req.processed;
            let tokens = (req.total - start).min(cfg.chunk_size).min(left);
            left -= tokens;
            req.processed += tokens;
            req.chunks.push((start, tokens));
            let is_last = req.processed == req.total;
            let seq = req.seq;
            let was_running = self.running.contains(&id);
            if !was_running {
                self.start_order.push(seq);
            }
            if is_last {
                self.running.retain(|&r| r != id);
                self.completed.push((id, seq));
                self.completion_order.push(seq);
            } else if !was_running {
                self.running.push(id);
            }
            chunks.push(Chunk {
                request_id: id,
                start,
                tokens,
                is_last,
            });
        }
        let step = ChunkedStep::from_chunks(self.counters.step_index, decode, chunks).unwrap();
        self.counters.step_index += 1;
        self.counters.chunks_scheduled += step.chunks.len() as u128;
        self.counters.tokens_prefilled += step.prefill_tokens as u128;
        step
    }

    fn drain(&mut self) -> usize {
        let mut removed = 0;
        for (id, seq) in std::mem::take(&mut self.completed) {
            if self.tracked.get(&id).is_some_and(|r| r.seq == seq) {
                self.tracked.remove(&id);
                removed += 1;
            }
        }
        removed
    }

    fn abort(&mut self, id: u64) -> Result<PrefillChunkState, CoreError> {
        let Some(req) = self.tracked.remove(&id) else {
            return Err(CoreError::UnknownRequest { request_id: id });
        };
        self.running.retain(|&r| r != id);
        self.start_order.retain(|&s| s != req.seq);
        self.completion_order.retain(|&s| s != req.seq);
        Ok(req.state())
    }

    /// The order of `requests()`: started, waiting (scheduling order), completed.
    fn requests(&self) -> Vec<PrefillChunkState> {
        let mut ids = self.running.clone();
        ids.extend(self.waiting());
        let mut out: Vec<PrefillChunkState> =
            ids.iter().map(|id| self.tracked[id].state()).collect();
        for (id, seq) in &self.completed {
            if let Some(r) = self.tracked.get(id).filter(|r| r.seq == *seq) {
                out.push(r.state());
            }
        }
        out
    }
}

// --------------------------------------------------------------------------- strategies

#[derive(Debug, Clone)]
enum Op {
    Enqueue {
        id: u64,
        total: usize,
        cached: usize,
        priority: i64,
    },
    Step(usize),
    Drain,
    Abort(u64),
    RoundTrip,
}

fn configs() -> impl Strategy<Value = ChunkedPrefillConfig> {
    let chunk = prop_oneof![4 => 1usize..48, 2 => 1usize..4, 1 => Just(usize::MAX)];
    let decode = prop_oneof![5 => 0usize..16, 1 => Just(usize::MAX - 1)];
    (chunk, decode, any::<bool>(), any::<bool>()).prop_flat_map(
        |(chunk_size, max_decode_tokens, interleave_decode, budgeted)| {
            let low = if interleave_decode {
                max_decode_tokens + 1
            } else {
                1
            };
            let budget = if budgeted {
                prop_oneof![
                    4 => (low..=low.saturating_add(80)).prop_map(Some),
                    2 => (low..=low.saturating_add(4)).prop_map(Some),
                    1 => Just(Some(usize::MAX)),
                ]
                .boxed()
            } else {
                Just(None).boxed()
            };
            let prefills = if budgeted {
                prop_oneof![5 => 1usize..6, 1 => Just(usize::MAX)].boxed()
            } else {
                Just(1usize).boxed()
            };
            (budget, prefills).prop_map(move |(token_budget, max_prefills_per_step)| {
                ChunkedPrefillConfig {
                    chunk_size,
                    max_decode_tokens,
                    interleave_decode,
                    token_budget,
                    max_prefills_per_step,
                }
            })
        },
    )
}

fn ids() -> impl Strategy<Value = u64> {
    prop_oneof![6 => 0u64..24, 1 => Just(u64::MAX), 1 => Just(0u64)]
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let enqueue = (
        ids(),
        prop_oneof![6 => 1usize..60, 1 => Just(0usize), 1 => Just(usize::MAX)],
        prop_oneof![4 => Just(0usize), 2 => 0usize..70, 1 => Just(usize::MAX)],
        prop_oneof![4 => -2i64..3, 1 => Just(i64::MIN), 1 => Just(i64::MAX)],
        any::<bool>(),
    )
        .prop_map(|(id, total, cached, priority, whole)| Op::Enqueue {
            id,
            total,
            // Sometimes exactly the whole prompt (fully cached).
            cached: if whole { total } else { cached },
            priority,
        });
    let op = prop_oneof![
        3 => enqueue,
        5 => prop_oneof![5 => 0usize..40, 1 => Just(usize::MAX)].prop_map(Op::Step),
        1 => Just(Op::Drain),
        1 => ids().prop_map(Op::Abort),
        1 => Just(Op::RoundTrip),
    ];
    prop::collection::vec(op, 0..120)
}

// --------------------------------------------------------------------------- checks

fn check_step(model_before: &Model, step: &ChunkedStep, n: usize) {
    let cfg = &model_before.cfg;
    assert_eq!(step.step_index, model_before.counters.step_index);
    let mut decode = if cfg.interleave_decode {
        n.min(cfg.max_decode_tokens)
    } else {
        0
    };
    if let Some(budget) = cfg.token_budget {
        decode = decode.min(budget);
    }
    assert_eq!(step.decode_tokens, decode);
    let sum: usize = step.chunks.iter().map(|c| c.tokens).sum();
    assert_eq!(step.prefill_tokens, sum);
    let first = step.chunks.first();
    assert_eq!(step.prefill_request_id, first.map(|c| c.request_id));
    assert_eq!(step.prefill_start, first.map_or(0, |c| c.start));
    assert_eq!(step.is_last_chunk, first.is_some_and(|c| c.is_last));
    let mut seen = Vec::new();
    for c in &step.chunks {
        assert!(!seen.contains(&c.request_id), "two chunks for one request");
        seen.push(c.request_id);
        let req = &model_before.tracked[&c.request_id];
        assert!(!req.complete());
        assert!(c.tokens >= 1 && c.tokens <= cfg.chunk_size);
        assert_eq!(c.start, req.processed, "chunks must be contiguous");
        if req.chunks.is_empty() {
            assert_eq!(c.start, req.start());
        }
        assert_eq!(c.is_last, c.start + c.tokens == req.total);
    }
    let incomplete = model_before.incomplete();
    match cfg.token_budget {
        None => {
            assert_eq!(step.chunks.len(), usize::from(incomplete > 0));
            if let Some(c) = first {
                let req = &model_before.tracked[&c.request_id];
                assert_eq!(c.tokens, (req.total - req.processed).min(cfg.chunk_size));
                // The started request if any, else the first waiting by (priority, enqueue).
                let expected = model_before
                    .running
                    .first()
                    .copied()
                    .or_else(|| model_before.waiting().first().copied());
                assert_eq!(Some(c.request_id), expected);
            }
        }
        Some(budget) => {
            let used = step.decode_tokens + step.prefill_tokens;
            assert!(used <= budget);
            assert!(step.chunks.len() <= cfg.max_prefills_per_step);
            if used < budget && step.chunks.len() < cfg.max_prefills_per_step {
                assert_eq!(step.chunks.len(), incomplete);
                for c in &step.chunks {
                    assert!(c.tokens == cfg.chunk_size || c.is_last);
                }
            }
        }
    }
}

fn check_completed(model: &Model, id: u64) {
    let req = &model.tracked[&id];
    let mut pos = req.start();
    for &(start, size) in &req.chunks {
        assert_eq!(start, pos);
        pos += size;
    }
    assert_eq!(pos, req.total, "chunks cover the prompt exactly once");
    if model.cfg.token_budget.is_none() {
        let span = req.total - req.start();
        assert_eq!(req.chunks.len(), span.div_ceil(model.cfg.chunk_size));
        if req.cached == 0 {
            assert_eq!(req.chunks.len(), req.total.div_ceil(model.cfg.chunk_size));
        }
        let n = model.completion_order.len();
        assert_eq!(model.completion_order[..], model.start_order[..n]);
    }
}

fn check_same(s: &ChunkedPrefillScheduler, model: &Model) {
    assert_eq!(s.counters(), model.counters);
    assert_eq!(s.active_count(), model.tracked.len());
    assert_eq!(s.incomplete_count(), model.incomplete());
    assert_eq!(s.is_idle(), model.incomplete() == 0);
    let requests: Vec<PrefillChunkState> = s.requests().cloned().collect();
    assert_eq!(requests, model.requests());
    for (id, req) in &model.tracked {
        assert!(s.contains(*id));
        assert_eq!(s.state(*id), Some(&req.state()));
    }
}

/// Drive a scheduler and the model with `ops`; every result must match.
fn drive(cfg: ChunkedPrefillConfig, counters: Counters, ops: &[Op]) {
    let mut s = ChunkedPrefillScheduler::from_parts(cfg.clone(), counters, Vec::new()).unwrap();
    let mut model = Model::new(cfg, counters);
    let mut tokens = counters.tokens_prefilled;
    let mut chunks = counters.chunks_scheduled;
    for op in ops {
        match *op {
            Op::Enqueue {
                id,
                total,
                cached,
                priority,
            } => {
                // With no cached tokens and priority 0, the plain `enqueue` on a copy does
                // exactly the same.
                let twin = (cached == 0 && priority == 0).then(|| s.clone());
                let expected = model.enqueue(id, total, cached, priority);
                let before: Vec<PrefillChunkState> = s.requests().cloned().collect();
                let got = s.enqueue_with(id, total, cached, priority);
                assert_eq!(got, expected);
                if got.is_err() {
                    assert_eq!(s.requests().cloned().collect::<Vec<_>>(), before);
                }
                if let Some(mut twin) = twin {
                    assert_eq!(twin.enqueue(id, total), expected);
                    assert_eq!(
                        twin.requests().collect::<Vec<_>>(),
                        s.requests().collect::<Vec<_>>()
                    );
                }
            }
            Op::Step(n) => {
                let before = model.clone();
                let step = s.next_step(n);
                check_step(&before, &step, n);
                let expected = model.step(n);
                assert_eq!(step, expected);
                tokens += step.prefill_tokens as u128;
                chunks += step.chunks.len() as u128;
                assert_eq!(s.tokens_prefilled(), tokens);
                assert_eq!(s.chunks_scheduled(), chunks);
                for c in &step.chunks {
                    if c.is_last {
                        check_completed(&model, c.request_id);
                    }
                }
            }
            Op::Drain => assert_eq!(s.drain_completed(), model.drain()),
            Op::Abort(id) => assert_eq!(s.abort(id), model.abort(id)),
            Op::RoundTrip => {
                let parts: Vec<PrefillChunkState> = s.requests().cloned().collect();
                let c = s.counters();
                let restored = ChunkedPrefillScheduler::from_parts(s.config().clone(), c, parts);
                // Counters that a run carried past COUNTER_MAX are not restorable (the
                // documented rule; see `round_trip_past_counter_max`).
                let too_large = [
                    ("step_index", c.step_index),
                    ("chunks_scheduled", c.chunks_scheduled),
                    ("tokens_prefilled", c.tokens_prefilled),
                ]
                .into_iter()
                .find(|(_, value)| *value > COUNTER_MAX);
                match too_large {
                    None => s = restored.unwrap(),
                    Some((name, value)) => assert_eq!(
                        restored.err(),
                        Some((usize::MAX, CoreError::CounterTooLarge { name, value }))
                    ),
                }
            }
        }
        check_same(&s, &model);
    }
}

fn config_error(cfg: &ChunkedPrefillConfig) -> Option<CoreError> {
    if cfg.chunk_size == 0 {
        return Some(CoreError::InvalidChunkSize { value: 0 });
    }
    if let Some(budget) = cfg.token_budget {
        if budget == 0 {
            return Some(CoreError::InvalidTokenBudget { value: 0 });
        }
        if cfg.interleave_decode && budget <= cfg.max_decode_tokens {
            return Some(CoreError::TokenBudgetTooSmall {
                token_budget: budget,
                max_decode_tokens: cfg.max_decode_tokens,
            });
        }
    }
    if cfg.max_prefills_per_step == 0 {
        return Some(CoreError::InvalidMaxPrefills { value: 0 });
    }
    if cfg.max_prefills_per_step > 1 && cfg.token_budget.is_none() {
        return Some(CoreError::PrefillsNeedBudget {
            value: cfg.max_prefills_per_step,
        });
    }
    None
}

fn edge() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(0usize),
        Just(1),
        Just(2),
        Just(usize::MAX / 2),
        Just(usize::MAX / 2 + 1),
        Just(usize::MAX - 1),
        Just(usize::MAX),
        0usize..10,
    ]
}

// --------------------------------------------------------------------------- properties

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256)
    ))]

    /// Random configs and operations: the scheduler matches the model and every invariant.
    #[test]
    fn scheduler_matches_model(cfg in configs(), ops in ops()) {
        drive(cfg, Counters::default(), &ops);
    }

    /// The same from counters restored near the top of their range (no wrap, no panic).
    #[test]
    fn scheduler_matches_model_near_counter_limits(
        cfg in configs(),
        ops in ops(),
        base in prop_oneof![
            Just(u128::from(u64::MAX) - 3),
            Just(COUNTER_MAX - 5),
            Just(COUNTER_MAX),
            Just(1u128 << 100),
        ],
    ) {
        let counters = Counters { step_index: base, chunks_scheduled: base, tokens_prefilled: base };
        drive(cfg, counters, &ops);
    }

    /// `from_parts(requests())` rebuilds a scheduler with exactly the same future.
    #[test]
    fn from_parts_round_trip_gives_identical_future(
        cfg in configs(),
        history in ops(),
        future in prop::collection::vec(prop_oneof![0usize..20, Just(usize::MAX)], 1..60),
    ) {
        let mut s = ChunkedPrefillScheduler::new(cfg.clone()).unwrap();
        for op in &history {
            match *op {
                Op::Enqueue { id, total, cached, priority } => {
                    let _ = s.enqueue_with(id, total, cached, priority);
                }
                Op::Step(n) => {
                    s.next_step(n);
                }
                Op::Drain => {
                    s.drain_completed();
                }
                Op::Abort(id) => {
                    let _ = s.abort(id);
                }
                Op::RoundTrip => {}
            }
        }
        let parts: Vec<PrefillChunkState> = s.requests().cloned().collect();
        let mut restored =
            ChunkedPrefillScheduler::from_parts(cfg, s.counters(), parts.clone()).unwrap();
        let again: Vec<PrefillChunkState> = restored.requests().cloned().collect();
        prop_assert_eq!(&again, &parts);
        for (i, n) in future.iter().enumerate() {
            prop_assert_eq!(restored.next_step(*n), s.next_step(*n));
            if i % 7 == 3 {
                prop_assert_eq!(restored.drain_completed(), s.drain_completed());
                let id = 10_000 + i as u64;
                prop_assert_eq!(restored.enqueue_with(id, 9, 2, -1), s.enqueue_with(id, 9, 2, -1));
            }
        }
        prop_assert_eq!(restored.counters(), s.counters());
        prop_assert_eq!(
            restored.requests().cloned().collect::<Vec<_>>(),
            s.requests().cloned().collect::<Vec<_>>()
        );
    }

    /// Every config is accepted or rejected by the rules of issues 3 and 4, first rule first.
    #[test]
    fn config_rules(
        chunk_size in edge(),
        max_decode_tokens in edge(),
        interleave_decode in any::<bool>(),
        token_budget in prop::option::of(edge()),
        max_prefills_per_step in edge(),
    ) {
        let cfg = ChunkedPrefillConfig {
            chunk_size,
            max_decode_tokens,
            interleave_decode,
            token_budget,
            max_prefills_per_step,
        };
        let expected = config_error(&cfg);
        prop_assert_eq!(cfg.validate().err(), expected.clone());
        prop_assert_eq!(ChunkedPrefillScheduler::new(cfg).err(), expected);
    }

    /// Extreme sizes, decode counts and ids never panic, and a rejected call changes nothing.
    #[test]
    fn extreme_values_never_panic(
        cfg in configs(),
        reqs in prop::collection::vec((any::<u64>(), edge(), edge(), any::<i64>()), 0..12),
        steps in prop::collection::vec(edge(), 0..12),
    ) {
        let mut s = ChunkedPrefillScheduler::new(cfg).unwrap();
        for (id, total, cached, priority) in reqs {
            let before: Vec<PrefillChunkState> = s.requests().cloned().collect();
            let counters = s.counters();
            if s.enqueue_with(id, total, cached, priority).is_err() {
                prop_assert_eq!(s.requests().cloned().collect::<Vec<_>>(), before);
                prop_assert_eq!(s.counters(), counters);
            }
        }
        let mut tokens = 0u128;
        for n in steps {
            let step = s.next_step(n);
            tokens += step.prefill_tokens as u128;
            prop_assert!(step.chunks.iter().all(|c| c.tokens >= 1));
            for state in s.requests() {
                prop_assert!(state.processed_tokens <= state.total_tokens);
                prop_assert!(state.processed_tokens >= state.prefill_start());
                let _ = state.progress();
                let _ = state.next_chunk_size(s.config());
            }
        }
        prop_assert_eq!(s.tokens_prefilled(), tokens);
        let parts: Vec<PrefillChunkState> = s.requests().cloned().collect();
        let restored = ChunkedPrefillScheduler::from_parts(s.config().clone(), s.counters(), parts);
        prop_assert!(restored.is_ok());
    }

    /// `PrefillChunkState` at the limits: advance clamps, restored checks its range.
    #[test]
    fn state_limits(
        total in edge(),
        cached in edge(),
        processed in edge(),
        n in edge(),
        priority in any::<i64>(),
    ) {
        match PrefillChunkState::restored(1, total, processed, cached, priority) {
            Ok(mut state) => {
                let start = prefill_start(total, cached);
                prop_assert!(total > 0 && cached <= total);
                prop_assert!(start <= processed && processed <= total);
                state.advance(n);
                prop_assert_eq!(state.processed_tokens, processed.saturating_add(n).min(total));
                prop_assert_eq!(state.is_complete, state.processed_tokens == total);
                prop_assert_eq!(state.remaining(), total - state.processed_tokens);
                let p = state.progress();
                prop_assert!((0.0..=1.0).contains(&p));
            }
            Err(CoreError::InvalidTotalTokens { value }) => prop_assert_eq!(value, total),
            Err(CoreError::CachedExceedsTotal { cached_tokens, total_tokens }) => {
                prop_assert_eq!((cached_tokens, total_tokens), (cached, total));
                prop_assert!(total > 0 && cached > total);
            }
            Err(CoreError::ProcessedOutOfRange { processed_tokens, start, total_tokens }) => {
                prop_assert_eq!(processed_tokens, processed);
                prop_assert_eq!(total_tokens, total);
                prop_assert_eq!(start, prefill_start(total, cached));
                prop_assert!(processed < start || processed > total);
            }
            Err(other) => prop_assert!(false, "unexpected error {other:?}"),
        }
    }

    /// `from_parts` rejects duplicate ids and out-of-range states, naming the first bad one.
    #[test]
    fn from_parts_rejects_bad_requests(
        good in prop::collection::vec((0u64..8, 1usize..30), 0..6),
        bad_at in 0usize..6,
        kind in 0u8..3,
    ) {
        let mut parts: Vec<PrefillChunkState> = Vec::new();
        for (id, total) in good {
            if parts.iter().all(|p| p.request_id != id) {
                parts.push(PrefillChunkState::new(id, total).unwrap());
            }
        }
        let index = bad_at.min(parts.len());
        let bad = match kind {
            0 if !parts.is_empty() => PrefillChunkState::new(parts[0].request_id, 3).unwrap(),
            1 => PrefillChunkState { processed_tokens: 8, ..PrefillChunkState::new(100, 7).unwrap() },
            _ => PrefillChunkState { total_tokens: 0, ..PrefillChunkState::new(101, 1).unwrap() },
        };
        let expected = match kind {
            0 if !parts.is_empty() => {
                CoreError::DuplicateRequest { request_id: parts[0].request_id }
            }
            1 => CoreError::ProcessedOutOfRange { processed_tokens: 8, start: 0, total_tokens: 7 },
            _ => CoreError::InvalidTotalTokens { value: 0 },
        };
        let duplicate_first = kind == 0 && index == 0 && !parts.is_empty();
        parts.insert(index, bad);
        let result = ChunkedPrefillScheduler::from_parts(
            ChunkedPrefillConfig::default(),
            Counters::default(),
            parts,
        );
        let (at, err) = result.err().unwrap();
        if duplicate_first {
            // The copy sits first, so the original (now second) is the duplicate.
            prop_assert_eq!(at, 1);
        } else {
            prop_assert_eq!(at, index);
        }
        prop_assert_eq!(err, expected);
    }
}

/// Counters above `COUNTER_MAX` are rejected by name, before any request is looked at.
#[test]
fn from_parts_rejects_counters_above_counter_max() {
    for value in [COUNTER_MAX + 1, u128::MAX] {
        for name in ["step_index", "chunks_scheduled", "tokens_prefilled"] {
            let mut counters = Counters::default();
            match name {
                "step_index" => counters.step_index = value,
                "chunks_scheduled" => counters.chunks_scheduled = value,
                _ => counters.tokens_prefilled = value,
            }
            let bad = PrefillChunkState {
                total_tokens: 0,
                ..PrefillChunkState::new(1, 1).unwrap()
            };
            let err = ChunkedPrefillScheduler::from_parts(
                ChunkedPrefillConfig::default(),
                counters,
                vec![bad],
            )
            .err()
            .unwrap();
            assert_eq!(
                err,
                (usize::MAX, CoreError::CounterTooLarge { name, value })
            );
        }
    }
}

/// From `COUNTER_MAX`, the longest run that fits in a test goes on exactly (no wrap, no
/// panic in this debug build) with the largest steps there are.
#[test]
fn counters_go_past_counter_max_exactly() {
    let counters = Counters {
        step_index: COUNTER_MAX,
        chunks_scheduled: COUNTER_MAX,
        tokens_prefilled: COUNTER_MAX,
    };
    let config = ChunkedPrefillConfig {
        chunk_size: usize::MAX,
        max_decode_tokens: 0,
        token_budget: Some(usize::MAX),
        max_prefills_per_step: usize::MAX,
        ..Default::default()
    };
    let mut s = ChunkedPrefillScheduler::from_parts(config, counters, Vec::new()).unwrap();
    for i in 0..1000u64 {
        s.enqueue(i, usize::MAX).unwrap();
        let step = s.next_step(usize::MAX);
        assert_eq!(step.step_index, COUNTER_MAX + u128::from(i));
        assert_eq!(step.prefill_tokens, usize::MAX);
    }
    assert_eq!(
        s.counters(),
        Counters {
            step_index: COUNTER_MAX + 1000,
            chunks_scheduled: COUNTER_MAX + 1000,
            tokens_prefilled: COUNTER_MAX + 1000 * u128::from(u64::MAX),
        }
    );
}

/// The documented rule: counters restore only up to `COUNTER_MAX`, so a scheduler whose run
/// carried a counter past it (possible only after restoring one near it) cannot be rebuilt
/// from its own parts; the rebuild says which counter and why instead of wrapping later.
#[test]
fn rebuild_past_counter_max_is_rejected() {
    let counters = Counters {
        step_index: COUNTER_MAX,
        ..Counters::default()
    };
    let mut s =
        ChunkedPrefillScheduler::from_parts(ChunkedPrefillConfig::default(), counters, Vec::new())
            .unwrap();
    s.next_step(0);
    let parts: Vec<PrefillChunkState> = s.requests().cloned().collect();
    let err =
        ChunkedPrefillScheduler::from_parts(s.config().clone(), s.counters(), parts).unwrap_err();
    assert_eq!(
        err,
        (
            usize::MAX,
            chunked_prefill::CoreError::CounterTooLarge {
                name: "step_index",
                value: COUNTER_MAX + 1
            }
        )
    );
}
