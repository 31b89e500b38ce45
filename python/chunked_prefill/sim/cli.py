"""``chunked-prefill simulate``: the simulator's command line.

``add_parser(subparsers)`` adds the ``simulate`` subcommand to an argparse subparsers
object (and sets ``func=run`` on it); ``run(args)`` executes parsed arguments and returns
the exit status. ``main(argv)`` is a standalone entry point (``python -m
chunked_prefill.sim``).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from .engine import ENGINE_PRESETS, EngineModel, ProfileError, load_profile
from .report import PlotUnavailable, plot_cdfs, print_table, require_matplotlib, results_to_json
from .simulator import (
    DEFAULT_STALL_THRESHOLD_S,
    SimResult,
    backend_name,
    expand_configs,
    resolve_backend,
    simulate,
)
from .workload import (
    DEFAULT_RATE,
    DEFAULT_REQUESTS,
    TraceError,
    Workload,
    default_workload,
    load_trace,
)

__all__ = ["add_parser", "main", "run"]

PROG = "chunked-prefill simulate"

T = TypeVar("T")

_DESCRIPTION = """\
Replay a workload through the real chunked-prefill Scheduler against a step-latency model
of the engine, and report the TTFT, TBT and end-to-end latency each configuration gives.

With no arguments: the embedded synthetic chat workload (1000 requests, Poisson arrivals
at 6 req/s, heavy-tailed prompt and output lengths) on Llama-2-7B / A100 coefficients,
comparing chunk sizes 256, 512, 2048 and none (whole prompts in one step).

Every scheduler option takes a comma list; the configurations run are the cross product
of all lists (options that do not apply are dropped, duplicates removed)."""

_EPILOG = """\
step time model: max(t_min, c0 + c_tok*(prefill+decode tokens)) + c_attn*(prefill
(query, key) pairs) + c_kv*(context tokens of the decode requests), in seconds.
Trace columns: arrival_s, prompt_tokens, output_tokens (+ optional cached_tokens,
priority); common public-trace names are accepted as aliases."""


def _list_of(parse: Callable[[str], T]) -> Callable[[str], list[T]]:
    def parse_list(text: str) -> list[T]:
        items = [item.strip() for item in text.split(",")]
        if not items or any(not item for item in items):
            raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
        return [parse(item) for item in items]

    parse_list.__name__ = f"list of {getattr(parse, '__name__', 'value')}"
    return parse_list


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def _int_or_none(text: str) -> int | None:
    if text.lower() == "none":
        return None
    return _positive_int(text)


_int_or_none.__name__ = "int or 'none'"
_positive_int.__name__ = "positive int"


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected requests/s or 'inf', got {text!r}") from None
    if math.isnan(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected requests/s > 0 or 'inf', got {text!r}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"expected finite seconds >= 0, got {text!r}")
    return value


def _scale(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a factor, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a finite factor > 0, got {text!r}")
    return value


def _configure(p: argparse.ArgumentParser) -> None:
    w = p.add_argument_group("workload")
    w.add_argument(
        "--trace",
        metavar="FILE",
        help="replay a CSV or JSON Lines trace instead of the synthetic workload",
    )
    w.add_argument(
        "--time-unit",
        choices=("s", "ms", "us"),
        default="s",
        help="unit of numeric arrival times in --trace (default: s)",
    )
    w.add_argument(
        "--requests",
        type=_positive_int,
        metavar="N",
        help=f"synthetic requests (default: {DEFAULT_REQUESTS}); with --trace, replay the"
        " first N rows",
    )
    w.add_argument(
        "--rate",
        type=_rate,
        metavar="R",
        help=f"synthetic Poisson arrival rate, requests/s, or 'inf' for all at t=0"
        f" (default: {DEFAULT_RATE:g})",
    )
    w.add_argument("--seed", type=int, metavar="S", help="synthetic workload seed (default: 0)")
    w.add_argument(
        "--prompt-scale", type=_scale, default=1.0, metavar="X", help="multiply prompt lengths"
    )
    w.add_argument(
        "--output-scale", type=_scale, default=1.0, metavar="X", help="multiply output lengths"
    )

    s = p.add_argument_group("scheduler (comma lists; the cross product is run)")
    s.add_argument(
        "--chunk-size",
        type=_list_of(_int_or_none),
        default=[256, 512, 2048, None],
        metavar="LIST",
        help="most prompt tokens per request per step; 'none' = whole prompt in one step"
        " (default: 256,512,2048,none)",
    )
    s.add_argument(
        "--token-budget",
        type=_list_of(_int_or_none),
        default=[None],
        metavar="LIST",
        help="tokens (decode + prefill) per step, or 'none' for the one-chunk rule (default: none)",
    )
    s.add_argument(
        "--max-prefills-per-step",
        type=_list_of(_positive_int),
        default=[1],
        metavar="LIST",
        help="requests that may get a chunk in one step; needs a token budget (default: 1)",
    )
    s.add_argument(
        "--max-decode-tokens",
        type=_list_of(_positive_int),
        default=[128],
        metavar="LIST",
        help="most decode tokens per step (default: 128)",
    )
    s.add_argument(
        "--max-running",
        type=_list_of(_positive_int),
        default=[256],
        metavar="LIST",
        help="most requests running at once, like vLLM's max_num_seqs (default: 256)",
    )

    e = p.add_argument_group("engine model (seconds)")
    e.add_argument(
        "--engine",
        choices=sorted(ENGINE_PRESETS),
        default="llama2-7b-a100",
        help="coefficient preset (default: llama2-7b-a100)",
    )
    e.add_argument(
        "--profile", metavar="FILE", help="TOML or JSON file of coefficients over the preset"
    )
    e.add_argument("--t-min", type=_seconds, metavar="S", help="floor of the linear part")
    e.add_argument("--c0", type=_seconds, metavar="S", help="fixed cost per step")
    e.add_argument("--c-tok", type=_seconds, metavar="S", help="cost per batched token")
    e.add_argument("--c-attn", type=_seconds, metavar="S", help="cost per prefill (q, k) pair")
    e.add_argument("--c-kv", type=_seconds, metavar="S", help="cost per decode context token")

    o = p.add_argument_group("output")
    o.add_argument("--json", action="store_true", help="print JSON instead of the table")
    o.add_argument("--plot", metavar="FILE.png", help="draw TTFT and TBT CDFs (needs matplotlib)")
    o.add_argument("--quiet", action="store_true", help="no progress bar and no notes")
    o.add_argument(
        "--stall-threshold",
        type=_seconds,
        default=DEFAULT_STALL_THRESHOLD_S,
        metavar="S",
        help=f"a TBT gap above this is a stall (default: {DEFAULT_STALL_THRESHOLD_S:g})",
    )
    o.add_argument(
        "--backend",
        choices=("auto", "rust", "pure"),
        default="auto",
        help="scheduler implementation (default: auto = rust when built)",
    )


def add_parser(subparsers: Any) -> None:
    """Add the ``simulate`` subcommand to ``subparsers`` (from ``add_subparsers()``)."""
    p = subparsers.add_parser(
        "simulate",
        help="simulate the latency of chunked-prefill configurations",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _configure(p)
    p.set_defaults(func=run)


def build_parser() -> argparse.ArgumentParser:
    """A standalone parser of the ``simulate`` options."""
    p = argparse.ArgumentParser(
        prog=PROG,
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _configure(p)
    return p


class _UsageError(Exception):
    pass


def _workload(args: argparse.Namespace) -> Workload:
    if args.trace is not None:
        for flag, value in (("--rate", args.rate), ("--seed", args.seed)):
            if value is not None:
                raise _UsageError(f"{flag} applies to the synthetic workload, not to --trace")
        wl = load_trace(args.trace, time_unit=args.time_unit)
        if args.requests is not None:
            wl = wl.head(args.requests)
        return wl.scaled(args.prompt_scale, args.output_scale)
    return default_workload(
        args.requests if args.requests is not None else DEFAULT_REQUESTS,
        rate=args.rate if args.rate is not None else DEFAULT_RATE,
        seed=args.seed if args.seed is not None else 0,
        prompt_scale=args.prompt_scale,
        output_scale=args.output_scale,
    )


def _engine(args: argparse.Namespace) -> EngineModel:
    model = ENGINE_PRESETS[args.engine]
    if args.profile is not None:
        model = load_profile(args.profile, base=model)
    overrides = {
        "t_min_s": args.t_min,
        "c0_s": args.c0,
        "c_tok_s": args.c_tok,
        "c_attn_s": args.c_attn,
        "c_kv_s": args.c_kv,
    }
    if any(v is not None for v in overrides.values()):
        model = model.with_overrides(name=f"{model.name} (overridden)", **overrides)
    return model


def run(args: argparse.Namespace) -> int:
    """Run the ``simulate`` subcommand on parsed ``args``; returns the exit status."""
    try:
        return _run(args)
    except (_UsageError, TraceError, ProfileError, PlotUnavailable, ValueError, ImportError) as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    from rich.console import Console

    if args.plot is not None:
        require_matplotlib()
    module = resolve_backend(args.backend)
    workload = _workload(args)
    engine = _engine(args)
    configs = expand_configs(
        args.chunk_size,
        args.token_budget,
        args.max_prefills_per_step,
        args.max_decode_tokens,
        args.max_running,
    )
    err_console = Console(stderr=True)
    show_progress = not args.quiet and err_console.is_terminal
    started = time.perf_counter()
    if show_progress:
        results = _simulate_with_progress(workload, configs, engine, module, args, err_console)
    else:
        results = simulate(
            workload,
            configs,
            engine=engine,
            backend=module,
            stall_threshold_s=args.stall_threshold,
        )
    wall = time.perf_counter() - started
    if args.plot is not None:
        plot_cdfs(results, args.plot)
    if args.json:
        sys.stdout.write(results_to_json(results) + "\n")
        sys.stdout.flush()
        return 0
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=160)
    summary = workload.summary()
    if not args.quiet:
        console.print(
            f"[bold]workload[/]: {summary['source']}; mean prompt"
            f" {summary['prompt_tokens_mean']:.0f} (max {summary['prompt_tokens_max']}) tokens,"
            f" mean output {summary['output_tokens_mean']:.0f} (max"
            f" {summary['output_tokens_max']}) tokens",
            highlight=False,
        )
        console.print(
            f"[bold]engine[/]: {engine.name}: max({engine.t_min_s * 1e3:g} ms,"
            f" {engine.c0_s * 1e3:g} ms + {engine.c_tok_s * 1e6:g} us/token)"
            f" + {engine.c_attn_s * 1e9:g} ns/(q,k) pair + {engine.c_kv_s * 1e6:g} us/context"
            " token",
            highlight=False,
        )
    print_table(results, console)
    if not args.quiet:
        console.print(
            f"[dim]{len(configs)} configuration(s) x {len(workload)} requests simulated in"
            f" {wall:.2f} s wall time ({backend_name(module)} backend)"
            + (f"; plot written to {args.plot}" if args.plot else "")
            + "[/]",
            highlight=False,
        )
    return 0


def _simulate_with_progress(
    workload: Workload,
    configs: Sequence[Any],
    engine: EngineModel,
    module: Any,
    args: argparse.Namespace,
    console: Any,
) -> list[SimResult]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        tasks = [
            progress.add_task(cfg.label(), total=len(workload), start=False) for cfg in configs
        ]

        def on_progress(index: int, done: int, total: int) -> None:
            progress.start_task(tasks[index])
            progress.update(tasks[index], completed=done, total=total)

        return simulate(
            workload,
            configs,
            engine=engine,
            backend=module,
            stall_threshold_s=args.stall_threshold,
            on_progress=on_progress,
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``) as ``simulate`` options and run."""
    args = build_parser().parse_args(argv)
    return run(args)
