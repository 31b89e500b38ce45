"""The memory-true simulator's speed: the Rust loop against the pure reference loop.

Run ``python -m pytest benches/bench_sim_serving.py --benchmark-only`` for the two loops side
by side (``extra_info["requests_per_s"]`` is the figure to quote; ``test_serving_loop_at_scale``
runs the Rust loop at issue 25's 100 000 requests and the pure one at 1 000: compare their
requests/s, not their times), or
``python benches/bench_sim_serving.py [REQUESTS]`` for one line per loop with simulated
requests per second and the ratio (the pure loop runs a tenth of the requests, at most
2 000, and its rate is scaled up). The memory of a long run is measured by
``scripts/sim_memory.py``.
"""

from __future__ import annotations

import sys
import time

import numpy  # noqa: F401  (the runs' records need it: imported here, not in a timed run)
import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from chunked_prefill.sim import ServingSimConfig, default_workload, simulate_serving

REQUESTS = 400
CONFIG = ServingSimConfig()  # chunk 512, budget 2048, 4 prefills, the A100 preset's pool


@pytest.mark.parametrize("loop", ["rust", "pure"])
def test_serving_loop_requests_per_second(benchmark: BenchmarkFixture, loop: str) -> None:
    """Simulate REQUESTS default-workload requests at 6 req/s through one loop."""
    pytest.importorskip("chunked_prefill._core")
    workload = default_workload(REQUESTS, rate=6.0, seed=0)
    benchmark.group = f"serving sim {REQUESTS} requests"
    (result,) = benchmark(simulate_serving, workload, CONFIG, backend=loop)
    assert result.requests == REQUESTS
    if benchmark.stats is not None:  # None under --benchmark-disable
        benchmark.extra_info["requests_per_s"] = REQUESTS / benchmark.stats.stats.mean
    benchmark.extra_info["steps"] = result.steps


# Issue 25's size on the Rust loop; the pure loop, about 100x slower, a hundredth of it.
AT_SCALE = {"rust": 100_000, "pure": 1_000}


@pytest.mark.parametrize("loop", ["rust", "pure"])
def test_serving_loop_at_scale(benchmark: BenchmarkFixture, loop: str) -> None:
    """The Rust loop at issue 25's 100 000 requests, the pure loop at 1 000: requests/s."""
    pytest.importorskip("chunked_prefill._core")
    requests = AT_SCALE[loop]
    workload = default_workload(requests, rate=6.0, seed=0)
    benchmark.group = "serving sim at scale (rust 100 000, pure 1 000 requests)"
    (result,) = benchmark(simulate_serving, workload, CONFIG, backend=loop)
    assert result.requests == requests
    if benchmark.stats is not None:  # None under --benchmark-disable
        benchmark.extra_info["requests_per_s"] = requests / benchmark.stats.stats.median
    benchmark.extra_info["requests"] = requests
    benchmark.extra_info["steps"] = result.steps


def _rate(requests: int, loop: str) -> tuple[float, int]:
    workload = default_workload(requests, rate=6.0, seed=0)
    started = time.perf_counter()
    (result,) = simulate_serving(workload, CONFIG, backend=loop)
    return time.perf_counter() - started, result.steps


def main(argv: list[str]) -> None:
    """Print simulated requests/s of both loops and their ratio."""
    requests = int(argv[0]) if argv else 100_000
    small = min(2000, max(1, requests // 10))
    rust_s, rust_steps = _rate(requests, "rust")
    pure_s, pure_steps = _rate(small, "pure")
    rust_rps, pure_rps = requests / rust_s, small / pure_s
    print(
        f"rust loop: {requests} requests, {rust_steps} steps in {rust_s:.3f} s: "
        f"{rust_rps:,.0f} requests/s, {rust_steps / rust_s:,.0f} steps/s"
    )
    print(
        f"pure loop: {small} requests, {pure_steps} steps in {pure_s:.3f} s: "
        f"{pure_rps:,.0f} requests/s, {pure_steps / pure_s:,.0f} steps/s"
    )
    print(f"ratio (requests/s): {rust_rps / pure_rps:.1f}x")


if __name__ == "__main__":
    main(sys.argv[1:])
