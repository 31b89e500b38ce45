"""Per-call cost of the scheduler, Rust against the pure-Python twin in the same run.

Run: ``pytest benches/bench_scheduler.py --benchmark-group-by=group``
"""

from __future__ import annotations

import itertools
from types import ModuleType
from typing import Any

import pytest

HUGE = 2**60  # a prompt that never finishes, so a step's work stays the same every round


def _tracked(backend: ModuleType, depth: int, config: Any = None) -> Any:
    """A scheduler tracking ``depth`` requests: ``depth - 1`` completed but not drained
    (the original scanned past all of them every step) and one long prompt in prefill."""
    requests = [
        {
            "request_id": i,
            "total_tokens": 16,
            "processed_tokens": 16,
            "cached_tokens": 0,
            "priority": 0,
        }
        for i in range(depth - 1)
    ]
    requests.append(
        {
            "request_id": depth,
            "total_tokens": HUGE,
            "processed_tokens": 0,
            "cached_tokens": 0,
            "priority": 0,
        }
    )
    config = config or backend.Config()
    return backend.Scheduler.from_state(
        {
            "version": 1,
            "config": config.to_dict(),
            "step_index": 0,
            "chunks_scheduled": 0,
            "tokens_prefilled": 0,
            "requests": requests,
        }
    )


@pytest.mark.benchmark(group="enqueue")
def test_enqueue(benchmark: Any, backend: ModuleType) -> None:
    scheduler = backend.Scheduler()
    ids = itertools.count()
    benchmark(lambda: scheduler.enqueue(next(ids), 1000))


@pytest.mark.benchmark(group="next_step")
def test_next_step(benchmark: Any, backend: ModuleType) -> None:
    scheduler = backend.Scheduler()
    scheduler.enqueue(1, HUGE)
    benchmark(scheduler.next_step, 8)


@pytest.mark.parametrize("depth", [10, 10_000, 1_000_000])
def test_next_step_depth(benchmark: Any, backend: ModuleType, depth: int) -> None:
    benchmark.group = f"next_step, {depth} tracked"
    scheduler = _tracked(backend, depth)
    assert len(scheduler) == depth
    benchmark(scheduler.next_step, 8)
    assert len(scheduler) == depth


@pytest.mark.benchmark(group="next_step budgeted: 2048 budget, 4 prefills, 256 decodes")
def test_next_step_budgeted(benchmark: Any, backend: ModuleType) -> None:
    config = backend.Config(token_budget=2048, chunk_size=512, max_prefills_per_step=4)
    scheduler = backend.Scheduler(config)
    for i in range(1000):
        scheduler.enqueue(i, HUGE, priority=i % 4)
    step = scheduler.next_step(256)
    assert step.decode_tokens == 128
    assert len(step.chunks) == 4
    benchmark(scheduler.next_step, 256)


@pytest.mark.benchmark(group="abort + enqueue, 100000 waiting")
def test_abort_at_depth(benchmark: Any, backend: ModuleType) -> None:
    scheduler = backend.Scheduler()
    for i in range(100_000):
        scheduler.enqueue(i, 100, priority=i % 8)
    victims = itertools.cycle(range(0, 100_000, 7))

    def abort_and_requeue() -> None:
        victim = next(victims)
        state = scheduler.abort(victim)
        scheduler.enqueue(victim, 100, priority=state.priority)

    benchmark(abort_and_requeue)
    assert len(scheduler) == 100_000
