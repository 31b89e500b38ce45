"""The workload flags (``--trace``, ``--requests``, ``--rate``, ...) of ``simulate`` and
``search``, and the workload they describe."""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from ...._args import (
    U64_MAX,
    UsageError,
    float_flag,
    input_file,
    int_flag,
)
from ...workload.synthetic import (
    DEFAULT_RATE,
    DEFAULT_REQUESTS,
    LENGTH_DISTS,
    MAX_REQUESTS,
    default_workload,
)
from ...workload.types import MAX_TOKENS, Workload

MIN_RATE = 1e-6
"""The lowest synthetic arrival rate (``--rate``), requests/s: ten million requests then
still arrive within 2**53 seconds."""


MAX_SEARCH_RATE = 1e300
"""The highest first rate of ``search --rate``: the search doubles it ten times, and every
rate and capacity it reports stays a finite number."""


_SCALE = float_flag(0.0, sys.float_info.max, low_open=True, what="a factor")


def add_workload_flags(p: argparse.ArgumentParser, *, rate_help: str | None = None) -> None:
    """The workload flags (``--trace``, ``--requests``, ``--rate``, ...), shared with
    ``chunked-prefill search`` (which reads ``--rate`` as its first probed rate, so a
    ``rate_help`` there also bounds it by :data:`MAX_SEARCH_RATE`)."""
    w = p.add_argument_group("workload")
    _add_source_flags(w, rate_help)
    _add_prefix_flags(w)
    _add_length_flags(w)


def _add_source_flags(w: Any, rate_help: str | None) -> None:
    """Where the requests come from: a trace or the synthetic workload, how many, how fast."""
    w.add_argument(
        "--trace",
        type=input_file,
        metavar="FILE",
        help="replay a CSV or JSON Lines trace instead of the synthetic workload (default:"
        " the synthetic workload)",
    )
    w.add_argument(
        "--time-unit",
        choices=("s", "ms", "us"),
        default="s",
        help="unit of numeric arrival times in --trace (default: %(default)s)",
    )
    w.add_argument(
        "--requests",
        type=int_flag(1, MAX_REQUESTS),
        metavar="N",
        help=f"synthetic requests, 1 to {MAX_REQUESTS} (default: {DEFAULT_REQUESTS}); with"
        " --trace, replay the first N rows (default: all)",
    )
    w.add_argument(
        "--rate",
        type=float_flag(MIN_RATE, MAX_SEARCH_RATE if rate_help else math.inf, what="requests/s"),
        metavar="R",
        help=rate_help
        or f"Poisson arrival rate, requests/s, at least {MIN_RATE:g}, or 'inf' for all at t=0;"
        f" with --trace, rescale its arrivals to this mean rate (default: {DEFAULT_RATE:g},"
        " a trace's own)",
    )
    w.add_argument(
        "--seed",
        type=int_flag(0, U64_MAX),
        metavar="S",
        help="synthetic workload seed, 0 to 2**64 - 1 (default: 0)",
    )


def _add_prefix_flags(w: Any) -> None:
    """What the requests share: a prefix per group, or the turns of a session."""
    w.add_argument(
        "--prefix-tokens",
        type=int_flag(0, MAX_TOKENS),
        metavar="N",
        help="serving only: every prompt starts with its group's N shared tokens, like a"
        " system prompt, before the drawn length; with --trace, rows with the same prefix_id"
        " share their first N tokens (default: 0)",
    )
    w.add_argument(
        "--hash-block",
        type=int_flag(1, MAX_TOKENS),
        metavar="N",
        help="serving, --trace only: tokens per block hash of the trace's hash_ids column"
        " (default: 512, Mooncake's)",
    )
    w.add_argument(
        "--prefix-groups",
        type=int_flag(1, MAX_TOKENS),
        metavar="G",
        help="serving, synthetic only: requests are spread over G groups with distinct"
        " prefixes (default: 1)",
    )
    w.add_argument(
        "--turns",
        type=int_flag(1, MAX_TOKENS),
        metavar="T",
        help="serving, synthetic only: sessions of T turns, each turn's prompt extending the"
        " previous turn's prompt and output (default: 1)",
    )


def _add_length_flags(w: Any) -> None:
    """The synthetic lengths and the scale factors of either workload."""
    w.add_argument(
        "--input-len",
        type=int_flag(1, 2**53),
        metavar="N",
        help="synthetic only: mean prompt tokens (default: the chat workload's own; 1024 for"
        " the other --length-dist)",
    )
    w.add_argument(
        "--output-len",
        type=int_flag(1, 2**53),
        metavar="N",
        help="synthetic only: mean output tokens (default: the chat workload's own; 128 for"
        " the other --length-dist)",
    )
    w.add_argument(
        "--length-dist",
        choices=LENGTH_DISTS,
        metavar="DIST",
        help="synthetic only: chat (lognormal, stretched to --input-len/--output-len),"
        " fixed, uniform (vLLM's random dataset, see --range-ratio) or exponential"
        " (default: chat)",
    )
    w.add_argument(
        "--range-ratio",
        type=float_flag(0.0, 1.0, high_open=True),
        metavar="R",
        help="--length-dist uniform: lengths in [floor(N (1 - R)), ceil(N (1 + R))], R in"
        " [0, 1) (default: 0.5)",
    )
    w.add_argument(
        "--prompt-scale",
        type=_SCALE,
        default=1.0,
        metavar="X",
        help="multiply prompt lengths, rounded (default: %(default)s)",
    )
    w.add_argument(
        "--output-scale",
        type=_SCALE,
        default=1.0,
        metavar="X",
        help="multiply output lengths, rounded (default: %(default)s)",
    )


def workload_from_args(args: argparse.Namespace, *, rate: bool = True) -> Workload:
    """The workload the workload flags describe; ``rate=False`` leaves a trace's arrivals
    as they are (``chunked-prefill search`` rescales them itself)."""
    wl = _trace(args, rate) if args.trace is not None else _synthetic(args)
    try:
        wl = wl.scaled(args.prompt_scale, 1.0)
    except ValueError as err:
        raise UsageError(f"argument --prompt-scale: {err}") from None
    try:
        return wl.scaled(1.0, args.output_scale)
    except ValueError as err:
        raise UsageError(f"argument --output-scale: {err}") from None


def _trace(args: argparse.Namespace, rate: bool) -> Workload:
    """The ``--trace`` workload, its first ``--requests`` rows at ``--rate`` (when given
    and ``rate``); the synthetic workload's flags refused."""
    for flag, value in (
        ("--seed", args.seed),
        ("--prefix-groups", args.prefix_groups),
        ("--turns", args.turns),
        ("--input-len", args.input_len),
        ("--output-len", args.output_len),
        ("--length-dist", args.length_dist),
        ("--range-ratio", args.range_ratio),
    ):
        if value is not None:
            raise UsageError(f"{flag} applies to the synthetic workload, not to --trace")
    from ...workload.trace import TraceError, load_trace

    try:
        wl = load_trace(
            args.trace,
            time_unit=args.time_unit,
            hash_block=args.hash_block or 512,
            prefix_tokens=args.prefix_tokens or 0,
        )
    except TraceError as err:
        raise UsageError(f"argument --trace: {err}") from None
    if args.prefix_tokens and not wl.group:
        raise UsageError(
            f"argument --prefix-tokens: {args.trace} has no prefix_id column to say"
            " which rows share a prefix"
        )
    if args.requests is not None:
        wl = wl.head(args.requests)
    if rate and args.rate is not None:
        try:
            wl = wl.at_rate(args.rate)
        except ValueError as err:
            raise UsageError(f"argument --rate: {err}") from None
    return wl


def _synthetic(args: argparse.Namespace) -> Workload:
    """The synthetic workload of the flags; the trace's ``--hash-block`` refused, and the
    flags that contradict each other."""
    if args.hash_block is not None:
        raise UsageError("argument --hash-block: applies to a --trace with hash_ids")
    if args.prefix_groups is not None and not args.prefix_tokens:
        raise UsageError("argument --prefix-groups: needs --prefix-tokens N (N > 0)")
    dist = args.length_dist or "chat"
    if args.range_ratio is not None and dist != "uniform":
        raise UsageError(f"argument --range-ratio: applies to --length-dist uniform, not {dist}")
    for flag, value, scale, scale_flag in (
        ("--input-len", args.input_len, args.prompt_scale, "--prompt-scale"),
        ("--output-len", args.output_len, args.output_scale, "--output-scale"),
    ):
        if value is not None and scale != 1.0:
            raise UsageError(
                f"argument {scale_flag}: not with {flag}, which sets the mean length itself"
            )
    try:
        return default_workload(
            args.requests if args.requests is not None else DEFAULT_REQUESTS,
            rate=args.rate if args.rate is not None else DEFAULT_RATE,
            seed=args.seed if args.seed is not None else 0,
            prefix_tokens=args.prefix_tokens or 0,
            prefix_groups=args.prefix_groups or 1,
            turns=args.turns or 1,
            input_len=args.input_len,
            output_len=args.output_len,
            length_dist=dist,
            range_ratio=args.range_ratio,
        )
    except ValueError as err:
        raise synthetic_error(args, err) from None


def synthetic_error(args: argparse.Namespace, err: ValueError) -> UsageError:
    """The error of a synthetic workload that cannot be drawn (a prompt past 2**63 - 1
    tokens once the shared prefix or the previous turns are added), naming the flags that
    shape it."""
    given = [
        flag
        for flag, value in (("--prefix-tokens", args.prefix_tokens), ("--turns", args.turns))
        if value is not None
    ]
    flags = ", ".join(given) or "--requests"
    return UsageError(
        f"argument{'s' if len(given) > 1 else ''} {flags}: the synthetic workload: {err}"
    )
