//! The original module's 14 unit tests, ported with their names and assertions.
//!
//! Changes: fallible calls gain `.unwrap()`, `progress()` is `f64` and the step counter
//! `u128` (so the literal types follow), and struct literals gain `..Default::default()`.

#![allow(clippy::unwrap_used)]

use chunked_prefill::{ChunkedPrefillConfig, ChunkedPrefillScheduler, PrefillChunkState};

fn default_config() -> ChunkedPrefillConfig {
    ChunkedPrefillConfig::default()
}
// ------------------------------------------------------------------
// PrefillChunkState tests
// ------------------------------------------------------------------
/// A 100-token request with chunk_size=512 should complete in exactly one
/// step.
#[test]
fn test_single_short_request_one_chunk() {
    let config = default_config(); // chunk_size = 512
    let mut scheduler = ChunkedPrefillScheduler::new(config).unwrap();
    scheduler.enqueue(1, 100).unwrap();
    let step = scheduler.next_step(0);
    assert_eq!(step.prefill_request_id, Some(1));
    assert_eq!(step.prefill_tokens, 100);
    assert_eq!(step.step_index, 0);
    // After one step the request is complete.
    assert!(scheduler.is_idle());
    assert_eq!(scheduler.tokens_prefilled(), 100);
    assert_eq!(scheduler.chunks_scheduled(), 1);
}
/// A 1500-token request with chunk_size=512 must require exactly 3 steps:
/// 512 + 512 + 476 = 1500.
#[test]
fn test_long_request_multiple_chunks() {
    let config = default_config(); // chunk_size = 512
    let mut scheduler = ChunkedPrefillScheduler::new(config).unwrap();
    scheduler.enqueue(7, 1500).unwrap();
    let s0 = scheduler.next_step(0);
    assert_eq!(s0.prefill_tokens, 512);
    assert!(!scheduler.is_idle());
    let s1 = scheduler.next_step(0);
    assert_eq!(s1.prefill_tokens, 512);
    assert!(!scheduler.is_idle());
    let s2 = scheduler.next_step(0);
    assert_eq!(s2.prefill_tokens, 476); // 1500 - 512 - 512
    assert!(scheduler.is_idle());
    assert_eq!(scheduler.tokens_prefilled(), 1500);
    assert_eq!(scheduler.chunks_scheduled(), 3);
}
/// After advancing 256 of 1024 tokens, progress() should be exactly 0.25.
#[test]
fn test_progress_fraction() {
    let mut state = PrefillChunkState::new(99, 1024).unwrap();
    state.advance(256);
    let got = state.progress();
    assert!((got - 0.25_f64).abs() < 1e-6, "expected 0.25, got {got}");
}
/// remaining() must equal total_tokens - processed_tokens after advancing.
#[test]
fn test_remaining_tokens() {
    let mut state = PrefillChunkState::new(3, 800).unwrap();
    state.advance(300);
    assert_eq!(state.remaining(), 500);
    state.advance(500);
    assert_eq!(state.remaining(), 0);
    assert!(state.is_complete);
}
/// When only a partial chunk remains, next_chunk_size must return the
/// smaller remainder rather than the full chunk_size.
#[test]
fn test_next_chunk_size_last_chunk() {
    let config = ChunkedPrefillConfig {
        chunk_size: 512,
        ..Default::default()
    };
    let mut state = PrefillChunkState::new(5, 700).unwrap();
    state.advance(512); // first chunk consumed
    let next = state.next_chunk_size(&config);
    assert_eq!(next, 188); // 700 - 512 = 188 < 512
}
// ------------------------------------------------------------------
// Decode interleave tests
// ------------------------------------------------------------------
/// With interleave_decode=true, decode_tokens should be
/// min(max_decode_tokens, active_decode_count).
#[test]
fn test_interleave_decode_tokens() {
    let config = ChunkedPrefillConfig {
        chunk_size: 512,
        max_decode_tokens: 128,
        interleave_decode: true,
        ..Default::default()
    };
    let mut scheduler = ChunkedPrefillScheduler::new(config).unwrap();
    scheduler.enqueue(10, 1000).unwrap();
    let step = scheduler.next_step(5); // 5 active decode requests
    assert_eq!(step.decode_tokens, 5); // min(128, 5)
    let step2 = scheduler.next_step(200); // more than max_decode_tokens
    assert_eq!(step2.decode_tokens, 128); // clamped to max
}
/// With interleave_decode=false, decode_tokens must always be 0.
#[test]
fn test_no_decode_when_disabled() {
    let config = ChunkedPrefillConfig {
        chunk_size: 512,
        max_decode_tokens: 128,
        interleave_decode: false,
        ..Default::default()
    };
    let mut scheduler = ChunkedPrefillScheduler::new(config).unwrap();
    scheduler.enqueue(20, 600).unwrap();
    for _ in 0..2 {
        let step = scheduler.next_step(99);
        assert_eq!(step.decode_tokens, 0, "decode must be 0 when disabled");
    }
}
// ------------------------------------------------------------------
// Lifecycle / bookkeeping tests
// ------------------------------------------------------------------
/// After a request is fully prefilled, drain_completed() should remove it
/// and return 1.
#[test]
fn test_drain_completed_removes_done_requests() {
    let config = default_config();
    let mut scheduler = ChunkedPrefillScheduler::new(config).unwrap();
    scheduler.enqueue(42, 100).unwrap(); // completes in one step (< 512)
    scheduler.next_step(0); // completes the request
    assert!(scheduler.is_idle());
    let removed = scheduler.drain_completed();
    assert_eq!(removed, 1);
    assert_eq!(scheduler.active_count(), 0);
}
/// active_count() must reflect the number of tracked requests (including
/// completed ones not yet drained).
#[test]
fn test_active_count() {
    let config = default_config();
    let mut scheduler = ChunkedPrefillScheduler::new(config).unwrap();
    assert_eq!(scheduler.active_count(), 0);
    scheduler.enqueue(1, 50).unwrap();
    scheduler.enqueue(2, 50).unwrap();
    assert_eq!(scheduler.active_count(), 2);
    // Complete both requests.
    scheduler.next_step(0); // req 1 done
    scheduler.next_step(0); // req 2 done
                            // Still 2 until explicitly drained.
    assert_eq!(scheduler.active_count(), 2);
    scheduler.drain_completed();
    assert_eq!(scheduler.active_count(), 0);
}
/// is_idle() must return true once all requests have been drained.
#[test]
fn test_idle_after_all_complete() {
    let config = default_config();
    let mut scheduler = ChunkedPrefillScheduler::new(config).unwrap();
    scheduler.enqueue(55, 256).unwrap();
    assert!(!scheduler.is_idle());
    scheduler.next_step(0); // chunk_size=512 > 256, so completes in one step
    assert!(scheduler.is_idle());
    scheduler.drain_completed();
    // Empty scheduler is also idle.
    assert!(scheduler.is_idle());
}
/// step_index must increment by 1 for every call to next_step.
#[test]
fn test_step_index_increments() {
    let config = default_config();
    let mut scheduler = ChunkedPrefillScheduler::new(config).unwrap();
    scheduler.enqueue(100, 2000).unwrap();
    for expected_idx in 0..5_u128 {
        let step = scheduler.next_step(0);
        assert_eq!(
            step.step_index, expected_idx,
            "step_index should be {expected_idx}"
        );
    }
}
/// tokens_prefilled() must equal the sum of all chunk sizes emitted.
#[test]
fn test_cumulative_tokens_prefilled() {
    let config = ChunkedPrefillConfig {
        chunk_size: 200,
        ..Default::default()
    };
    let mut scheduler = ChunkedPrefillScheduler::new(config).unwrap();
    // Request A: 400 tokens → 2 chunks of 200 each.
    scheduler.enqueue(1, 400).unwrap();
    // Request B: 300 tokens → 2 chunks of 200+100.
    scheduler.enqueue(2, 300).unwrap();
    // Drive all chunks to completion.
    while !scheduler.is_idle() {
        scheduler.next_step(0);
    }
    assert_eq!(scheduler.tokens_prefilled(), 700); // 400 + 300
    assert_eq!(scheduler.chunks_scheduled(), 4); // 2 + 2
}
// ------------------------------------------------------------------
// Extra edge-case tests
// ------------------------------------------------------------------
/// advance() must clamp and not overflow even if n >> total_tokens.
#[test]
fn test_advance_clamps_to_total() {
    let mut state = PrefillChunkState::new(9, 100).unwrap();
    state.advance(999); // deliberately overshooting
    assert_eq!(state.processed_tokens, 100);
    assert!(state.is_complete);
    assert_eq!(state.remaining(), 0);
}
/// A pure decode step (no enqueued prefill) must have zero prefill fields.
#[test]
fn test_pure_decode_step_when_no_prefill() {
    let config = default_config();
    let mut scheduler = ChunkedPrefillScheduler::new(config).unwrap();
    let step = scheduler.next_step(10);
    assert_eq!(step.prefill_request_id, None);
    assert_eq!(step.prefill_tokens, 0);
    assert_eq!(step.decode_tokens, 10);
}
