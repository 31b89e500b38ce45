"""Hand-computed step tables for each rule of the serving-grade policy, on both backends."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

ChunkRow = tuple[int, int, int, bool]


def rows(step: Any) -> tuple[int, list[ChunkRow]]:
    """A step as ``(decode_tokens, [(request, start, tokens, last), ...])``."""
    return step.decode_tokens, [(c.request_id, c.start, c.tokens, c.is_last) for c in step.chunks]


def run(
    backend: ModuleType,
    config: dict[str, Any],
    requests: list[tuple[int, int, dict[str, Any]]],
    decodes: list[int],
) -> list[tuple[int, list[ChunkRow]]]:
    s = backend.Scheduler(backend.Config(**config))
    for rid, total, extra in requests:
        s.enqueue(rid, total, **extra)
    return [rows(s.next_step(d)) for d in decodes]


def test_budget_shared_with_decodes(backend: ModuleType) -> None:
    got = run(backend, {"token_budget": 600}, [(1, 1000, {})], [100, 50, 7])
    assert got == [
        (100, [(1, 0, 500, False)]),  # 600 - 100 decodes
        (50, [(1, 500, 500, True)]),  # capped by what is left of the prompt
        (7, []),
    ]


def test_decodes_fill_all_but_one_token(backend: ModuleType) -> None:
    got = run(backend, {"token_budget": 129}, [(1, 3, {})], [500, 500, 500, 500])
    assert got == [
        (128, [(1, 0, 1, False)]),
        (128, [(1, 1, 1, False)]),
        (128, [(1, 2, 1, True)]),
        (128, []),
    ]


def test_without_interleave_the_whole_budget_is_prefill(backend: ModuleType) -> None:
    cfg = {"token_budget": 100, "interleave_decode": False, "chunk_size": 80}
    got = run(backend, cfg, [(1, 90, {}), (2, 90, {})], [9, 9])
    assert got == [(0, [(1, 0, 80, False)]), (0, [(1, 80, 10, True)])]
    cfg["max_prefills_per_step"] = 2
    got = run(backend, cfg, [(1, 90, {}), (2, 90, {})], [9, 9, 9])
    assert got == [
        (0, [(1, 0, 80, False), (2, 0, 20, False)]),
        (0, [(1, 80, 10, True), (2, 20, 70, True)]),
        (0, []),
    ]


def test_budget_split_over_several_requests(backend: ModuleType) -> None:
    cfg = {"token_budget": 1024, "chunk_size": 512, "max_prefills_per_step": 3}
    got = run(backend, cfg, [(1, 300, {}), (2, 300, {}), (3, 600, {}), (4, 5, {})], [0, 0])
    assert got == [
        (0, [(1, 0, 300, True), (2, 0, 300, True), (3, 0, 424, False)]),
        (0, [(3, 424, 176, True), (4, 0, 5, True)]),
    ]


def test_per_request_cap_and_prefill_count_cap(backend: ModuleType) -> None:
    # chunk_size caps each request; the budget is left unused because every request with
    # work got a chunk.
    cfg = {"token_budget": 2048, "chunk_size": 256, "max_prefills_per_step": 4}
    assert run(backend, cfg, [(1, 1000, {})], [0]) == [(0, [(1, 0, 256, False)])]
    # max_prefills_per_step caps the number of chunks even with budget left.
    cfg["max_prefills_per_step"] = 2
    got = run(backend, cfg, [(1, 1000, {}), (2, 1000, {}), (3, 1000, {})], [10])
    assert got == [(10, [(1, 0, 256, False), (2, 0, 256, False)])]


def test_priority_orders_requests_not_yet_started(backend: ModuleType) -> None:
    reqs = [
        (1, 10, {"priority": 5}),
        (2, 10, {"priority": -1}),
        (3, 10, {}),
        (4, 10, {"priority": -1}),
    ]
    got = run(backend, {}, reqs, [0, 0, 0, 0, 0])
    assert [r[1][0][0] if r[1] else None for r in got] == [2, 4, 3, 1, None]
    extreme = [(1, 1, {"priority": 2**63 - 1}), (2, 1, {"priority": -(2**63)}), (3, 1, {})]
    got = run(backend, {}, extreme, [0, 0, 0])
    assert [r[1][0][0] for r in got] == [2, 3, 1]


def test_started_requests_finish_first(backend: ModuleType) -> None:
    s = backend.Scheduler(backend.Config(chunk_size=100))
    s.enqueue(1, 250)
    assert rows(s.next_step(0)) == (0, [(1, 0, 100, False)])
    s.enqueue(2, 50, priority=-10)  # more urgent, but 1 has started
    assert rows(s.next_step(0)) == (0, [(1, 100, 100, False)])
    assert rows(s.next_step(0)) == (0, [(1, 200, 50, True)])
    assert rows(s.next_step(0)) == (0, [(2, 0, 50, True)])


def test_started_order_is_start_order_in_budgeted_mode(backend: ModuleType) -> None:
    cfg = backend.Config(token_budget=300, chunk_size=100, max_prefills_per_step=3)
    s = backend.Scheduler(cfg)
    s.enqueue(1, 150, priority=3)
    s.enqueue(2, 150, priority=1)
    assert rows(s.next_step(0)) == (0, [(2, 0, 100, False), (1, 0, 100, False)])
    s.enqueue(3, 400, priority=-5)
    # 2 and 1 started in that order and keep it; 3 is started after them.
    assert rows(s.next_step(0)) == (0, [(2, 100, 50, True), (1, 100, 50, True), (3, 0, 100, False)])
    s.enqueue(4, 10, priority=-9)
    assert rows(s.next_step(250)) == (
        128,
        [
            (3, 100, 100, False),
            (4, 0, 10, True),
        ],
    )
    assert rows(s.next_step(0)) == (0, [(3, 200, 100, False)])


def test_cached_prefix_partly(backend: ModuleType) -> None:
    s = backend.Scheduler(backend.Config(chunk_size=512))
    s.enqueue(1, 1000, cached_tokens=600)
    assert s.state(1).processed_tokens == 600
    assert rows(s.next_step(0)) == (0, [(1, 600, 400, True)])
    assert s.tokens_prefilled() == 400
    s.enqueue(2, 1500, cached_tokens=100)
    assert [rows(s.next_step(0)) for _ in range(3)] == [
        (0, [(2, 100, 512, False)]),
        (0, [(2, 612, 512, False)]),
        (0, [(2, 1124, 376, True)]),
    ]
    assert s.tokens_prefilled() == 400 + 1400


def test_cached_prefix_fully(backend: ModuleType) -> None:
    s = backend.Scheduler(backend.Config(token_budget=200, max_prefills_per_step=2))
    s.enqueue(1, 50, cached_tokens=50)
    s.enqueue(2, 1, cached_tokens=1)
    assert s.state(1).processed_tokens == 49
    assert s.state(1).cached_tokens == 50
    assert rows(s.next_step(0)) == (0, [(1, 49, 1, True), (2, 0, 1, True)])
    assert s.tokens_prefilled() == 2
    assert s.is_idle()


def test_abort_in_every_state(backend: ModuleType) -> None:
    s = backend.Scheduler(backend.Config(chunk_size=100))
    s.enqueue(1, 250)  # will be mid-prefill
    s.enqueue(2, 100)  # will be complete
    s.enqueue(3, 80)  # stays waiting
    s.enqueue(4, 60)
    for _ in range(3):  # 1 gets 100, 100, then 50 and completes
        s.next_step(0)
    assert s.state(1).is_complete
    assert rows(s.next_step(0)) == (0, [(2, 0, 100, True)])
    s.enqueue(5, 300)
    # Abort a waiting one.
    waiting = s.abort(3)
    assert (waiting.request_id, waiting.processed_tokens, waiting.is_complete) == (3, 0, False)
    assert rows(s.next_step(0)) == (0, [(4, 0, 60, True)])
    assert rows(s.next_step(0)) == (0, [(5, 0, 100, False)])
    # Abort mid-prefill: its next chunk is never scheduled.
    mid = s.abort(5)
    assert (mid.processed_tokens, mid.is_complete) == (100, False)
    assert rows(s.next_step(0)) == (0, [])
    assert s.is_idle()
    # Abort a completed, undrained one: drain no longer counts it.
    done = s.abort(2)
    assert done.is_complete
    assert s.drain_completed() == 2  # 1 and 4
    assert len(s) == 0
    with pytest.raises(KeyError):
        s.abort(2)
    # An aborted id can be enqueued again and is a new request.
    s.enqueue(5, 30)
    assert rows(s.next_step(0)) == (0, [(5, 0, 30, True)])
    assert s.drain_completed() == 1


def test_abort_then_reenqueue_completed_id_drains_once(backend: ModuleType) -> None:
    s = backend.Scheduler()
    s.enqueue(1, 10)
    s.next_step()
    s.abort(1)
    s.enqueue(1, 10)
    s.next_step()
    assert [r["request_id"] for r in s.to_state()["requests"]] == [1]
    assert s.drain_completed() == 1
    assert len(s) == 0


def test_abort_of_a_waiting_priority_bucket(backend: ModuleType) -> None:
    s = backend.Scheduler()
    s.enqueue(1, 10, priority=4)
    s.enqueue(2, 10, priority=2)
    s.abort(2)  # empties the priority-2 bucket
    s.enqueue(3, 10, priority=2)
    s.enqueue(4, 10, priority=2)
    assert [rows(s.next_step())[1][0][0] for _ in range(3)] == [3, 4, 1]


def test_first_chunk_fields_describe_the_first_chunk(backend: ModuleType) -> None:
    s = backend.Scheduler(
        backend.Config(token_budget=64, max_prefills_per_step=2, chunk_size=40, max_decode_tokens=8)
    )
    s.enqueue(7, 30, cached_tokens=5)
    s.enqueue(8, 100)
    step = s.next_step(3)
    assert (step.prefill_request_id, step.prefill_start, step.is_last_chunk) == (7, 5, True)
    assert step.prefill_tokens == 25 + 36 == sum(c.tokens for c in step.chunks)
