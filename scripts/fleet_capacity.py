"""The capacity of a fleet per router, on a workload of shared system prompts.

``python scripts/fleet_capacity.py [--requests N] [--replicas R] [--prefix-tokens P]
[--prefix-groups G] [--token-budget B] [--routers LIST]`` prints, for each router, the
highest arrival rate (req/s) at which at least 99 % of the requests meet TTFT 2 s and TBT
0.1 s: the rate is doubled from 1 req/s until it fails, then bisected to 2 %. It is the
first crossing found that way (attainment need not be monotone in the rate); the
``chunked-prefill search`` command is the general tool. Figures in ``docs/simulate.md``.
"""

from __future__ import annotations

import argparse
import time

from chunked_prefill.sim import ServingSimConfig, SimResult, default_workload, simulate_serving
from chunked_prefill.sim.router import ROUTERS


def _probe(args: argparse.Namespace, rate: float, router: str) -> SimResult:
    workload = default_workload(
        args.requests,
        rate=rate,
        seed=0,
        prefix_tokens=args.prefix_tokens,
        prefix_groups=args.prefix_groups,
    )
    config = ServingSimConfig(chunk_size=512, token_budget=args.token_budget)
    (result,) = simulate_serving(
        workload,
        config,
        slo_ttft_s=2.0,
        slo_tbt_s=0.1,
        replicas=args.replicas,
        router=router,
    )
    return result


def _meets(result: SimResult) -> bool:
    assert result.serving is not None and result.serving.slo_attainment is not None
    return result.serving.slo_attainment >= 0.99


def capacity(args: argparse.Namespace, router: str) -> tuple[float, SimResult]:
    """The highest rate found to meet the SLOs, and the run at it."""
    low, high = 0.0, 1.0
    while _meets(_probe(args, high, router)):
        low, high = high, high * 2
    while high - low > 0.02 * low:
        mid = (low + high) / 2
        if _meets(_probe(args, mid, router)):
            low = mid
        else:
            high = mid
    return low, _probe(args, low, router)


def main() -> None:
    """Parse the flags, print one line per router."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--replicas", type=int, default=4)
    p.add_argument("--prefix-tokens", type=int, default=4096)
    p.add_argument("--prefix-groups", type=int, default=64)
    p.add_argument("--token-budget", type=int, default=1024)
    p.add_argument("--routers", default=",".join(ROUTERS))
    args = p.parse_args()
    for router in args.routers.split(","):
        started = time.perf_counter()
        rate, result = capacity(args, router)
        assert result.serving is not None
        print(
            f"{router:13} capacity {rate:5.2f} req/s, prefix hit"
            f" {result.serving.prefix_hit_rate:.2f} ({time.perf_counter() - started:.0f} s)"
        )


if __name__ == "__main__":
    main()
