"""What ``simulate`` prints around its runs: the setup lines (workload, engine, KV pool) and
the report (plot, JSON or table, with the lines that read a serving table)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from ...._args import UsageError
from ...engines.roofline import RooflineModel, StepTimeModel, roofline_line
from ...engines.spec import EngineSpec
from ...report.reading import overload_lines, reading_line
from ...report.table import print_table
from ...report.to_json import results_to_json
from ...runs.serving import ServingSimConfig
from ...workload.types import Workload


def output_console() -> Any:
    """The console the report goes to: piped output gets 160 columns unless ``COLUMNS``
    says otherwise, so that a table is not wrapped to 80."""
    from ...._stop import pipe_console as Console

    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=160)
    return console


def print_pool(
    console: Any, spec: EngineSpec, configs: Sequence[ServingSimConfig], util: float
) -> None:
    """The engine line of ``spec`` (with the first configuration's KV pool) and a line
    for each distinct KV pool of ``configs``."""
    first = configs[0]
    pool = first.num_blocks or spec.memory.num_blocks(first.block_size, util)
    print_engine(console, spec.model, f"{pool} KV blocks of {first.block_size} tokens")
    lines: list[str] = []
    for cfg in configs:
        if cfg.num_blocks is None:
            line = spec.memory.describe(cfg.block_size, util)
        else:
            line = f"{cfg.num_blocks} blocks of {cfg.block_size} tokens (--num-blocks)"
        if line not in lines:
            lines.append(line)
            console.print(f"[bold]KV cache[/]: {line}", highlight=False, soft_wrap=True)


def print_unfit(console: Any, unfit: Sequence[str]) -> None:
    for line in unfit:
        console.print(
            f"[dim]note: left out, does not fit: {line}[/]", highlight=False, soft_wrap=True
        )


def report(
    args: argparse.Namespace,
    console: Any,
    results: Sequence[Any],
    workload: Workload,
    wall: float,
    how: str,
) -> int:
    """Write the results of either scheduler: the plot, then JSON or the table."""
    if args.plot is not None:
        from ...report.plots import plot_cdfs

        try:
            plot_cdfs(results, args.plot, workload=workload.source)
        except OSError as err:
            raise UsageError(f"argument --plot: cannot write {args.plot}: {why(err)}") from None
    if args.json:
        sys.stdout.write(results_to_json(results) + "\n")
        sys.stdout.flush()
        return 0
    print_table(results, console)
    if results and results[0].serving is not None:
        for line in [*overload_lines(results), reading_line(results)]:
            if line is not None:
                console.print(line, highlight=False)
    if not args.quiet:
        console.print(
            f"[dim]{len(results)} configuration(s) x {len(workload)} requests simulated in"
            f" {wall:.2f} s wall time ({how})"
            + (f"; plot written to {args.plot}" if args.plot else "")
            + "[/]",
            highlight=False,
        )
    return 0


def print_workload(console: Any, workload: Workload) -> None:
    summary = workload.summary()
    console.print(
        f"[bold]workload[/]: {summary['source']}; mean prompt"
        f" {summary['prompt_tokens_mean']:.0f} (max {summary['prompt_tokens_max']}) tokens,"
        f" mean output {summary['output_tokens_mean']:.0f} (max"
        f" {summary['output_tokens_max']}) tokens",
        highlight=False,
        soft_wrap=True,
    )


def print_engine(console: Any, engine: StepTimeModel, blocks: str | None = None) -> None:
    if isinstance(engine, RooflineModel):
        console.print(
            f"[bold]engine[/]: {roofline_line(engine, blocks)}", highlight=False, soft_wrap=True
        )
        return
    console.print(
        f"[bold]engine[/]: {engine.name}: max({engine.t_min_s * 1e3:g} ms,"
        f" {engine.c0_s * 1e3:g} ms + {engine.c_tok_s * 1e6:g} us/token)"
        f" + {engine.c_attn_s * 1e9:g} ns/(q,k) pair + {engine.c_kv_s * 1e6:g} us/context"
        f" token + {engine.c_chunk_sq_s * 1e9:g} ns/squared chunk token",
        highlight=False,
        soft_wrap=True,
    )


def why(err: OSError) -> str:
    return err.strerror or str(err)
