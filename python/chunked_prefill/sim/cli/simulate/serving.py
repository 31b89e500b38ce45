"""``simulate`` with the serving scheduler (the default): the configurations checked before
anything runs, the runs, one per engine, and their progress bars."""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ...._args import U64_MAX, UsageError
from ...._stop import pipe_console
from ..._lazy import import_meanwhile
from ...engines.linear import KVMemory
from ...engines.roofline import StepTimeModel
from ...runs.backend import backend_name, resolve_backend
from ...runs.errors import StepLimitError
from ...runs.serving import (
    RECORD_MODULES,
    ServingSimConfig,
    min_serving_steps,
    resolve_configs,
    simulate_serving,
)
from ...runs.serving_loop import check_fits
from ...workload.types import Workload
from ..flags.engine import engine_specs_from_args
from ..flags.engine_specs import utilization
from ..flags.fleet import fleet_of
from ..flags.scheduler import serving_configs_from_args, serving_flags
from ..flags.workload import workload_from_args
from .console import output_console, print_pool, print_unfit, print_workload, report

if TYPE_CHECKING:
    from ...runs.results import SimResult


def serving_backend(name: str) -> str:
    if name != "auto":
        return name
    return backend_name(resolve_backend("auto"))


def check_serving_configs(
    args: argparse.Namespace,
    workload: Workload,
    configs: Sequence[ServingSimConfig],
    engine: StepTimeModel,
    memory: KVMemory,
    util: float,
) -> None:
    """Refuse, before anything runs, a configuration the serving scheduler refuses, one
    whose pool can never hold a request of ``workload``, or one past ``--max-steps``."""
    resolved = resolve_configs(workload, configs, engine, None, memory, util)
    from .... import ServingConfig  # Rust's when built: the pure twin's very checks

    for cfg, options in zip(configs, resolved):
        what = serving_flags(cfg)
        if options["num_blocks"] > U64_MAX:
            raise UsageError(
                f"{what}: the GPU memory leaves {options['num_blocks']} KV-cache blocks, above"
                f" 2**64 - 1 ({memory.describe(cfg.block_size, util)}); lower --gpu-memory-gib (or"
                " the --gpu profile's memory_bytes), raise --block-size or give --num-blocks"
            )
        if options["token_budget"] > U64_MAX:
            raise UsageError(
                f"{what}: 'none' stretches the token budget to the longest request plus"
                f" --max-running + 1 = {options['token_budget']}, above 2**64 - 1; give"
                " --token-budget or lower --max-running"
            )
        try:
            ServingConfig(**options)
        except (ValueError, OverflowError) as err:  # OverflowError: a derived count past u64
            if options["num_blocks"] == 0:
                raise UsageError(
                    f"{what}: no KV-cache block fits: {memory.describe(cfg.block_size, util)};"
                    " raise --gpu-memory-utilization or give --num-blocks"
                ) from None
            raise UsageError(f"{what}: {err}") from None
        try:
            check_fits(workload, options)
        except ValueError as err:
            text = str(err)
            if args.trace is not None:
                index = int(text.split()[1])
                text = f"{args.trace}: data row {index + 1}: {text}"
            lower = ", lower --watermark" if cfg.watermark else ""
            raise UsageError(
                f"{serving_flags(cfg)}: {text}; raise --num-blocks or"
                f" --gpu-memory-utilization{lower}, or shorten the request"
            ) from None
        steps, reason = min_serving_steps(workload, options)
        if steps > args.max_steps:
            raise StepLimitError(cfg, steps, args.max_steps, reason, estimated=True)


def run_serving(args: argparse.Namespace) -> int:
    backend = serving_backend(args.backend)
    workload = workload_from_args(args)
    unfit: list[str] = []
    specs = engine_specs_from_args(args, unfit)
    configs = serving_configs_from_args(args)
    util = utilization(args)
    for spec in specs:
        check_serving_configs(args, workload, configs, spec.model, spec.memory, util)
    quiet = args.quiet or args.json
    # A quiet run prints nothing before its runs: rich is imported while they run.
    console = None if quiet else output_console()
    if console is not None:
        print_workload(console, workload)
        for spec in specs:
            print_pool(console, spec, configs, util)
        print_unfit(console, unfit)
        if any(workload.cached_tokens) and not workload.shares_tokens:
            console.print(
                "[dim]note: the serving scheduler finds prefix-cache hits itself and ignores"
                " the trace's cached_tokens column (--scheduler planner honours it)[/]",
                highlight=False,
                soft_wrap=True,
            )
    replicas, router = fleet_of(args)
    if console is not None and (args.replicas or args.router):
        console.print(
            f"[bold]fleet[/]: {replicas} replica(s), {router} router",
            highlight=False,
            soft_wrap=True,
        )
    started = time.perf_counter()
    err_console = None if args.quiet else pipe_console(stderr=True)
    show_progress = err_console is not None and err_console.is_terminal
    # What the report needs after the runs is imported while they run, on what the loop
    # leaves of the cores (the records' modules first, then rich's console and table).
    import_meanwhile(*RECORD_MODULES, "rich.console", "rich.table", low_priority=True)
    results: list[SimResult] = []
    for spec in specs:
        name = f"{spec.name}: " if len(specs) > 1 else ""
        with serving_progress(configs, show_progress, err_console, name) as bar:
            results += simulate_serving(
                workload,
                configs,
                engine=spec.model,
                memory=spec.memory,
                gpu_memory_utilization=util,
                backend=backend,
                stall_threshold_s=args.stall_threshold,
                slo_ttft_s=args.slo_ttft,
                slo_tpot_s=args.slo_tpot,
                slo_tbt_s=args.slo_tbt,
                max_steps=args.max_steps,
                replicas=replicas,
                router=router,
                warmup=args.warmup,
                drain=args.drain,
                on_progress=bar,
            )
    wall = time.perf_counter() - started
    console = console or output_console()
    return report(args, console, results, workload, wall, f"serving scheduler, {backend} loop")


@contextlib.contextmanager
def serving_progress(
    configs: Sequence[ServingSimConfig], show: bool, console: Any, prefix: str = ""
) -> Iterator[Callable[[int, int, int], None] | None]:
    """A progress bar on ``console`` (when ``show``), one line per configuration, and the
    ``on_progress`` callback that drives it. The serving loop runs in the core and reports
    only each configuration's start and end, so a running line pulses with its elapsed
    time; rich redraws it from its own thread while the loop runs without the GIL."""
    if not show:
        yield None
        return
    from rich.progress import (
        BarColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    with Progress(
        SpinnerColumn(),
        "[progress.description]{task.description}",
        BarColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        tasks = [
            progress.add_task(prefix + cfg.label(), total=None, start=False, status="waiting")
            for cfg in configs
        ]

        def on_progress(index: int, done: int, total: int) -> None:
            if done == 0:
                progress.start_task(tasks[index])
                progress.update(tasks[index], status=f"{total} requests")
            else:
                progress.update(tasks[index], total=total, completed=done, status="done")

        yield on_progress
