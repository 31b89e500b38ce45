"""The per-request SLO flags and the steady window (``--warmup``, ``--drain``)."""

from __future__ import annotations

import argparse
import sys

from ...._args import (
    float_flag,
)
from ...runs.defaults import DEFAULT_DRAIN, DEFAULT_WARMUP

_SLO = float_flag(0.0, sys.float_info.max, low_open=True, what="seconds")


_CUT = float_flag(0.0, 0.5, high_open=True, what="a fraction")


def add_slo_flags(p: argparse.ArgumentParser) -> None:
    """The per-request SLO flags (``--slo-ttft``, ``--slo-tpot``, ``--slo-tbt``)."""
    g = p.add_argument_group(
        "SLOs (serving only; per request, as vLLM's benchmark goodput: a request meets the"
        " SLOs when it meets every one given)"
    )
    g.add_argument(
        "--slo-ttft",
        type=_SLO,
        metavar="S",
        help="time to first token, seconds",
    )
    g.add_argument(
        "--slo-tpot",
        type=_SLO,
        metavar="S",
        help="mean time per output token after the first, seconds",
    )
    g.add_argument(
        "--slo-tbt",
        type=_SLO,
        metavar="S",
        help="a limit on every gap between two of its tokens, seconds: one gap over it fails"
        " the request, so attainment hangs on rare long steps (vLLM's benchmarks use TPOT)",
    )
    g.add_argument(
        "--warmup",
        type=_CUT,
        default=DEFAULT_WARMUP,
        metavar="F",
        help="fraction of requests, the first arrivals, left out of SLO attainment, goodput"
        f" and the steady rates (default: {DEFAULT_WARMUP:g})",
    )
    g.add_argument(
        "--drain",
        type=_CUT,
        default=DEFAULT_DRAIN,
        metavar="F",
        help=f"the same for the last arrivals (default: {DEFAULT_DRAIN:g})",
    )
