"""``chunked-prefill simulate``: the simulator's command line.

``add_parser(subparsers)`` adds the ``simulate`` subcommand to an argparse subparsers
object (and sets ``func=run`` on it); ``run(args)`` executes parsed arguments and returns
the exit status. ``main(argv)`` is a standalone entry point (``python -m
chunked_prefill.sim``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from ...._args import ArgumentParser, UsageError, memory_message, one_line
from ...._stop import reader_gone, stopping
from ...report.plots import PLOT_HINT, PlotUnavailable
from ...runs.errors import StepLimitError
from ...workload.types import MAX_TOKENS
from ..flags.engine import add_engine_flags
from ..flags.fleet import add_fleet_arguments
from ..flags.output import add_output_flags, check_output_paths
from ..flags.scheduler import add_scheduler_flags, check_grid
from ..flags.slo import add_slo_flags
from ..flags.workload import add_workload_flags

__all__ = ["PROG", "add_parser", "build_parser", "main", "run"]

PROG = "chunked-prefill simulate"


_DESCRIPTION = """\
Replay a workload through a real scheduler against a model of the engine (step latency and
KV-cache memory), and report the TTFT, TBT, end-to-end latency, queueing, preemptions,
prefix-cache hits, KV usage and goodput each configuration gives. By default the serving
scheduler (KV-block pool, prefix caching, preemption) runs in the Rust core's loop;
--scheduler planner runs the original planner without a memory limit. TBT (time between
tokens) is what vLLM's benchmarks call ITL (inter-token latency).

With no arguments: the embedded synthetic chat workload (1000 requests, Poisson arrivals
at 6 req/s, heavy-tailed prompt and output lengths) on Llama-2-7B / A100 coefficients
with the KV pool its 80 GB leave, comparing chunk sizes 256, 512, 2048 and none (whole
prompts in one step) under a 2048-token budget.

Every scheduler option takes a comma list; the configurations run are the cross product
of all lists (options that do not apply are dropped, duplicates removed)."""


_EPILOG = f"""\
step time model (linear engines): max(t_min, c0 + c_tok*(prefill+decode tokens)) +
c_attn*(prefill (query, key) pairs) + c_kv*(context tokens of the decode requests) +
c_chunk_sq*(sum over the step's chunks of their tokens squared), in seconds; --model
--gpu gives a roofline instead (docs/engines.md).
SLOs, goodput and the served rate are measured on the steady part: --warmup and --drain
leave out the first and last arrivals; a run that serves fewer requests than arrive is
flagged overloaded (docs/simulate.md).
Trace columns: arrival_s, prompt_tokens, output_tokens (+ optional cached_tokens,
priority, hash_ids, session_id, prefix_id, prefix_tokens); common public-trace names are
accepted as aliases. Token counts are whole numbers up to {MAX_TOKENS} (2**63 - 1); arrival
times up to 2**53 in --time-unit.

Every bad input is one line 'chunked-prefill simulate: error: ...' on stderr and exit
status 2, before anything is simulated."""


def _configure(p: argparse.ArgumentParser) -> None:
    add_workload_flags(p)
    add_scheduler_flags(p)
    add_fleet_arguments(p)
    add_engine_flags(p)
    add_slo_flags(p)
    add_output_flags(p)


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
    p = ArgumentParser(
        prog=PROG,
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _configure(p)
    return p


def run(args: argparse.Namespace) -> int:
    """Run the ``simulate`` subcommand on parsed ``args``; returns the exit status.

    A bad input prints one line ``chunked-prefill simulate: error: ...`` on stderr and
    returns 2.
    """
    try:
        return _run(args)
    except StepLimitError as err:
        print(
            f"{PROG}: error: argument --max-steps: {err}; raise --max-steps (now"
            f" {err.limit}) or shrink the workload (--prompt-scale, --output-scale)",
            file=sys.stderr,
        )
        return 2
    except (UsageError, ValueError) as err:  # TraceError, ProfileError, ... are ValueErrors
        print(f"{PROG}: error: {one_line(str(err))}", file=sys.stderr)
        return 2
    except MemoryError as err:  # the run needs more memory than there is
        print(f"{PROG}: error: {memory_message(err)}", file=sys.stderr)
        return 2
    except PlotUnavailable:
        hint = f"argument --plot: needs matplotlib; {PLOT_HINT}"
        print(f"{PROG}: error: {hint}", file=sys.stderr)
        return 2
    except OSError as err:  # a file that vanished or broke between its check and its use
        if reader_gone(err):  # `simulate --json | head`: stopping() ends it with 0
            raise
        print(f"{PROG}: error: {one_line(str(err))}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    check_grid(args)
    check_output_paths(args)
    if args.scheduler == "serving":
        if args.steps_csv is not None:
            raise UsageError(
                "argument --steps-csv: needs --scheduler planner (the serving loop runs in the"
                " Rust core and records no steps)"
            )
        from .serving import run_serving

        return run_serving(args)
    from .planner import run_planner

    return run_planner(args)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``) as ``simulate`` options and run."""
    return stopping(PROG, lambda: run(build_parser().parse_args(argv)))
