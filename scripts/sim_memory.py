"""Peak memory of a long memory-true simulation: it grows with the requests, not the steps.

``python scripts/sim_memory.py [REQUESTS]`` (default 1 000 000) builds the default
workload, runs one configuration through the Rust loop and prints the peak resident set
size before and after the run. The loop keeps per-request arrays (a few 8-byte values per
request), run-length coded token gaps and a KV series of at most 4 096 points; no Python
object is made per step or per token, so the run adds a bounded number of bytes per
request on top of the workload itself.
"""

from __future__ import annotations

import resource
import sys
import time

from chunked_prefill.sim import ServingSimConfig, default_workload, simulate_serving


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def main(argv: list[str]) -> None:
    """Run and report."""
    requests = int(argv[0]) if argv else 1_000_000
    workload = default_workload(requests, rate=6.0, seed=0)
    before = _peak_mib()
    started = time.perf_counter()
    (result,) = simulate_serving(workload, ServingSimConfig(), max_steps=10**9)
    wall = time.perf_counter() - started
    after = _peak_mib()
    gaps = result.tbt_gaps.size
    print(
        f"{requests} requests, {result.steps} steps, {result.output_tokens} output tokens"
        f" in {wall:.1f} s ({requests / wall:,.0f} requests/s)"
    )
    print(
        f"peak RSS: {before:.0f} MiB with the workload built, {after:.0f} MiB after the run"
        f" (+{after - before:.0f} MiB, {(after - before) * 2**20 / requests:.0f} bytes per"
        f" request); {gaps} run-length coded gap values for"
        f" {int(result.tbt_weights.sum())} token gaps"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
