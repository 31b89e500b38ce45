"""The capacity of a fleet per router, on a workload of shared system prompts.

``python scripts/fleet_capacity.py [--requests N] [--replicas R] [--prefix-tokens P]
[--prefix-groups G] [--token-budget B] [--routers LIST]`` prints, for one replica and then
for the fleet behind each router, the capacity ``chunked-prefill search`` finds (the highest
arrival rate at which 99 % of the steady part's requests meet TTFT 2 s and TPOT 0.1 s and the
engine keeps up; probes draw more requests until their run is steady), starting from
1 req/s. Figures in ``docs/simulate.md``.
"""

from __future__ import annotations

import argparse
import time

from chunked_prefill.sim import ServingSimConfig, SyntheticWorkload, search
from chunked_prefill.sim.runs.router import ROUTERS


def capacity(args: argparse.Namespace, replicas: int, router: str) -> dict[str, object]:
    """The search's item for the fleet of ``replicas`` behind ``router``."""
    (item,) = search(
        SyntheticWorkload(
            args.requests, prefix_tokens=args.prefix_tokens, prefix_groups=args.prefix_groups
        ),
        ServingSimConfig(chunk_size=512, token_budget=args.token_budget),
        replicas=[replicas],
        routers=[router],
        slo_ttft_s=2.0,
        slo_tpot_s=0.1,
        start_rate=1.0,
        workers=1,
    )
    return item


def main() -> None:
    """Parse the flags, print one line for one replica and one per router."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--replicas", type=int, default=4)
    p.add_argument("--prefix-tokens", type=int, default=4096)
    p.add_argument("--prefix-groups", type=int, default=64)
    p.add_argument("--token-budget", type=int, default=1024)
    p.add_argument("--routers", default=",".join(ROUTERS))
    args = p.parse_args()
    fleets = [(1, "round-robin")] + [(args.replicas, r) for r in args.routers.split(",")]
    for replicas, router in fleets:
        started = time.perf_counter()
        item = capacity(args, replicas, router)
        run = item["at_capacity"]
        hit = run["prefix_hit_rate"] if isinstance(run, dict) else float("nan")
        print(
            f"{replicas} x {router:13} capacity {item['capacity_rps']:5.2f} req/s, prefix hit"
            f" {hit:.2f} ({time.perf_counter() - started:.0f} s)"
        )


if __name__ == "__main__":
    main()
