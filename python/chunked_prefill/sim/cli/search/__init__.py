"""``chunked-prefill search``: the capacity search's command line.

It shares the workload, scheduler, engine and SLO flags of ``simulate``
(:mod:`..simulate`); ``--rate`` is the first probed rate. ``add_parser(subparsers)`` adds the
subcommand; ``run(args)`` executes parsed arguments and returns the exit status.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ...._args import UsageError, float_flag, int_flag, list_of, memory_message, one_line, show
from ...._stop import reader_gone, terminate_raises
from ...report.plots import PLOT_HINT, PlotUnavailable
from ...runs.defaults import DEFAULT_STALL_THRESHOLD_S
from ...runs.errors import StepLimitError
from ...runs.router import MAX_REPLICAS, ROUTERS
from ...search.options import DEFAULT_ATTAINMENT, DEFAULT_PRECISION, RANK_BY
from ...workload.synthetic import DEFAULT_RATE
from ..flags.engine import add_engine_flags
from ..flags.scheduler import add_scheduler_flags
from ..flags.slo import add_slo_flags
from ..flags.workload import MAX_SEARCH_RATE, MIN_RATE, add_workload_flags

__all__ = ["PROG", "add_parser", "run"]


PROG = "chunked-prefill search"

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
            from .drive import run_search

            return run_search(args)
    except StepLimitError as err:
        message = f"argument --max-steps: {err}; raise --max-steps (now {err.limit})"
    except (UsageError, ValueError) as err:  # TraceError, ProfileError, ... are ValueErrors
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
