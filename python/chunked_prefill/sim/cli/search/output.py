"""What ``chunked-prefill search`` writes: the table or JSON, the plot, and the ``simulate``
command line that reproduces each point at its capacity."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from typing import Any

from ...._args import UsageError
from ...engines.spec import EngineSpec
from ...report.table import print_whole
from ...runs.defaults import DEFAULT_STALL_THRESHOLD_S
from ...search.space import RateWorkload
from ...workload.types import Workload
from ..flags.engine_specs import engine_specs
from ..flags.scheduler import (
    DEFAULT_MAX_STEPS,
)

__all__ = ["report", "reproduce_command"]


def report(
    args: argparse.Namespace,
    console: Any,
    items: list[dict[str, Any]],
    source: RateWorkload,
    wall: float,
) -> int:
    from ...search.report import item_label, plot_search, search_table

    if args.plot is not None:
        try:
            plot_search(items, args.plot, title=_title(args, source))
        except OSError as err:
            why = err.strerror or str(err)
            raise UsageError(f"argument --plot: cannot write {args.plot}: {why}") from None
        items = [_without_runs(it) for it in items]
    if args.json:
        sys.stdout.write(json.dumps(items, indent=2, allow_nan=False) + "\n")
        sys.stdout.flush()
        return 0
    # The title on a line of its own: a table title is wrapped to the table's width.
    console.print(_title(args, source), highlight=False, soft_wrap=True, style="italic")
    print_whole(search_table(items), console)
    best = items[0]
    if best["at_capacity"] is None:
        console.print("[bold red]no configuration meets the SLOs at any probed rate[/]")
    else:
        console.print(
            f"[bold]best[/]: {item_label(best, items)}, {best['capacity_rps']:.3g} req/s;"
            " its run at capacity:",
            highlight=False,
        )
        console.print(reproduce_command(args, best), highlight=False, soft_wrap=True)
    if not args.quiet:
        probes = sum(len(it["probes"]) for it in items)
        where = _where(args)
        console.print(
            f"[dim]{len(items)} configuration(s), {probes} probes in {wall:.2f} s wall time"
            f" ({where})" + (f"; plot written to {args.plot}" if args.plot else "") + "[/]",
            highlight=False,
        )
    return 0


def _where(args: argparse.Namespace) -> str:
    if args.ray is not None:
        return f"Ray at {args.ray}" if args.ray else "local Ray instance"
    workers = args.workers or os.cpu_count() or 1
    return f"{workers} worker(s)"


def _title(args: argparse.Namespace, source: RateWorkload) -> str:
    what = args.trace if args.trace is not None else "synthetic chat workload"
    requests = len(source) if isinstance(source, Workload) else getattr(source, "requests", 0)
    more = "" if isinstance(source, Workload) else " (or more, until a probe's run is steady)"
    slos = [
        f"{name} {value:g} s"
        for name, value in (("TTFT", args.slo_ttft), ("TPOT", args.slo_tpot), ("TBT", args.slo_tbt))
        if value is not None
    ]
    return (
        f"capacity search: {what}, {requests} requests{more}; SLOs {', '.join(slos)} for"
        f" {args.attainment:g} of requests"
    )


def _without_runs(item: dict[str, Any]) -> dict[str, Any]:
    probes = [{k: v for k, v in p.items() if k != "run"} for p in item["probes"]]
    return {**item, "probes": probes}


def _workload_flags(args: argparse.Namespace, requests: int | None = None) -> list[str]:
    """The workload's flags; ``requests`` as a synthetic workload's probe drew them
    (:func:`~...search.runners.run_probe` draws more for fleets and short runs)."""
    out: list[str] = []
    if args.trace is None and requests is not None:
        args = argparse.Namespace(**{**vars(args), "requests": requests})
    if args.trace is not None:
        out += ["--trace", args.trace]
        if args.time_unit != "s":
            out += ["--time-unit", args.time_unit]
    for flag, value in (
        ("--requests", args.requests),
        ("--seed", args.seed),
        ("--prefix-tokens", args.prefix_tokens),
        ("--hash-block", args.hash_block),
        ("--prefix-groups", args.prefix_groups),
        ("--turns", args.turns),
        ("--input-len", args.input_len),
        ("--output-len", args.output_len),
        ("--length-dist", args.length_dist),
        ("--range-ratio", args.range_ratio),
    ):
        if value is not None:
            out += [flag, str(value)]
    for flag, scale in (
        ("--prompt-scale", args.prompt_scale),
        ("--output-scale", args.output_scale),
    ):
        if scale != 1.0:
            out += [flag, repr(scale)]
    return out


def _config_flags(config: dict[str, Any]) -> list[str]:
    chunk = config["chunk_size"]
    out = ["--chunk-size", "none" if chunk is None else str(chunk)]
    if chunk is not None:
        budget = config["token_budget"]
        out += ["--token-budget", "none" if budget is None else str(budget)]
    out += ["--max-prefills-per-step", str(config["max_prefills_per_step"])]
    out += ["--max-running", str(config["max_running"])]
    out += ["--block-size", str(config["block_size"])]
    if config["num_blocks"] is not None:
        out += ["--num-blocks", str(config["num_blocks"])]
    if config["watermark"]:
        out += ["--watermark", repr(config["watermark"])]
    if not config["prefix_caching"]:
        out += ["--prefix-caching", "off"]
    return out


def _engine_flags(args: argparse.Namespace, spec: EngineSpec) -> list[str]:
    out = list(spec.flags)
    if args.profile is not None:
        out += ["--profile", args.profile]
    for flag, value in (
        ("--t-min", args.t_min),
        ("--c0", args.c0),
        ("--c-tok", args.c_tok),
        ("--c-attn", args.c_attn),
        ("--c-kv", args.c_kv),
        ("--c-chunk-sq", args.c_chunk_sq),
        ("--gpu-memory-utilization", args.gpu_memory_utilization),
    ):
        if value is not None:
            out += [flag, repr(value)]
    return out


def reproduce_command(args: argparse.Namespace, item: dict[str, Any]) -> str:
    """The ``chunked-prefill simulate`` command line that runs ``item``'s configuration at
    its capacity, giving its ``at_capacity`` object (with ``--json``)."""
    config = item["config"]
    spec = next(s for s in engine_specs(args) if s.name == config["engine"])
    run = item["at_capacity"]
    words = ["chunked-prefill", "simulate", *_workload_flags(args, run and run["requests"])]
    words += ["--rate", repr(item["capacity_rps"])]
    words += _config_flags(config)
    if config["replicas"] != 1 or config["router"] != "round-robin":
        words += ["--replicas", str(config["replicas"]), "--router", config["router"]]
    words += _engine_flags(args, spec)
    for flag, value in (
        ("--slo-ttft", args.slo_ttft),
        ("--slo-tpot", args.slo_tpot),
        ("--slo-tbt", args.slo_tbt),
    ):
        if value is not None:
            words += [flag, repr(value)]
    if args.stall_threshold != DEFAULT_STALL_THRESHOLD_S:
        words += ["--stall-threshold", repr(args.stall_threshold)]
    if args.max_steps != DEFAULT_MAX_STEPS:
        words += ["--max-steps", str(args.max_steps)]
    return shlex.join(words)
