//! Rebuilding a scheduler from its parts: exact continuation and the counter bound.

#![allow(clippy::unwrap_used)]

use chunked_prefill::{
    ChunkedPrefillConfig, ChunkedPrefillScheduler, CoreError, Counters, PrefillChunkState,
    COUNTER_MAX,
};

fn budgeted() -> ChunkedPrefillConfig {
    ChunkedPrefillConfig {
        chunk_size: 64,
        token_budget: Some(160),
        max_prefills_per_step: 2,
        max_decode_tokens: 16,
        ..Default::default()
    }
}

#[test]
fn restored_scheduler_continues_with_the_same_steps() {
    let mut original = ChunkedPrefillScheduler::new(budgeted()).unwrap();
    for (id, total, cached, priority) in [
        (1, 300, 0, 0),
        (2, 90, 40, -1),
        (3, 10, 10, 2),
        (4, 200, 0, 1),
    ] {
        original.enqueue_with(id, total, cached, priority).unwrap();
    }
    original.next_step(5);
    original.next_step(30);
    let requests: Vec<PrefillChunkState> = original.requests().cloned().collect();
    let mut restored =
        ChunkedPrefillScheduler::from_parts(budgeted(), original.counters(), requests).unwrap();
    for decode in [0, 7, 100, 3, 3, 3, 3] {
        assert_eq!(restored.next_step(decode), original.next_step(decode));
    }
    assert_eq!(restored.drain_completed(), original.drain_completed());
    assert_eq!(restored.counters(), original.counters());
}

#[test]
fn counters_restore_up_to_the_bound_and_stay_exact() {
    let counters = Counters {
        step_index: COUNTER_MAX - 1,
        chunks_scheduled: COUNTER_MAX - 1,
        tokens_prefilled: COUNTER_MAX - 100,
    };
    let config = ChunkedPrefillConfig::default();
    let mut s = ChunkedPrefillScheduler::from_parts(config.clone(), counters, []).unwrap();
    s.enqueue(1, 50).unwrap();
    let step = s.next_step(0);
    assert_eq!(step.step_index, COUNTER_MAX - 1);
    assert_eq!(s.counters().step_index, COUNTER_MAX);
    assert_eq!(s.tokens_prefilled(), COUNTER_MAX - 50);
    assert_eq!(s.chunks_scheduled(), COUNTER_MAX);

    let too_large = Counters {
        tokens_prefilled: COUNTER_MAX + 1,
        ..Counters::default()
    };
    let err = ChunkedPrefillScheduler::from_parts(config, too_large, []).unwrap_err();
    assert_eq!(
        err,
        (
            usize::MAX,
            CoreError::CounterTooLarge {
                name: "tokens_prefilled",
                value: COUNTER_MAX + 1
            }
        )
    );
}

#[test]
fn invalid_requests_are_rejected_with_their_index() {
    let parts = [
        PrefillChunkState::new(1, 10).unwrap(),
        PrefillChunkState::new(1, 20).unwrap(),
    ];
    let err =
        ChunkedPrefillScheduler::from_parts(budgeted(), Counters::default(), parts).unwrap_err();
    assert_eq!(err, (1, CoreError::DuplicateRequest { request_id: 1 }));
    let mut bad = PrefillChunkState::new(2, 10).unwrap();
    bad.processed_tokens = 11;
    let err =
        ChunkedPrefillScheduler::from_parts(budgeted(), Counters::default(), [bad]).unwrap_err();
    assert_eq!(
        err,
        (
            0,
            CoreError::ProcessedOutOfRange {
                processed_tokens: 11,
                start: 0,
                total_tokens: 10
            }
        )
    );
}
