"""The original module's doc example and 14 unit tests, in Python, on both backends."""

from __future__ import annotations

from types import ModuleType

import pytest


def test_doc_example(backend: ModuleType) -> None:
    config = backend.Config(chunk_size=512, max_decode_tokens=128, interleave_decode=True)
    scheduler = backend.Scheduler(config)
    # Enqueue a 1024-token prompt.
    scheduler.enqueue(42, 1024)
    # First step: 512 prefill tokens + up to 128 decode tokens.
    step = scheduler.next_step(8)
    assert step.prefill_tokens == 512
    assert step.decode_tokens == 8  # min(128, 8)
    assert step.prefill_request_id == 42
    # Second step: remaining 512 tokens.
    step = scheduler.next_step(8)
    assert step.prefill_tokens == 512
    # Prefill is now complete; drain and confirm.
    assert scheduler.drain_completed() == 1
    assert scheduler.is_idle()


def test_single_short_request_one_chunk(backend: ModuleType) -> None:
    scheduler = backend.Scheduler(backend.Config())  # chunk_size = 512
    scheduler.enqueue(1, 100)
    step = scheduler.next_step(0)
    assert step.prefill_request_id == 1
    assert step.prefill_tokens == 100
    assert step.step_index == 0
    # After one step the request is complete.
    assert scheduler.is_idle()
    assert scheduler.tokens_prefilled() == 100
    assert scheduler.chunks_scheduled() == 1


def test_long_request_multiple_chunks(backend: ModuleType) -> None:
    scheduler = backend.Scheduler(backend.Config())
    scheduler.enqueue(7, 1500)
    s0 = scheduler.next_step(0)
    assert s0.prefill_tokens == 512
    assert not scheduler.is_idle()
    s1 = scheduler.next_step(0)
    assert s1.prefill_tokens == 512
    assert not scheduler.is_idle()
    s2 = scheduler.next_step(0)
    assert s2.prefill_tokens == 476  # 1500 - 512 - 512
    assert scheduler.is_idle()
    assert scheduler.tokens_prefilled() == 1500
    assert scheduler.chunks_scheduled() == 3


def test_progress_fraction(backend: ModuleType) -> None:
    state = backend.PrefillChunkState(99, 1024)
    state.advance(256)
    got = state.progress()
    assert abs(got - 0.25) < 1e-6, f"expected 0.25, got {got}"


def test_remaining_tokens(backend: ModuleType) -> None:
    state = backend.PrefillChunkState(3, 800)
    state.advance(300)
    assert state.remaining() == 500
    state.advance(500)
    assert state.remaining() == 0
    assert state.is_complete


def test_next_chunk_size_last_chunk(backend: ModuleType) -> None:
    config = backend.Config(chunk_size=512)
    state = backend.PrefillChunkState(5, 700)
    state.advance(512)  # first chunk consumed
    assert state.next_chunk_size(config) == 188  # 700 - 512 = 188 < 512


def test_interleave_decode_tokens(backend: ModuleType) -> None:
    config = backend.Config(chunk_size=512, max_decode_tokens=128, interleave_decode=True)
    scheduler = backend.Scheduler(config)
    scheduler.enqueue(10, 1000)
    step = scheduler.next_step(5)  # 5 active decode requests
    assert step.decode_tokens == 5  # min(128, 5)
    step2 = scheduler.next_step(200)  # more than max_decode_tokens
    assert step2.decode_tokens == 128  # clamped to max


def test_no_decode_when_disabled(backend: ModuleType) -> None:
    config = backend.Config(chunk_size=512, max_decode_tokens=128, interleave_decode=False)
    scheduler = backend.Scheduler(config)
    scheduler.enqueue(20, 600)
    for _ in range(2):
        step = scheduler.next_step(99)
        assert step.decode_tokens == 0, "decode must be 0 when disabled"


def test_drain_completed_removes_done_requests(backend: ModuleType) -> None:
    scheduler = backend.Scheduler(backend.Config())
    scheduler.enqueue(42, 100)  # completes in one step (< 512)
    scheduler.next_step(0)  # completes the request
    assert scheduler.is_idle()
    removed = scheduler.drain_completed()
    assert removed == 1
    assert scheduler.active_count() == 0


def test_active_count(backend: ModuleType) -> None:
    scheduler = backend.Scheduler(backend.Config())
    assert scheduler.active_count() == 0
    scheduler.enqueue(1, 50)
    scheduler.enqueue(2, 50)
    assert scheduler.active_count() == 2
    # Complete both requests.
    scheduler.next_step(0)  # req 1 done
    scheduler.next_step(0)  # req 2 done
    # Still 2 until explicitly drained.
    assert scheduler.active_count() == 2
    scheduler.drain_completed()
    assert scheduler.active_count() == 0


def test_idle_after_all_complete(backend: ModuleType) -> None:
    scheduler = backend.Scheduler(backend.Config())
    scheduler.enqueue(55, 256)
    assert not scheduler.is_idle()
    scheduler.next_step(0)  # chunk_size=512 > 256, so completes in one step
    assert scheduler.is_idle()
    scheduler.drain_completed()
    # Empty scheduler is also idle.
    assert scheduler.is_idle()


def test_step_index_increments(backend: ModuleType) -> None:
    scheduler = backend.Scheduler(backend.Config())
    scheduler.enqueue(100, 2000)
    for expected_idx in range(5):
        step = scheduler.next_step(0)
        assert step.step_index == expected_idx, f"step_index should be {expected_idx}"


def test_cumulative_tokens_prefilled(backend: ModuleType) -> None:
    scheduler = backend.Scheduler(backend.Config(chunk_size=200))
    # Request A: 400 tokens -> 2 chunks of 200 each.
    scheduler.enqueue(1, 400)
    # Request B: 300 tokens -> 2 chunks of 200+100.
    scheduler.enqueue(2, 300)
    # Drive all chunks to completion.
    while not scheduler.is_idle():
        scheduler.next_step(0)
    assert scheduler.tokens_prefilled() == 700  # 400 + 300
    assert scheduler.chunks_scheduled() == 4  # 2 + 2


def test_advance_clamps_to_total(backend: ModuleType) -> None:
    state = backend.PrefillChunkState(9, 100)
    state.advance(999)  # deliberately overshooting
    assert state.processed_tokens == 100
    assert state.is_complete
    assert state.remaining() == 0


def test_pure_decode_step_when_no_prefill(backend: ModuleType) -> None:
    scheduler = backend.Scheduler(backend.Config())
    step = scheduler.next_step(10)
    assert step.prefill_request_id is None
    assert step.prefill_tokens == 0
    assert step.decode_tokens == 10


@pytest.mark.parametrize(
    ("lengths", "chunk_size", "expected"),
    [
        # (request, start, tokens, last) per step, FIFO, one chunk per step.
        ([1500], 512, [(0, 0, 512, False), (0, 512, 512, False), (0, 1024, 476, True)]),
        ([300, 200], 256, [(0, 0, 256, False), (0, 256, 44, True), (1, 0, 200, True)]),
    ],
)
def test_prefill_start_and_last_chunk(
    backend: ModuleType,
    lengths: list[int],
    chunk_size: int,
    expected: list[tuple[int, int, int, bool]],
) -> None:
    scheduler = backend.Scheduler(backend.Config(chunk_size=chunk_size))
    for rid, total in enumerate(lengths):
        scheduler.enqueue(rid, total)
    got = []
    for _ in expected:
        step = scheduler.next_step(0)
        got.append(
            (step.prefill_request_id, step.prefill_start, step.prefill_tokens, step.is_last_chunk)
        )
    assert got == expected
    idle = scheduler.next_step(3)
    assert (idle.prefill_request_id, idle.prefill_start, idle.is_last_chunk) == (None, 0, False)
    assert idle.chunks == ()
