"""The capacity search's speed: a 4 x 3 x 3 grid, on one worker and on every core.

The grid: chunk sizes 256, 512, 1024, 2048 x token budgets 2048, 4096, 8192 x most running
requests 64, 128, 256 (36 configurations) on the Llama-2-7B / H100 preset, the default
synthetic workload, SLOs TTFT 2 s and TBT 100 ms for 99 % of requests, 2 % precision.

``python benches/bench_search.py [REQUESTS]`` (default 10 000) prints the probes run, the
wall and CPU time on 1 worker and on every core, and the best configuration; the pytest
case runs the same grid on 100 requests (the smoke run) and checks both give the same
result.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from typing import Any

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from chunked_prefill.sim import SyntheticWorkload, expand_serving_configs, search

CONFIGS = expand_serving_configs(
    chunk_sizes=[256, 512, 1024, 2048],
    token_budgets=[2048, 4096, 8192],
    max_running=[64, 128, 256],
)
SETTINGS: dict[str, Any] = {
    "engines": ["llama2-7b-h100"],
    "slo_ttft_s": 2.0,
    "slo_tbt_s": 0.1,
    "attainment": 0.99,
}
SMOKE_REQUESTS = 100


def _cpu_s() -> float:
    """CPU time of this process and of its finished children (the pool's workers)."""
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _search(requests: int, workers: int) -> tuple[list[dict[str, Any]], float, float]:
    """The result, its wall time and its CPU time (on a shared machine the wall time
    depends on the other jobs; the CPU time much less)."""
    started, cpu = time.perf_counter(), _cpu_s()
    items = search(SyntheticWorkload(requests), CONFIGS, workers=workers, **SETTINGS)
    return items, time.perf_counter() - started, _cpu_s() - cpu


def _best(items: list[dict[str, Any]]) -> str:
    c = items[0]["config"]
    return (
        f"chunk {c['chunk_size']}, budget {c['token_budget']}, max running {c['max_running']}:"
        f" {items[0]['capacity_rps']:.2f} req/s"
    )


@pytest.mark.parametrize("workers", [1, os.cpu_count() or 1])
def test_search_grid(benchmark: BenchmarkFixture, workers: int) -> None:
    """The 36-configuration grid on SMOKE_REQUESTS requests."""
    assert len(CONFIGS) == 36
    benchmark.group = f"search 36 configurations x {SMOKE_REQUESTS} requests"
    items = benchmark.pedantic(
        search,
        (SyntheticWorkload(SMOKE_REQUESTS), CONFIGS),
        {"workers": workers, **SETTINGS},
        rounds=1,
        iterations=1,
    )
    assert len(items) == 36 and items[0]["capacity_rps"] > 0
    benchmark.extra_info["probes"] = sum(len(it["probes"]) for it in items)
    benchmark.extra_info["best"] = _best(items)


def main(argv: list[str]) -> None:
    """Print the probes, the wall time on 1 worker and on every core, and the best."""
    requests = int(argv[0]) if argv else 10_000
    cores = os.cpu_count() or 1
    one, one_s, one_cpu = _search(requests, 1)
    many, many_s, many_cpu = _search(requests, cores)
    assert one == many, "the result depends on the number of workers"
    probes = sum(len(it["probes"]) for it in one)
    print(f"grid: {len(CONFIGS)} configurations x {requests} requests, {probes} probes")
    print(f"1 worker: {one_s:.1f} s wall, {one_cpu:.1f} s CPU ({one_cpu / probes:.3f} s/probe)")
    print(
        f"{cores} workers: {many_s:.1f} s wall ({one_s / many_s:.2f}x), {many_cpu:.1f} s CPU"
        " (with the workers' start-up)"
    )
    print(f"best: {_best(one)}")


if __name__ == "__main__":
    main(sys.argv[1:])
