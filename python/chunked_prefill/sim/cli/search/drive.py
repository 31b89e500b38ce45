"""``chunked-prefill search`` run: the workload source and engines the flags give, the checks
before any probe, and the search with its progress bar."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from typing import Any

from ...._args import UsageError
from ...engines.spec import EngineSpec
from ...runs.backend import backend_name, resolve_backend
from ...runs.serving import ServingSimConfig
from ...search.capacity import search
from ...search.space import RateWorkload, SyntheticWorkload
from ...workload.synthetic import DEFAULT_RATE, DEFAULT_REQUESTS
from ...workload.types import Workload
from ..flags.engine_specs import engine_specs, utilization
from ..flags.output import check_output_paths
from ..flags.scheduler import (
    check_grid,
    serving_configs_from_args,
)
from ..flags.workload import (
    synthetic_error,
    workload_from_args,
)
from ..simulate.serving import check_serving_configs
from .output import report

__all__ = ["RAY_HINT", "run_search"]

RAY_HINT = "install the ray extra: pip install 'chunked-prefill[ray]' (or pip install ray)"


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


def run_search(args: argparse.Namespace) -> int:
    """Search the capacity of every point the flags give, and report."""
    from ...._stop import pipe_console as Console

    check_grid(args)
    source = _source(args)
    engines = engine_specs(args)
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
    return report(args, console, items, source, wall)


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
