"""Write a synthetic trace file in the form of ``examples/trace.csv``, for timing
``chunked-prefill simulate --trace`` and ``load_trace`` on many rows.

``python scripts/make_trace.py OUT [--requests N] [--rate R] [--seed S]`` writes the default
workload's first N requests (default 100 000, at R req/s) as CSV, or as JSON Lines when OUT
ends in ``.jsonl``: ``arrival_s`` with millisecond precision, the prompt and output lengths,
and, as in the example, every prompt longer than 128 tokens starting with the 128-token
system prompt ``system`` (``cached_tokens``, ``prefix_id``, ``prefix_tokens``; its first
request finds nothing cached).
"""

from __future__ import annotations

import argparse
import csv
import json

from chunked_prefill.sim import default_workload

SYSTEM_TOKENS = 128


def rows(requests: int, rate: float, seed: int) -> list[dict[str, object]]:
    """The trace's rows, as column -> value."""
    wl = default_workload(requests, rate=rate, seed=seed)
    out: list[dict[str, object]] = []
    seen = False
    for a, p, o in zip(wl.arrival_s, wl.prompt_tokens, wl.output_tokens):
        shared = p > SYSTEM_TOKENS
        row: dict[str, object] = {
            "arrival_s": f"{a:.3f}",
            "prompt_tokens": p,
            "output_tokens": o,
            "cached_tokens": SYSTEM_TOKENS if shared and seen else 0,
            "prefix_id": "system" if shared else "",
            "prefix_tokens": SYSTEM_TOKENS if shared else "",
        }
        seen = seen or shared
        out.append(row)
    return out


def write_trace(out: str, requests: int = 100_000, rate: float = 4.0, seed: int = 7) -> None:
    """Write the trace to ``out``: JSON Lines when it ends in ``.jsonl``, else CSV."""
    table = rows(requests, rate, seed)
    with open(out, "w", newline="", encoding="utf-8") as f:
        if out.endswith(".jsonl"):
            for row in table:
                kept = {k: v for k, v in row.items() if v != ""}
                kept["arrival_s"] = float(str(kept["arrival_s"]))
                f.write(json.dumps(kept) + "\n")
        else:
            writer = csv.DictWriter(f, fieldnames=list(table[0]), lineterminator="\n")
            writer.writeheader()
            writer.writerows(table)


def main() -> None:
    """Parse the arguments and write the file."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=4.0)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    write_trace(args.out, args.requests, args.rate, args.seed)


if __name__ == "__main__":
    main()
