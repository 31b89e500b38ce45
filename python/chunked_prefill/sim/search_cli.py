"""``chunked-prefill search``: the capacity search's command line.

It shares the workload, scheduler, engine and SLO flags of ``simulate``
(:mod:`.cli`); ``--rate`` is the first probed rate. ``add_parser(subparsers)`` adds the
subcommand; ``run(args)`` executes parsed arguments and returns the exit status.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from collections.abc import Sequence
from typing import Any

from .._args import (
    UsageError,
    float_flag,
    int_flag,
    list_of,
    memory_message,
    one_line,
    show,
)
from .._stop import reader_gone, terminate_raises
from .cli import (
    DEFAULT_MAX_STEPS,
    MAX_SEARCH_RATE,
    MIN_RATE,
    add_engine_flags,
    add_scheduler_flags,
    add_slo_flags,
    add_workload_flags,
    check_grid,
    check_output_paths,
    check_serving_configs,
    serving_configs_from_args,
    synthetic_error,
    workload_from_args,
)
from .engine import ProfileError
from .report import PLOT_HINT, PlotUnavailable, print_whole
from .router import MAX_REPLICAS, ROUTERS
from .search import DEFAULT_ATTAINMENT, DEFAULT_PRECISION, RANK_BY, search
from .search_engines import engine_specs, utilization
from .search_space import EngineSpec, RateWorkload, SyntheticWorkload
from .serving import ServingSimConfig
from .simulator import DEFAULT_STALL_THRESHOLD_S, StepLimitError, backend_name, resolve_backend
from .workload import DEFAULT_RATE, DEFAULT_REQUESTS, TraceError, Workload

__all__ = ["add_parser", "reproduce_command", "run"]

PROG = "chunked-prefill search"
RAY_HINT = "install the ray extra: pip install 'chunked-prefill[ray]' (or pip install ray)"

_DESCRIPTION = """\
Find, for every configuration of a grid, its capacity: the highest arrival rate
(requests/s) at which at least --attainment of the requests meet every SLO given, by
bracketing (doubling or halving --rate) then bisection to --precision. Each probe is one
'chunked-prefill simulate' run of the workload at that rate: the synthetic workload drawn
at it, or a trace's arrivals rescaled to it. Prints the configurations ranked by capacity
and the 'simulate' command that reproduces the best one's run at capacity.

Every scheduler option takes a comma list, as in 'simulate'; so do --engine, --replicas
and --router. Probes run on a process pool over every core (--workers), or as Ray tasks
(--ray); the result is the same on any number of workers."""

_EPILOG = """\
Capacity when attainment is not monotone in the rate: the search returns the highest
probed rate that met the SLOs; every probed rate above it failed, the lowest of them
within --precision. A higher rate that meets may exist unprobed past a failing one.

Every bad input is one line 'chunked-prefill search: error: ...' on stderr and exit
status 2, before anything is simulated."""


def _ray_address(text: str) -> str:
    return text.strip()


_ray_address.__name__ = "a Ray address"


def _configure(p: argparse.ArgumentParser) -> None:
    add_workload_flags(
        p,
        rate_help=f"the first probed rate, requests/s, {MIN_RATE:g} to {MAX_SEARCH_RATE:g}"
        f" (default: {DEFAULT_RATE:g} for the synthetic workload, a trace's own mean rate)",
    )
    add_scheduler_flags(p, planner=False)
    add_engine_flags(p, overrides=False)
    f = p.add_argument_group("fleet (comma lists; latency, throughput and goodput are the fleet's)")
    f.add_argument(
        "--replicas",
        type=list_of(int_flag(1, MAX_REPLICAS)),
        default=[1],
        metavar="LIST",
        help="identical replicas behind the router, each its own serving scheduler, KV pool"
        f" and engine, 1 to {MAX_REPLICAS}; the capacity is the fleet's (default: 1)",
    )
    f.add_argument(
        "--router",
        type=list_of(_router),
        default=["round-robin"],
        metavar="LIST",
        help=f"how requests are assigned to replicas: {', '.join(ROUTERS)} (default: round-robin)",
    )
    add_slo_flags(p)
    _add_search_flags(p)
    _add_output_flags(p)


def _router(text: str) -> str:
    word = text.strip()
    if word not in ROUTERS:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(ROUTERS)}, got {show(text)}")
    return word


_router.__name__ = "a router"


def _add_search_flags(p: argparse.ArgumentParser) -> None:
    s = p.add_argument_group("search")
    s.add_argument(
        "--attainment",
        type=float_flag(0.0, 1.0, low_open=True, what="a fraction"),
        default=DEFAULT_ATTAINMENT,
        metavar="F",
        help="a rate meets the SLOs when at least this fraction of requests meets every"
        " one (default: %(default)s)",
    )
    s.add_argument(
        "--precision",
        type=float_flag(0.0, 1.0, low_open=True, what="a fraction"),
        default=DEFAULT_PRECISION,
        metavar="F",
        help="stop when the lowest failing rate is within this fraction above the capacity"
        " (default: %(default)s, 2 %%)",
    )
    s.add_argument(
        "--rank-by",
        choices=RANK_BY,
        default="capacity",
        help="order of the table and the JSON (default: %(default)s)",
    )
    s.add_argument(
        "--gpu-cost",
        type=float_flag(0.0, sys.float_info.max, low_open=True, what="dollars"),
        metavar="DOLLARS",
        help="price of one GPU-hour: adds requests per dollar to the table and the JSON",
    )
    s.add_argument(
        "--workers",
        type=int_flag(1, 4096),
        metavar="N",
        help=f"processes running probes (default: every core, {os.cpu_count() or 1} here)",
    )
    s.add_argument(
        "--ray",
        nargs="?",
        const="",
        type=_ray_address,
        metavar="ADDRESS",
        help="run the probes as Ray tasks on the cluster at ADDRESS, or on a new local Ray"
        " instance without one; needs the ray extra",
    )


def _add_output_flags(p: argparse.ArgumentParser) -> None:
    o = p.add_argument_group("output")
    o.add_argument(
        "--json",
        action="store_true",
        help="print JSON instead of the table: a list, best first, of {config, gpus,"
        " capacity_rps, capacity_per_gpu_rps, capped, probes, at_capacity}",
    )
    o.add_argument(
        "--plot",
        metavar="FILE",
        help="draw the capacity of every configuration and the attainment, TTFT and TBT"
        " against the rate of the best four into FILE; needs matplotlib, the plot extra",
    )
    o.add_argument(
        "--quiet",
        action="store_true",
        help="no progress bar and no notes (the progress bar is drawn only when stderr is"
        " a terminal)",
    )
    o.add_argument(
        "--stall-threshold",
        type=float_flag(0.0, sys.float_info.max, what="seconds"),
        default=DEFAULT_STALL_THRESHOLD_S,
        metavar="S",
        help="a TBT gap above this many seconds is a stall (default: %(default)s)",
    )
    o.add_argument(
        "--backend",
        choices=("auto", "rust", "pure"),
        default="auto",
        help="simulation loop (default: %(default)s = rust when built)",
    )


def add_parser(subparsers: Any) -> None:
    """Add the ``search`` subcommand to ``subparsers`` (from ``add_subparsers()``)."""
    p = subparsers.add_parser(
        "search",
        help="find the configuration that meets SLOs at the highest load",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _configure(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``search`` on parsed ``args``; returns the exit status (2 after one error line
    on stderr for a bad input)."""
    try:
        with terminate_raises():
            return _run(args)
    except StepLimitError as err:
        message = f"argument --max-steps: {err}; raise --max-steps (now {err.limit})"
    except (UsageError, TraceError, ProfileError, ValueError) as err:
        message = str(err)
    except MemoryError as err:  # a probe, here or in a worker, needs more than there is
        message = memory_message(err)
    except PlotUnavailable:
        message = f"argument --plot: needs matplotlib; {PLOT_HINT}"
    except (OSError, ConnectionError) as err:
        if reader_gone(err):  # `search --json | head`: stopping() ends it with 0
            raise
        message = str(err)
    print(f"{PROG}: error: {one_line(message)}", file=sys.stderr)
    return 2


def _source(args: argparse.Namespace) -> RateWorkload:
    if args.trace is not None:
        wl = workload_from_args(args, rate=False)
        if len(wl) < 2 or wl.mean_rate == float("inf"):
            raise UsageError(
                f"argument --trace: {args.trace}: its arrivals span no time (one request, or"
                " all at once), so they cannot be rescaled to a rate"
            )
        return wl
    workload_from_args(argparse.Namespace(**{**vars(args), "requests": 1}))  # flag checks
    return SyntheticWorkload(
        args.requests if args.requests is not None else DEFAULT_REQUESTS,
        args.seed if args.seed is not None else 0,
        args.prefix_tokens or 0,
        args.prefix_groups or 1,
        args.turns or 1,
        args.prompt_scale,
        args.output_scale,
        args.input_len,
        args.output_len,
        args.length_dist or "chat",
        args.range_ratio,
    )


def _engines(args: argparse.Namespace) -> list[EngineSpec]:
    return engine_specs(args)


def _check(args: argparse.Namespace, source: RateWorkload, engines: list[EngineSpec]) -> None:
    if args.slo_ttft is None and args.slo_tpot is None and args.slo_tbt is None:
        raise UsageError("give at least one SLO: --slo-ttft, --slo-tpot or --slo-tbt")
    check_output_paths(args)
    if args.ray is not None:
        try:
            import ray  # noqa: F401
        except ImportError:
            raise UsageError(f"argument --ray: needs Ray; {RAY_HINT}") from None
    start = args.rate if args.rate is not None else None
    try:
        probe = source.at_rate(start if start is not None else _default_start(source))
    except ValueError as err:  # the synthetic workload of every request, not only the first
        raise synthetic_error(args, err) from None
    configs = serving_configs_from_args(args)
    for spec in engines:
        check_serving_configs(args, probe, configs, spec.model, spec.memory, _util(args))


def _default_start(source: RateWorkload) -> float:
    return source.mean_rate if isinstance(source, Workload) else DEFAULT_RATE


def _util(args: argparse.Namespace) -> float:
    return utilization(args)


def _run(args: argparse.Namespace) -> int:
    from .._stop import pipe_console as Console

    check_grid(args)
    source = _source(args)
    engines = _engines(args)
    _check(args, source, engines)
    configs = serving_configs_from_args(args)
    backend = args.backend
    if backend == "auto":
        backend = backend_name(resolve_backend("auto"))
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=160)
    err_console = Console(stderr=True)
    kwargs: dict[str, Any] = {
        "engines": engines,
        "replicas": args.replicas,
        "routers": args.router,
        "slo_ttft_s": args.slo_ttft,
        "slo_tpot_s": args.slo_tpot,
        "slo_tbt_s": args.slo_tbt,
        "warmup": args.warmup,
        "drain": args.drain,
        "attainment": args.attainment,
        "precision": args.precision,
        "start_rate": args.rate,
        "rank_by": args.rank_by,
        "gpu_cost": args.gpu_cost,
        "gpu_memory_utilization": _util(args),
        "backend": backend,
        "stall_threshold_s": args.stall_threshold,
        "max_steps": args.max_steps,
        "workers": args.workers,
        "ray": args.ray is not None,
        "ray_address": args.ray or None,
        "keep_runs": args.plot is not None,
    }
    started = time.perf_counter()
    if not args.quiet and err_console.is_terminal:
        items = _with_progress(source, configs, kwargs, err_console)
    else:
        items = search(source, configs, **kwargs)
    wall = time.perf_counter() - started
    return _report(args, console, items, source, wall)


def _with_progress(
    source: RateWorkload,
    configs: Sequence[ServingSimConfig],
    kwargs: dict[str, Any],
    console: Any,
) -> list[dict[str, Any]]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task("probes", total=None)

        def on_probe(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        return search(source, configs, on_probe=on_probe, **kwargs)


def _report(
    args: argparse.Namespace,
    console: Any,
    items: list[dict[str, Any]],
    source: RateWorkload,
    wall: float,
) -> int:
    from .search_report import item_label, plot_search, search_table

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
    (:func:`~.search_runners.run_probe` draws more for fleets and short runs)."""
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
    spec = next(s for s in _engines(args) if s.name == config["engine"])
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
