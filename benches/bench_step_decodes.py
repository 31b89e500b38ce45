"""The serving step as the decodes grow (issue 25), Rust against the pure-Python twin in one run.

Run: ``pytest benches/bench_step_decodes.py --benchmark-group-by=group
--benchmark-columns=min,median,rounds``

One ``schedule()`` + ``update(batch, token_ids=[7] * len(batch.sampling_ids))`` from Python
with 256 or 1 024 running requests that only decode and 1 000 waiting 2 000-token prompts
that ``max_running`` keeps waiting: a step plans and applies every decode and looks at the
queue. Each round copies the same prepared scheduler and runs ``STEPS`` steps; CPU time of
the calling thread (``time.thread_time``), as ``benches/bench_serving.py``. The twin's
rounds at 1 024 decodes take about 2 ms a step here, so its whole run stays under 10 s.
Issue 25's goals: at 1 024 decodes 3x faster than bc907cc's core, at 256 at most 10 µs;
``scripts/compare_revision.py --step`` compares two revisions of the core on the same
steps.
"""

from __future__ import annotations

import copy
import time
from types import ModuleType
from typing import Any

import pytest

import chunked_prefill._core as rust_backend
import chunked_prefill.pure_serving as pure_backend

STEPS = 10
ROUNDS = 20
WAITING = 1000


@pytest.fixture(params=["rust", "pure"])
def serving(request: pytest.FixtureRequest) -> ModuleType:
    """The module holding one backend's ``ServingScheduler``."""
    return {"rust": rust_backend, "pure": pure_backend}[request.param]


def _run(scheduler: Any, steps: int) -> None:
    for _ in range(steps):
        batch = scheduler.schedule()
        scheduler.update(batch, token_ids=[7] * len(batch.sampling_ids))


_PREPARED: dict[tuple[str, int], Any] = {}


def _prepared(serving: ModuleType, decodes: int) -> Any:
    """``decodes`` requests decoding, ``WAITING`` 2 000-token prompts queued behind them."""
    key = (serving.__name__, decodes)
    if key not in _PREPARED:
        config = serving.ServingConfig(
            num_blocks=65536,
            token_budget=max(2048, decodes + 512),
            chunk_size=512,
            max_running=decodes,
        )
        scheduler = serving.ServingScheduler(config)
        # Generations far longer than the rounds: no request finishes while timed.
        for i in range(decodes):
            scheduler.add_request(i, [i % 7] * 32, 100_000)
        while any(scheduler.request(i).num_computed < 32 for i in range(decodes)):
            _run(scheduler, 1)
        for i in range(WAITING):
            scheduler.add_request(10_000 + i, [i] * 2000, 64)
        _PREPARED[key] = scheduler
    return _PREPARED[key]


@pytest.mark.benchmark(timer=time.thread_time)
@pytest.mark.parametrize("decodes", [256, 1024])
def test_step_decodes(benchmark: Any, serving: ModuleType, decodes: int) -> None:
    """One step at ``decodes`` running decodes and ``WAITING`` waiting prompts."""
    prepared = _prepared(serving, decodes)
    benchmark.group = f"serving step, {decodes} decodes, {WAITING} waiting"
    benchmark.pedantic(
        _run, setup=lambda: ((copy.copy(prepared), STEPS), {}), rounds=ROUNDS, iterations=1
    )
    benchmark.extra_info["steps_per_round"] = STEPS
    if benchmark.stats is not None:  # None under --benchmark-disable
        per_step = benchmark.stats.stats.median / STEPS
        benchmark.extra_info["median_us_per_step"] = per_step * 1e6
