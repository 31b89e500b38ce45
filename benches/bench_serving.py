"""Per-step cost of the serving scheduler, Rust against the pure-Python twin in one run.

Run: ``pytest benches/bench_serving.py --benchmark-group-by=group --benchmark-columns=median``

Both cases time the CPU time of the calling thread (``time.thread_time``), not the wall
clock: on a shared machine a long round of the pure twin is descheduled for other processes
far more often than a short Rust round, so wall-clock ratios moved from run to run (11x to 19x
for a step, 14x to 70x for the admission). CPU time counts the work alone, on both backends
alike; a step takes 20 rounds.

- ``serving_step``: one ``schedule()`` + ``update()`` from Python, with 256 decoding requests
  and 1 000 waiting 2 000-token prompts that share a 1 000-token prefix, prefix caching on.
  Each round starts from a copy of the same prepared scheduler and runs ``STEPS`` steps, so
  every round measures the same steps (admissions with cache hits, chunks, prefix-cache
  registration, decodes).
- ``serving_admit``: admitting one 4 000-token prompt in one step and registering its 250
  blocks in the prefix cache (``add_request`` + ``schedule`` + ``update`` on a fresh
  scheduler). The twin hashes every block at ``update``; the Rust core compares contents and
  computes a block's hash when one is asked for (``to_state()``; 250 hashes take about 40 µs
  there).
"""

from __future__ import annotations

import copy
import time
from types import ModuleType
from typing import Any

import pytest

import chunked_prefill._core as rust_backend
import chunked_prefill.pure_serving as pure_backend

STEPS = 20
PREFIX = list(range(1000, 2000))


@pytest.fixture(params=["rust", "pure"])
def serving(request: pytest.FixtureRequest) -> ModuleType:
    """The module holding one backend's ``ServingScheduler``."""
    return {"rust": rust_backend, "pure": pure_backend}[request.param]


def _run(scheduler: Any, steps: int) -> None:
    for _ in range(steps):
        batch = scheduler.schedule()
        scheduler.update(batch, token_ids=[7] * len(batch.sampling_ids))


_PREPARED: dict[str, Any] = {}


def _prepared(serving: ModuleType) -> Any:
    """256 requests decoding and 1 000 long prompts waiting behind them."""
    key = serving.__name__
    if key not in _PREPARED:
        config = serving.ServingConfig(
            num_blocks=16384, token_budget=2048, chunk_size=512, max_running=512
        )
        scheduler = serving.ServingScheduler(config)
        # Long generations (they never finish within the rounds), short enough to fit the
        # pool: a request that could outgrow it is refused by add_request.
        for i in range(256):
            scheduler.add_request(i, [i % 7] * 32, 10_000)
        while any(scheduler.request(i).num_computed < 32 for i in range(256)):
            _run(scheduler, 1)
        for i in range(1000):
            scheduler.add_request(1000 + i, PREFIX + [i] * 1000, 64)
        _PREPARED[key] = scheduler
    return _PREPARED[key]


@pytest.mark.benchmark(group="serving_step", timer=time.thread_time)
def test_serving_step(benchmark: Any, serving: ModuleType) -> None:
    prepared = _prepared(serving)
    benchmark.pedantic(
        _run, setup=lambda: ((copy.copy(prepared), STEPS), {}), rounds=20, iterations=1
    )
    benchmark.extra_info["steps_per_round"] = STEPS


def _admit(scheduler: Any, prompt: list[int]) -> None:
    scheduler.add_request(1, prompt, 1)
    batch = scheduler.schedule()
    assert batch.num_prefill_tokens == len(prompt)
    scheduler.update(batch, token_ids=[0])


@pytest.mark.benchmark(group="serving_admit", timer=time.thread_time)
def test_serving_admit_4000(benchmark: Any, serving: ModuleType) -> None:
    prompt = list(range(4000))
    config = serving.ServingConfig(num_blocks=512, token_budget=8192, chunk_size=4096)

    def setup() -> tuple[tuple[Any, list[int]], dict[str, Any]]:
        return (serving.ServingScheduler(config), prompt), {}

    benchmark.pedantic(_admit, setup=setup, rounds=50, iterations=1)
