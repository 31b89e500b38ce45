"""Simulator throughput: simulated requests per wall-clock second, Rust backend vs pure twin.

Run: ``python -m pytest benches/bench_sim.py --benchmark-only``. Both backends of a case
share one benchmark group, so they sit side by side; ``extra_info["requests_per_s"]`` (in
``--benchmark-json`` output) is the figure to quote.
"""

from __future__ import annotations

from types import ModuleType

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from chunked_prefill.sim import SimConfig, default_workload, simulate

REQUESTS = 5000

CASES = {
    # The README's default comparison point: one-chunk rule, chunk 512.
    "chunk512": SimConfig(chunk_size=512),
    # Budgeted mode with several prefills per step.
    "budget2048x4": SimConfig(chunk_size=512, token_budget=2048, max_prefills_per_step=4),
    # Overloaded, decode cap below the running set: the round-robin path every step.
    "throttled": SimConfig(chunk_size=512, max_decode_tokens=32, max_running=256),
}


@pytest.fixture(params=["rust", "pure"])
def backend(request: pytest.FixtureRequest) -> ModuleType:
    """The scheduler backend under test (Rust skipped while it is not built)."""
    if request.param == "rust":
        rust: ModuleType = pytest.importorskip("chunked_prefill._core")
        return rust
    import chunked_prefill.pure as pure

    return pure


@pytest.mark.parametrize("case", sorted(CASES))
def test_simulated_requests_per_second(
    benchmark: BenchmarkFixture, backend: ModuleType, case: str
) -> None:
    """Simulate REQUESTS requests of the default workload (12 req/s when throttled)."""
    rate = 12.0 if case == "throttled" else 6.0
    workload = default_workload(REQUESTS, rate=rate, seed=0)
    cfg = CASES[case]
    benchmark.group = f"sim {case} {REQUESTS} requests"
    result = benchmark(simulate, workload, cfg, backend=backend)
    assert result[0].requests == REQUESTS
    if benchmark.stats is not None:  # None under --benchmark-disable
        mean = benchmark.stats.stats.mean
        benchmark.extra_info["requests_per_s"] = REQUESTS / mean
    benchmark.extra_info["steps"] = result[0].steps
