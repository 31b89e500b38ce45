"""``chunked-prefill simulate``: the simulator's command line.

``add_parser(subparsers)`` adds the ``simulate`` subcommand to an argparse subparsers
object (and sets ``func=run`` on it); ``run(args)`` executes parsed arguments and returns
the exit status. ``main(argv)`` is a standalone entry point (``python -m
chunked_prefill.sim``).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .._args import (
    U64_MAX,
    ArgumentParser,
    UsageError,
    float_flag,
    int_flag,
    list_of,
    memory_message,
    one_line,
    show,
)
from .._output import check_output, check_outputs
from .._stop import reader_gone, stopping
from .engine import (
    DEFAULT_ENGINE,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    ENGINE_PRESETS,
    MAX_COEFFICIENT_S,
    KVMemory,
    ProfileError,
)
from .engines_cli import add_roofline_flags
from .fleet_cli import add_fleet_arguments, fleet_of
from .reading import overload_lines, reading_line
from .report import PLOT_HINT, PlotUnavailable, print_table, results_to_json
from .roofline import RooflineModel, StepTimeModel, roofline_line
from .search_engines import engine_specs, utilization
from .search_space import EngineSpec
from .serving import (
    ServingSimConfig,
    check_fits,
    expand_serving_configs,
    min_serving_steps,
    resolve_configs,
    simulate_serving,
)
from .simulator import (
    DEFAULT_CHUNK_SIZES,
    DEFAULT_STALL_THRESHOLD_S,
    ConfigError,
    SimConfig,
    SimResult,
    StepLimitError,
    StepRecord,
    backend_name,
    check_configs,
    expand_configs,
    resolve_backend,
    simulate,
)
from .steady import DEFAULT_DRAIN, DEFAULT_WARMUP
from .workload import (
    DEFAULT_RATE,
    DEFAULT_REQUESTS,
    LENGTH_DISTS,
    MAX_REQUESTS,
    MAX_TOKENS,
    TraceError,
    Workload,
    default_workload,
    load_trace,
)

__all__ = ["add_parser", "build_parser", "main", "run"]

PROG = "chunked-prefill simulate"

"""The most synthetic requests (``--requests``): the workload is held in memory."""
MIN_RATE = 1e-6
"""The lowest synthetic arrival rate (``--rate``), requests/s: ten million requests then
still arrive within 2**53 seconds."""
DEFAULT_MAX_STEPS = 10_000_000
"""``--max-steps`` unless told: about a minute or two of simulation per configuration."""
MAX_STEPS_LIMIT = 10**12
"""The largest ``--max-steps``."""
MAX_SEARCH_RATE = 1e300
"""The highest first rate of ``search --rate``: the search doubles it ten times, and every
rate and capacity it reports stays a finite number."""
MAX_GRID = 10_000
"""The most configurations one command runs (``simulate``) or searches (``search``): the
product of the distinct values of every comma list. Above it the command is refused before
anything runs; a larger grid takes hours and its list of configurations alone may not fit
in memory."""

GRID_FLAGS = (
    ("--chunk-size", "chunk_size"),
    ("--token-budget", "token_budget"),
    ("--max-prefills-per-step", "max_prefills_per_step"),
    ("--max-decode-tokens", "max_decode_tokens"),
    ("--max-running", "max_running"),
    ("--block-size", "block_size"),
    ("--num-blocks", "num_blocks"),
    ("--watermark", "watermark"),
    ("--prefix-caching", "prefix_caching"),
    ("--engine", "engine"),
    ("--gpu", "gpu"),
    ("--tp", "tp"),
    ("--replicas", "replicas"),
    ("--router", "router"),
)
"""The comma-list flags whose cross product is the grid (``search`` has all, ``simulate``
the scheduler's; a flag that is not a list there is not an axis)."""

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

_COUNT = int_flag(1, U64_MAX)
_COUNT_OR_NONE = int_flag(1, U64_MAX, none=True)
_SECONDS = float_flag(0.0, sys.float_info.max, what="seconds")
_COEFFICIENT = float_flag(0.0, MAX_COEFFICIENT_S, what="seconds")
_SCALE = float_flag(0.0, sys.float_info.max, low_open=True, what="a factor")
_SLO = float_flag(0.0, sys.float_info.max, low_open=True, what="seconds")
_CUT = float_flag(0.0, 0.5, high_open=True, what="a fraction")


def _on_off(text: str) -> bool:
    word = text.strip().lower()
    if word not in ("on", "off"):
        raise argparse.ArgumentTypeError(f"expected 'on' or 'off', got {show(text)}")
    return word == "on"


_on_off.__name__ = "'on' or 'off'"


def _configure(p: argparse.ArgumentParser) -> None:
    add_workload_flags(p)
    add_scheduler_flags(p)
    add_fleet_arguments(p)
    add_engine_flags(p)
    add_slo_flags(p)
    _add_output_flags(p)


def add_workload_flags(p: argparse.ArgumentParser, *, rate_help: str | None = None) -> None:
    """The workload flags (``--trace``, ``--requests``, ``--rate``, ...), shared with
    ``chunked-prefill search`` (which reads ``--rate`` as its first probed rate, so a
    ``rate_help`` there also bounds it by :data:`MAX_SEARCH_RATE`)."""
    w = p.add_argument_group("workload")
    w.add_argument(
        "--trace",
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


def add_scheduler_flags(p: argparse.ArgumentParser, *, planner: bool = True) -> None:
    """The scheduler option flags (comma lists) and ``--max-steps``; ``planner=False``
    leaves out ``--scheduler`` and the planner's ``--max-decode-tokens`` (and sets them to
    the serving scheduler's), for ``chunked-prefill search``."""
    s = p.add_argument_group(
        "scheduler (comma lists; the cross product is run; counts are 1 to 2**64 - 1)"
    )
    if not planner:
        p.set_defaults(scheduler="serving", max_decode_tokens=None)
    if planner:
        s.add_argument(
            "--scheduler",
            choices=("serving", "planner"),
            default="serving",
            help="serving: the serving scheduler with its KV-block pool, prefix caching and"
            " preemption (memory-true); planner: the original planner, no memory limit, as the"
            " simulator before it (default: %(default)s)",
        )
    s.add_argument(
        "--chunk-size",
        type=list_of(_COUNT_OR_NONE),
        metavar="LIST",
        help="most prompt tokens per request per step, like vLLM's"
        " long_prefill_token_threshold; 'none' = whole prompt in one step (default: the"
        " serving scheduler's equals each token budget; the planner's 256,512,2048,none)",
    )
    s.add_argument(
        "--token-budget",
        type=list_of(_COUNT_OR_NONE),
        metavar="LIST",
        help="tokens (decode + prefill) per step, like vLLM's max_num_batched_tokens; 'none':"
        " the planner's one-chunk rule, or no budget for the serving scheduler (room for"
        " every decode and a whole chunk) (default: 2048 for serving, none for planner)",
    )
    s.add_argument(
        "--max-prefills-per-step",
        type=list_of(_COUNT),
        metavar="LIST",
        help="requests that may get a chunk in one step; the planner's needs a token budget"
        " (default: 4 for serving, 1 for planner)",
    )
    if planner:
        s.add_argument(
            "--max-decode-tokens",
            type=list_of(_COUNT),
            metavar="LIST",
            help="planner only: most decode tokens per step (default: 128); the serving"
            " scheduler decodes every running request each step",
        )
    s.add_argument(
        "--max-running",
        type=list_of(_COUNT),
        default=[256],
        metavar="LIST",
        help="most requests running at once, like vLLM's max_num_seqs (default: 256)",
    )
    s.add_argument(
        "--block-size",
        type=list_of(_COUNT),
        metavar="LIST",
        help="serving only: tokens per KV-cache block (default: 16)",
    )
    s.add_argument(
        "--num-blocks",
        type=list_of(_COUNT),
        metavar="LIST",
        help="serving only: KV-cache blocks in the pool (default: derived from the GPU memory"
        " of the --engine preset, see --gpu-memory-utilization)",
    )
    s.add_argument(
        "--watermark",
        type=list_of(float_flag(0.0, 1.0, high_open=True, what="a fraction")),
        metavar="LIST",
        help="serving only: fraction of the pool admission keeps free (default: 0)",
    )
    s.add_argument(
        "--prefix-caching",
        type=list_of(_on_off),
        metavar="LIST",
        help="serving only: on or off (default: on)",
    )
    s.add_argument(
        "--max-steps",
        type=int_flag(1, MAX_STEPS_LIMIT),
        default=DEFAULT_MAX_STEPS,
        metavar="N",
        help="refuse a configuration that needs more than N engine steps: checked from the"
        " workload before anything runs, and enforced while running, so that a huge scale"
        " cannot hang the run; about 100 000 steps take a second (default: %(default)s)",
    )


def _preset(text: str) -> str:
    name = text.strip()
    if name not in ENGINE_PRESETS:
        raise argparse.ArgumentTypeError(
            f"expected one of {', '.join(sorted(ENGINE_PRESETS))}, got {show(text)}"
        )
    return name


_preset.__name__ = "an engine preset"


def add_engine_flags(p: argparse.ArgumentParser, *, overrides: bool = True) -> None:
    """The engine model flags: ``--engine`` (a comma list of presets), ``--profile``,
    coefficient overrides, ``--gpu-memory-utilization`` and the roofline flags
    (:func:`~.engines_cli.add_roofline_flags`; ``overrides=False`` leaves out its GPU
    datasheet overrides, for ``chunked-prefill search``)."""
    e = p.add_argument_group(
        f"engine model (coefficients in seconds, 0 to {MAX_COEFFICIENT_S:g}; each overrides"
        " the preset and --profile)"
    )
    e.add_argument(
        "--engine",
        type=list_of(_preset),
        default=None,
        metavar="LIST",
        help="coefficient and memory presets, a comma list of"
        f" {', '.join(sorted(ENGINE_PRESETS))} (default: llama2-7b-a100)",
    )
    e.add_argument(
        "--profile",
        metavar="FILE",
        help="TOML or JSON file of coefficients over the preset (keys: preset, name, t_min_s,"
        " c0_s, c_tok_s, c_attn_s, c_kv_s, c_chunk_sq_s), or a roofline profile that"
        " 'chunked-prefill fit --model M --gpu G --out FILE' wrote (kind = \"roofline\": its"
        " model, GPU and TP, KV memory included)",
    )
    e.add_argument(
        "--t-min",
        type=_COEFFICIENT,
        metavar="S",
        help=f"floor of the linear part (default: the preset's; {DEFAULT_ENGINE.t_min_s:g} for"
        f" {DEFAULT_ENGINE.name})",
    )
    e.add_argument(
        "--c0",
        type=_COEFFICIENT,
        metavar="S",
        help=f"fixed cost per step (default: the preset's; {DEFAULT_ENGINE.c0_s:g} for"
        f" {DEFAULT_ENGINE.name})",
    )
    e.add_argument(
        "--c-tok",
        type=_COEFFICIENT,
        metavar="S",
        help=f"cost per batched token (default: the preset's; {DEFAULT_ENGINE.c_tok_s:g} for"
        f" {DEFAULT_ENGINE.name})",
    )
    e.add_argument(
        "--c-attn",
        type=_COEFFICIENT,
        metavar="S",
        help=f"cost per prefill (q, k) pair (default: the preset's; {DEFAULT_ENGINE.c_attn_s:g} for"
        f" {DEFAULT_ENGINE.name})",
    )
    e.add_argument(
        "--c-kv",
        type=_COEFFICIENT,
        metavar="S",
        help=f"cost per decode context token (default: the preset's; {DEFAULT_ENGINE.c_kv_s:g} for"
        f" {DEFAULT_ENGINE.name})",
    )
    e.add_argument(
        "--c-chunk-sq",
        type=_COEFFICIENT,
        metavar="S",
        help="cost per squared token of each prefill chunk (default: the preset's;"
        f" {DEFAULT_ENGINE.c_chunk_sq_s:g} for {DEFAULT_ENGINE.name})",
    )

    e.add_argument(
        "--gpu-memory-utilization",
        type=float_flag(0.0, 1.0, low_open=True, what="a fraction"),
        metavar="F",
        help="serving only: fraction of the GPU's memory the engine may use; the KV pool is"
        " that minus the weights and an activation reserve (default:"
        f" {DEFAULT_GPU_MEMORY_UTILIZATION:g})",
    )

    add_roofline_flags(p, overrides=overrides)


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


def _add_output_flags(p: argparse.ArgumentParser) -> None:
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


def workload_from_args(args: argparse.Namespace, *, rate: bool = True) -> Workload:
    """The workload the workload flags describe; ``rate=False`` leaves a trace's arrivals
    as they are (``chunked-prefill search`` rescales them itself)."""
    if args.trace is not None:
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
    else:
        if args.hash_block is not None:
            raise UsageError("argument --hash-block: applies to a --trace with hash_ids")
        if args.prefix_groups is not None and not args.prefix_tokens:
            raise UsageError("argument --prefix-groups: needs --prefix-tokens N (N > 0)")
        dist = args.length_dist or "chat"
        if args.range_ratio is not None and dist != "uniform":
            raise UsageError(
                f"argument --range-ratio: applies to --length-dist uniform, not {dist}"
            )
        for flag, value, scale, scale_flag in (
            ("--input-len", args.input_len, args.prompt_scale, "--prompt-scale"),
            ("--output-len", args.output_len, args.output_scale, "--output-scale"),
        ):
            if value is not None and scale != 1.0:
                raise UsageError(
                    f"argument {scale_flag}: not with {flag}, which sets the mean length itself"
                )
        try:
            wl = default_workload(
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
    try:
        wl = wl.scaled(args.prompt_scale, 1.0)
    except ValueError as err:
        raise UsageError(f"argument --prompt-scale: {err}") from None
    try:
        return wl.scaled(1.0, args.output_scale)
    except ValueError as err:
        raise UsageError(f"argument --output-scale: {err}") from None


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


def _engine_specs(args: argparse.Namespace, unfit: list[str]) -> list[EngineSpec]:
    """The engines the flags ask for: a roofline ``--profile``'s, the roofline of
    ``--model`` on each ``--gpu`` at each ``--tp`` that fits (the others appended to
    ``unfit``), else each linear ``--engine`` preset (with ``--profile`` and overrides)."""
    return engine_specs(args, model_flag="--model", unfit=unfit)


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
    except (UsageError, TraceError, ProfileError, ValueError) as err:
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


_SERVING_ONLY = (
    ("--hash-block", "hash_block"),
    ("--prefix-tokens", "prefix_tokens"),
    ("--prefix-groups", "prefix_groups"),
    ("--turns", "turns"),
    ("--block-size", "block_size"),
    ("--num-blocks", "num_blocks"),
    ("--watermark", "watermark"),
    ("--prefix-caching", "prefix_caching"),
    ("--gpu-memory-utilization", "gpu_memory_utilization"),
    ("--slo-ttft", "slo_ttft"),
    ("--slo-tpot", "slo_tpot"),
    ("--slo-tbt", "slo_tbt"),
    ("--replicas", "replicas"),
    ("--router", "router"),
)


def check_grid(args: argparse.Namespace) -> None:
    """Refuse, before any list is expanded, a grid of more than :data:`MAX_GRID`
    configurations, naming the comma lists that make it."""
    axes = [
        (flag, len(set(value)))
        for flag, name in GRID_FLAGS
        if isinstance(value := getattr(args, name, None), list) and len(value) > 1
    ]
    size = math.prod(n for _, n in axes)
    if size > MAX_GRID:
        flags = ", ".join(flag for flag, _ in axes)
        counts = " x ".join(str(n) for _, n in axes)
        raise UsageError(
            f"arguments {flags}: their comma lists make {size} configurations ({counts}"
            f" distinct values), above the limit of {MAX_GRID}; give fewer values"
        )


DEFAULT_BUDGETS = (512, 2048, 8192)
"""The serving scheduler's default comparison: these token budgets (vLLM's
``max_num_batched_tokens``), each with the chunk size equal to it."""


def _configs(args: argparse.Namespace) -> list[SimConfig]:
    for flag, name in _SERVING_ONLY:
        if getattr(args, name) is not None:
            raise UsageError(f"argument {flag}: applies to --scheduler serving, not planner")
    return expand_configs(
        args.chunk_size if args.chunk_size is not None else DEFAULT_CHUNK_SIZES,
        args.token_budget if args.token_budget is not None else [None],
        args.max_prefills_per_step if args.max_prefills_per_step is not None else [1],
        args.max_decode_tokens if args.max_decode_tokens is not None else [128],
        args.max_running,
    )


def serving_configs_from_args(args: argparse.Namespace) -> list[ServingSimConfig]:
    """The serving configurations of the scheduler flags (their cross product)."""
    if args.max_decode_tokens is not None:
        raise UsageError(
            "argument --max-decode-tokens: applies to --scheduler planner; the serving"
            " scheduler decodes every running request in each step"
        )
    rest = (
        args.max_prefills_per_step or [4],
        args.max_running,
        args.block_size or [16],
        args.num_blocks or [None],
        args.watermark or [0.0],
        args.prefix_caching or [True],
    )
    if args.chunk_size is not None:
        budgets = args.token_budget if args.token_budget is not None else [2048]
        return expand_serving_configs(args.chunk_size, budgets, *rest)
    # No chunk size: each budget's chunk is the budget itself (vLLM's default, where one
    # prefill may take the whole step), so the rows differ in the budget alone.
    budgets = args.token_budget if args.token_budget is not None else list(DEFAULT_BUDGETS)
    out: list[ServingSimConfig] = []
    for budget in budgets:
        out += [c for c in expand_serving_configs([budget], [budget], *rest) if c not in out]
    return out


def _serving_flags(cfg: ServingSimConfig) -> str:
    """The flags that give ``cfg``, for a message about it."""
    parts = [f"--chunk-size {'none' if cfg.chunk_size is None else cfg.chunk_size}"]
    if cfg.token_budget is not None:
        parts.append(f"--token-budget {cfg.token_budget}")
    parts.append(f"--max-prefills-per-step {cfg.max_prefills_per_step}")
    parts.append(f"--max-running {cfg.max_running}")
    parts.append(f"--block-size {cfg.block_size}")
    if cfg.num_blocks is not None:
        parts.append(f"--num-blocks {cfg.num_blocks}")
    if cfg.watermark:
        parts.append(f"--watermark {cfg.watermark:g}")
    return "the configuration " + " ".join(parts)


def _flags(cfg: SimConfig) -> str:
    """The flags that give ``cfg``, for a message about it."""
    d = cfg.to_dict()
    parts = [f"--chunk-size {'none' if d['chunk_size'] is None else d['chunk_size']}"]
    if d["token_budget"] is not None:
        parts.append(f"--token-budget {d['token_budget']}")
    if d["max_prefills_per_step"] != 1:
        parts.append(f"--max-prefills-per-step {d['max_prefills_per_step']}")
    parts.append(f"--max-decode-tokens {d['max_decode_tokens']}")
    return "the configuration " + " ".join(parts)


def check_output_paths(args: argparse.Namespace) -> None:
    """Refuse, before anything runs, an output path that cannot be written: ``--plot``
    and ``--steps-csv`` (when the command has it), or both naming one file."""
    if args.plot is not None:
        check_plot_path(args.plot)
    check_outputs([("--plot", args.plot), ("--steps-csv", getattr(args, "steps_csv", None))])


def _run(args: argparse.Namespace) -> int:
    from .._stop import pipe_console as Console

    check_grid(args)
    check_output_paths(args)
    if args.scheduler == "serving":
        if args.steps_csv is not None:
            raise UsageError(
                "argument --steps-csv: needs --scheduler planner (the serving loop runs in the"
                " Rust core and records no steps)"
            )
        return _run_serving(args)
    module = resolve_backend(args.backend)
    configs = _configs(args)
    if args.steps_csv is not None and len(configs) != 1:
        raise UsageError(
            f"argument --steps-csv: records one configuration, got {len(configs)}; give one"
            " value to each of --chunk-size, --token-budget and --max-prefills-per-step"
        )
    workload = workload_from_args(args)
    unfit: list[str] = []
    specs = _engine_specs(args, unfit)
    if args.steps_csv is not None and len(specs) != 1:
        raise UsageError(
            f"argument --steps-csv: records one engine, got {len(specs)}; give one --engine,"
            " or one --gpu and one --tp"
        )
    try:
        check_configs(workload, configs, backend=module, max_steps=args.max_steps)
    except ConfigError as err:
        raise UsageError(f"{_flags(err.config)}: {err.problem}") from None
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=160)
    if not args.quiet and not args.json:
        _print_workload(console, workload)
        for spec in specs:
            _print_engine(console, spec.model)
        _print_unfit(console, unfit)
    err_console = Console(stderr=True)
    show_progress = not args.quiet and err_console.is_terminal
    started = time.perf_counter()
    results: list[SimResult] = []
    for spec in specs:
        if show_progress:
            name = f"{spec.name}: " if len(specs) > 1 else ""
            results += _simulate_with_progress(
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
        _write_steps(args.steps_csv, results[0].step_log)
    wall = time.perf_counter() - started
    return _report(args, console, results, workload, wall, f"{backend_name(module)} backend")


def _serving_backend(name: str) -> str:
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
    from ..pure_serving import ServingConfig

    for cfg, options in zip(configs, resolved):
        what = _serving_flags(cfg)
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
                f"{_serving_flags(cfg)}: {text}; raise --num-blocks or"
                f" --gpu-memory-utilization{lower}, or shorten the request"
            ) from None
        steps, reason = min_serving_steps(workload, options)
        if steps > args.max_steps:
            raise StepLimitError(cfg, steps, args.max_steps, reason, estimated=True)


def _run_serving(args: argparse.Namespace) -> int:
    from .._stop import pipe_console as Console

    backend = _serving_backend(args.backend)
    workload = workload_from_args(args)
    unfit: list[str] = []
    specs = _engine_specs(args, unfit)
    configs = serving_configs_from_args(args)
    util = utilization(args)
    for spec in specs:
        check_serving_configs(args, workload, configs, spec.model, spec.memory, util)
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=160)
    if not args.quiet and not args.json:
        _print_workload(console, workload)
        for spec in specs:
            _print_pool(console, spec, configs, util)
        _print_unfit(console, unfit)
        if any(workload.cached_tokens) and not workload.shares_tokens:
            console.print(
                "[dim]note: the serving scheduler finds prefix-cache hits itself and ignores"
                " the trace's cached_tokens column (--scheduler planner honours it)[/]",
                highlight=False,
                soft_wrap=True,
            )
    replicas, router = fleet_of(args)
    if not args.quiet and not args.json and (args.replicas or args.router):
        console.print(
            f"[bold]fleet[/]: {replicas} replica(s), {router} router",
            highlight=False,
            soft_wrap=True,
        )
    started = time.perf_counter()
    err_console = Console(stderr=True)
    show_progress = not args.quiet and err_console.is_terminal
    results: list[SimResult] = []
    for spec in specs:
        name = f"{spec.name}: " if len(specs) > 1 else ""
        with _serving_progress(configs, show_progress, err_console, name) as bar:
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
    return _report(args, console, results, workload, wall, f"serving scheduler, {backend} loop")


def _print_pool(
    console: Any, spec: EngineSpec, configs: Sequence[ServingSimConfig], util: float
) -> None:
    """The engine line of ``spec`` (with the first configuration's KV pool) and a line
    for each distinct KV pool of ``configs``."""
    first = configs[0]
    pool = first.num_blocks or spec.memory.num_blocks(first.block_size, util)
    _print_engine(console, spec.model, f"{pool} KV blocks of {first.block_size} tokens")
    lines: list[str] = []
    for cfg in configs:
        if cfg.num_blocks is None:
            line = spec.memory.describe(cfg.block_size, util)
        else:
            line = f"{cfg.num_blocks} blocks of {cfg.block_size} tokens (--num-blocks)"
        if line not in lines:
            lines.append(line)
            console.print(f"[bold]KV cache[/]: {line}", highlight=False, soft_wrap=True)


def _print_unfit(console: Any, unfit: Sequence[str]) -> None:
    for line in unfit:
        console.print(
            f"[dim]note: left out, does not fit: {line}[/]", highlight=False, soft_wrap=True
        )


def _report(
    args: argparse.Namespace,
    console: Any,
    results: Sequence[Any],
    workload: Workload,
    wall: float,
    how: str,
) -> int:
    """Write the results of either scheduler: the plot, then JSON or the table."""
    if args.plot is not None:
        from .report import plot_cdfs

        try:
            plot_cdfs(results, args.plot, workload=workload.source)
        except OSError as err:
            raise UsageError(f"argument --plot: cannot write {args.plot}: {_why(err)}") from None
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


def _print_workload(console: Any, workload: Workload) -> None:
    summary = workload.summary()
    console.print(
        f"[bold]workload[/]: {summary['source']}; mean prompt"
        f" {summary['prompt_tokens_mean']:.0f} (max {summary['prompt_tokens_max']}) tokens,"
        f" mean output {summary['output_tokens_mean']:.0f} (max"
        f" {summary['output_tokens_max']}) tokens",
        highlight=False,
        soft_wrap=True,
    )


def _print_engine(console: Any, engine: StepTimeModel, blocks: str | None = None) -> None:
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


def _simulate_with_progress(
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


@contextlib.contextmanager
def _serving_progress(
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


def _write_steps(path: str, steps: Sequence[StepRecord] | None) -> None:
    from .fit import write_steps_csv

    assert steps is not None
    try:
        write_steps_csv(steps, path)
    except OSError as err:
        raise UsageError(f"argument --steps-csv: cannot write {path}: {_why(err)}") from None


def _why(err: OSError) -> str:
    return err.strerror or str(err)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``) as ``simulate`` options and run."""
    return stopping(PROG, lambda: run(build_parser().parse_args(argv)))
