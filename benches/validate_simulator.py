"""Close the loop: does ``chunked-prefill simulate`` predict the latencies a real engine
measures?

1. Runs a workload with Poisson arrivals through :class:`chunked_prefill.hf.PagedEngine` on
   the wall clock (the test suite's tiny random Llama on the CPU, one torch thread), measures
   every request's TTFT and token gaps (TBT) from ``engine.last_run``, and writes the steps it
   ran (``steps.csv``) and the workload as a trace (``trace.csv``: the same arrivals, prompt
   and output lengths).
2. ``chunked-prefill fit steps.csv --out profile.json``: the engine model fitted to the steps.
3. ``chunked-prefill simulate --trace trace.csv --profile profile.json`` with the engine's
   ``ServingConfig`` (pool, block size, budget, chunk size, prefill limit, prefix caching).

It prints the commands it ran and a Markdown table of measured against predicted p50 and p90
of TTFT and TBT (TBT pooled over every gap of every request, as the simulator counts it). It
also writes ``steps-cpu.csv``, the steps with their thread CPU time as ``duration_s``, and
reports the fit to it: the model's error on the engine's own cost, without the waits for a
CPU that a busy machine adds.

Run (needs the ``hf`` extra)::

    pip install '.[hf]'
    python benches/validate_simulator.py --out-dir run
    python benches/validate_simulator.py --requests 30 --rate 10  # CI size

It reports on stderr as it goes: a line when each phase starts and, while the engine runs,
a line every :data:`HEARTBEAT_S` seconds.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers

import chunked_prefill
from chunked_prefill import hf
from chunked_prefill._steps import write_steps_csv
from chunked_prefill.sim.fit import fit_steps, read_steps_csv
from chunked_prefill.sim.runs.results import Percentiles
from paged_figures import tiny_llama


@dataclass(frozen=True)
class Workload:
    """Requests in arrival order: prompts (token ids), output lengths, arrival times."""

    prompts: list[list[int]]
    outputs: list[int]
    arrival_s: list[float]
    prefix_tokens: int


def make_workload(args: argparse.Namespace) -> Workload:
    """Poisson arrivals at ``--rate``; prompt and output lengths uniform in their ranges;
    every prompt starts with the same ``--prefix-tokens`` (a shared system prompt)."""
    rng = np.random.default_rng(args.seed)
    n = args.requests
    arrivals = np.cumsum(rng.exponential(1.0 / args.rate, n))
    lo, hi = args.prompt_tokens
    lengths = rng.integers(lo, hi + 1, n)
    lo, hi = args.output_tokens
    outputs = rng.integers(lo, hi + 1, n)
    shared = rng.integers(0, 128, args.prefix_tokens).tolist()
    prompts = [shared + rng.integers(0, 128, int(k)).tolist() for k in lengths]
    return Workload(prompts, outputs.tolist(), arrivals.round(6).tolist(), args.prefix_tokens)


def write_trace(workload: Workload, path: Path) -> None:
    """The workload as a ``simulate --trace`` file (with ``prefix_id`` when prompts share
    a prefix, so the simulator's token ids share it too)."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        out = csv.writer(f, lineterminator="\n")
        shared = workload.prefix_tokens > 0
        out.writerow(["arrival_s", "prompt_tokens", "output_tokens"] + ["prefix_id"] * shared)
        for a, p, o in zip(workload.arrival_s, workload.prompts, workload.outputs):
            out.writerow([repr(a), len(p), o] + [0] * shared)


def serving_options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "num_blocks": args.num_blocks,
        "block_size": args.block_size,
        "token_budget": args.token_budget,
        "chunk_size": args.chunk_size,
        "max_prefills_per_step": args.max_prefills_per_step,
        "max_running": args.max_running,
        "watermark": args.watermark,
        "prefix_caching": args.prefix_caching == "on",
    }


HEARTBEAT_S = 5.0
"""Seconds between two progress lines while the engine runs."""


def say(text: str) -> None:
    """A progress line on stderr (stdout keeps the report)."""
    print(f"validate_simulator: {text}", file=sys.stderr, flush=True)


def heartbeat(done: threading.Event, arrivals: list[float], started: float) -> None:
    """Until ``done``, say every :data:`HEARTBEAT_S` seconds how far the engine's run is:
    the requests that have arrived on its wall clock (the engine itself is not touched from
    this thread)."""
    while not done.wait(HEARTBEAT_S):
        t = time.perf_counter() - started
        arrived = sum(a <= t for a in arrivals)
        say(
            f"engine running: {t:.0f} s, {arrived} of {len(arrivals)} requests arrived"
            f" (the last at {arrivals[-1]:.0f} s)"
        )


def run_engine(args: argparse.Namespace, workload: Workload, out: Path) -> dict[str, Any]:
    """Run the workload on the wall clock; the measured figures and the run's counters."""
    torch.set_num_threads(1)
    model = tiny_llama(hidden=args.hidden_size, layers=args.layers)
    config = chunked_prefill.ServingConfig(**serving_options(args))
    engine = hf.PagedEngine(model, config, separate_decodes=args.separate_decodes)
    engine.generate(workload.prompts[:8], max_new_tokens=4)  # warm up: first-call costs
    say(
        f"running {len(workload.prompts)} requests through PagedEngine on the wall clock"
        f" (the last arrives at {workload.arrival_s[-1]:.0f} s)"
    )
    done = threading.Event()
    beat = threading.Thread(
        target=heartbeat, args=(done, workload.arrival_s, time.perf_counter()), daemon=True
    )
    beat.start()
    try:
        engine.generate(
            workload.prompts,
            max_new_tokens=workload.outputs,
            arrival_s=workload.arrival_s,
            steps_csv=out / "steps.csv",
        )
    finally:
        done.set()
        beat.join()
    runs, steps = engine.last_run, engine.last_steps
    wall = sum(s.duration_s for s in steps)
    ttft = np.array([r.first_token_s - r.arrival_s for r in runs])  # type: ignore[operator]
    gaps = np.array([b - a for r in runs for a, b in zip(r.token_s, r.token_s[1:])])
    return {
        "ttft_s": Percentiles.of(ttft).to_dict(),
        "tbt_s": Percentiles.of(gaps).to_dict(),
        "steps": len(steps),
        "preemptions": engine.scheduler.num_preemptions,
        "cached_tokens": engine.scheduler.num_cached_tokens,
        "scheduler_share": sum(s.scheduler_s for s in steps) / wall,
        "cpu_share": sum(s.cpu_s for s in steps) / wall,
        "cpu_fit": cpu_fit(steps, out / "steps-cpu.csv"),
    }


def cpu_fit(steps: list[hf.StepRecord], path: Path) -> dict[str, float]:
    """Write the steps with their CPU time as ``duration_s`` to ``path`` and fit it: the
    per-step error of the engine model without the waits for a CPU, i.e. what the model
    misses of the engine's own cost."""
    write_steps_csv(path, [replace(s, duration_s=max(s.cpu_s, 1e-9)) for s in steps])
    fit = fit_steps(read_steps_csv(path))
    return {"p50": fit.error_p50, "p90": fit.error_p90}


def cli(argv: list[str]) -> str:
    """Run ``chunked-prefill ARGV`` (this interpreter's package) and return its stdout."""
    print("$ chunked-prefill " + shlex.join(argv), file=sys.stderr)
    done = subprocess.run(
        [sys.executable, "-m", "chunked_prefill", *argv], capture_output=True, text=True
    )
    if done.returncode != 0:
        sys.exit(f"chunked-prefill {argv[0]} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def simulate_argv(args: argparse.Namespace, out: Path) -> list[str]:
    argv = ["simulate", "--trace", str(out / "trace.csv"), "--profile", str(out / "profile.json")]
    for flag in (
        "token_budget",
        "chunk_size",
        "max_prefills_per_step",
        "max_running",
        "block_size",
        "num_blocks",
        "watermark",
        "prefix_caching",
    ):
        argv += ["--" + flag.replace("_", "-"), str(getattr(args, flag))]
    if args.prefix_tokens:
        argv += ["--prefix-tokens", str(args.prefix_tokens)]
    return [*argv, "--json", "--quiet"]


def table(measured: dict[str, Any], predicted: dict[str, Any]) -> list[str]:
    rows = [
        "| metric | measured (engine) | predicted (simulate) | error |",
        "|---|---|---|---|",
    ]
    for key, name in (("ttft_s", "TTFT"), ("tbt_s", "TBT")):
        for q in ("p50", "p90"):
            m, p = measured[key][q], predicted[key][q]
            if m is None or p is None:  # no token gaps: every output is one token
                rows.append(f"| {name} {q} | - | - | - |")
                continue
            rows.append(
                f"| {name} {q} | {m * 1e3:.1f} ms | {p * 1e3:.1f} ms | {(p - m) / m:+.1%} |"
            )
    return rows


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--rate", type=float, default=4.0, help="Poisson arrivals per second")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prompt-tokens", type=int, nargs=2, default=(16, 192), metavar=("LO", "HI"))
    p.add_argument("--output-tokens", type=int, nargs=2, default=(8, 48), metavar=("LO", "HI"))
    p.add_argument("--prefix-tokens", type=int, default=32, help="shared by every prompt")
    p.add_argument("--hidden-size", type=int, default=64, help="of the random Llama")
    p.add_argument("--layers", type=int, default=2, help="of the random Llama")
    p.add_argument("--num-blocks", type=int, default=512)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--token-budget", type=int, default=128)
    p.add_argument("--chunk-size", type=int, default=64)
    p.add_argument("--max-prefills-per-step", type=int, default=1)
    p.add_argument("--max-running", type=int, default=32)
    p.add_argument("--watermark", type=float, default=0.0)
    p.add_argument("--prefix-caching", choices=("on", "off"), default="on")
    p.add_argument(
        "--separate-decodes",
        action="store_true",
        help="run a step's decodes and its prompt chunk as two forward passes (default: one)",
    )
    p.add_argument("--out-dir", type=Path, help="keep the files here (default: a temp dir)")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    say(f"{args.requests} requests at {args.rate:g}/s, seed {args.seed}; building the model")
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out_dir or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        workload = make_workload(args)
        write_trace(workload, out / "trace.csv")
        t0 = time.perf_counter()
        measured = run_engine(args, workload, out)
        engine_s = time.perf_counter() - t0
        say(f"engine done in {engine_s:.1f} s; fitting and simulating")
        (out / "measured.json").write_text(json.dumps(measured, indent=2) + "\n")
        steps, profile = str(out / "steps.csv"), str(out / "profile.json")
        fit = json.loads(cli(["fit", steps, "--out", profile, "--json"]))
        (predicted,) = json.loads(cli(simulate_argv(args, out)))
        report(args, measured, fit, predicted, engine_s)


def report(
    args: argparse.Namespace,
    measured: dict[str, Any],
    fit: dict[str, Any],
    predicted: dict[str, Any],
    engine_s: float,
) -> None:
    err = fit["relative_error"]
    passes = "decodes and chunks apart" if args.separate_decodes else "one pass per step"
    print(
        f"python {platform.python_version()}, torch {torch.__version__}, transformers "
        f"{transformers.__version__}, {os.cpu_count()} CPUs; {args.requests} requests at "
        f"{args.rate:g}/s, seed {args.seed}; {passes}; engine run {engine_s:.1f} s\n"
    )
    print(
        f"engine: {measured['steps']} steps, {measured['preemptions']} preemptions, "
        f"{measured['cached_tokens']} cached prompt tokens; of the steps' wall time, "
        f"{measured['scheduler_share']:.1%} in the scheduler and {measured['cpu_share']:.0%} "
        "on a CPU (the rest waiting for one)"
    )
    print(
        f"simulate: {predicted['steps']} steps, {predicted['preemptions']} preemptions, "
        f"prefix hit rate {predicted['prefix_hit_rate']:.1%}"
    )
    coef = ", ".join(f"{k} {v:.3g}" for k, v in fit["engine"].items() if k != "name")
    cpu = measured["cpu_fit"]
    print(
        f"fit: {coef}; per-step error p50 {err['p50']:.1%}, p90 {err['p90']:.1%} "
        f"(fitted to the steps' CPU time instead: p50 {cpu['p50']:.1%}, p90 {cpu['p90']:.1%})\n"
    )
    print("\n".join(table(measured, predicted)))


if __name__ == "__main__":
    main()
