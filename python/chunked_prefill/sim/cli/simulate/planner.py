"""``simulate --scheduler planner``: the planner's runs, one per engine, with their progress
bars and the ``--steps-csv`` record."""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

from ...._args import UsageError
from ...._stop import pipe_console
from ...engines.roofline import StepTimeModel
from ...runs.backend import backend_name, resolve_backend
from ...runs.errors import ConfigError
from ...runs.planner import check_configs, simulate
from ...runs.results import SimResult, StepRecord
from ...workload.types import Workload
from ..flags.engine import engine_specs_from_args
from ..flags.scheduler import planner_configs, planner_flags
from ..flags.workload import workload_from_args
from .console import output_console, print_engine, print_unfit, print_workload, report, why


def run_planner(args: argparse.Namespace) -> int:
    """Run the planner on every configuration and engine the flags give, and report."""
    module = resolve_backend(args.backend)
    configs = planner_configs(args)
    if args.steps_csv is not None and len(configs) != 1:
        raise UsageError(
            f"argument --steps-csv: records one configuration, got {len(configs)}; give one"
            " value to each of --chunk-size, --token-budget and --max-prefills-per-step"
        )
    workload = workload_from_args(args)
    unfit: list[str] = []
    specs = engine_specs_from_args(args, unfit)
    if args.steps_csv is not None and len(specs) != 1:
        raise UsageError(
            f"argument --steps-csv: records one engine, got {len(specs)}; give one --engine,"
            " or one --gpu and one --tp"
        )
    try:
        check_configs(workload, configs, backend=module, max_steps=args.max_steps)
    except ConfigError as err:
        raise UsageError(f"{planner_flags(err.config)}: {err.problem}") from None
    console = output_console()
    if not args.quiet and not args.json:
        print_workload(console, workload)
        for spec in specs:
            print_engine(console, spec.model)
        print_unfit(console, unfit)
    err_console = pipe_console(stderr=True)
    show_progress = not args.quiet and err_console.is_terminal
    started = time.perf_counter()
    results: list[SimResult] = []
    for spec in specs:
        if show_progress:
            name = f"{spec.name}: " if len(specs) > 1 else ""
            results += simulate_with_progress(
                workload, configs, spec.model, module, args, err_console, name
            )
        else:
            results += simulate(
                workload,
                configs,
                engine=spec.model,
                backend=module,
                stall_threshold_s=args.stall_threshold,
                max_steps=args.max_steps,
                record_steps=args.steps_csv is not None,
            )
    if args.steps_csv is not None:
        write_steps(args.steps_csv, results[0].step_log)
    wall = time.perf_counter() - started
    return report(args, console, results, workload, wall, f"{backend_name(module)} backend")


def simulate_with_progress(
    workload: Workload,
    configs: Sequence[Any],
    engine: StepTimeModel,
    module: Any,
    args: argparse.Namespace,
    console: Any,
    prefix: str = "",
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
            progress.add_task(prefix + cfg.label(), total=len(workload), start=False)
            for cfg in configs
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
            max_steps=args.max_steps,
            record_steps=args.steps_csv is not None,
        )


def write_steps(path: str, steps: Sequence[StepRecord] | None) -> None:
    from ...engines.fit import write_steps_csv

    assert steps is not None
    try:
        write_steps_csv(steps, path)
    except OSError as err:
        raise UsageError(f"argument --steps-csv: cannot write {path}: {why(err)}") from None
