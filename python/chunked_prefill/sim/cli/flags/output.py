"""The output flags of ``simulate`` and the checks of their paths before anything runs."""

from __future__ import annotations

import argparse
import os
import sys

from ...._args import (
    UsageError,
    float_flag,
)
from ...._output import check_output, check_outputs
from ...report.plots import PLOT_HINT
from ...runs.defaults import DEFAULT_STALL_THRESHOLD_S

_SECONDS = float_flag(0.0, sys.float_info.max, what="seconds")


def add_output_flags(p: argparse.ArgumentParser) -> None:
    o = p.add_argument_group("output")
    o.add_argument(
        "--json",
        action="store_true",
        help="print JSON instead of the table (a figure that is not a finite number, such"
        " as the throughput of a run too short to measure, is written as null)",
    )
    o.add_argument(
        "--plot",
        metavar="FILE",
        help="draw TTFT and TBT CDFs into FILE; its suffix names the format (.png, .pdf,"
        " .svg, ...); needs matplotlib, the plot extra",
    )
    o.add_argument(
        "--steps-csv",
        metavar="FILE",
        help="write every step of the run as CSV for 'chunked-prefill fit' (planner"
        " scheduler and one configuration only)",
    )
    o.add_argument(
        "--quiet",
        action="store_true",
        help="no progress bar and no notes (the progress bar is drawn only when stderr is"
        " a terminal)",
    )
    o.add_argument(
        "--stall-threshold",
        type=_SECONDS,
        default=DEFAULT_STALL_THRESHOLD_S,
        metavar="S",
        help="a TBT gap above this many seconds is a stall (default: %(default)s)",
    )
    o.add_argument(
        "--backend",
        choices=("auto", "rust", "pure"),
        default="auto",
        help="scheduler implementation (default: %(default)s = rust when built)",
    )


def check_plot_path(path: str) -> None:
    """Refuse ``--plot PATH`` before simulating: matplotlib missing, no or an unknown
    suffix (matplotlib would pick the format, or add ``.png`` to the name), a path that
    cannot be written (:func:`~.._output.check_output`)."""
    try:
        import matplotlib  # noqa: F401  (first: a cached submodule would hide its absence)
        from matplotlib.backends.backend_agg import FigureCanvasAgg
    except ImportError:
        raise UsageError(f"argument --plot: needs matplotlib; {PLOT_HINT}") from None
    check_output(path, "--plot")
    formats = sorted(FigureCanvasAgg.get_supported_filetypes())
    suffix = os.path.splitext(path)[1].lower()
    known = ", ".join("." + f for f in formats)
    if not suffix:
        raise UsageError(
            f"argument --plot: {path!r} has no suffix to name the image format; use one of {known}"
        )
    if suffix[1:] not in formats:
        raise UsageError(
            f"argument --plot: {path!r}: unsupported image format {suffix!r}; use one of {known}"
        )


def check_output_paths(args: argparse.Namespace) -> None:
    """Refuse, before anything runs, an output path that cannot be written: ``--plot``
    and ``--steps-csv`` (when the command has it), or both naming one file."""
    if args.plot is not None:
        check_plot_path(args.plot)
    check_outputs([("--plot", args.plot), ("--steps-csv", getattr(args, "steps_csv", None))])
