"""The scheduler flags (comma lists whose cross product is the grid), the grid's limit and
the configurations the flags give for either scheduler."""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING, Any

from ...._args import (
    U64_MAX,
    UsageError,
    float_flag,
    int_flag,
    list_of,
    show,
)

if TYPE_CHECKING:
    from ...runs.planner import SimConfig
    from ...runs.serving import ServingSimConfig

DEFAULT_MAX_STEPS = 10_000_000
"""``--max-steps`` unless told: about a minute or two of simulation per configuration."""


MAX_STEPS_LIMIT = 10**12
"""The largest ``--max-steps``."""


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


_COUNT = int_flag(1, U64_MAX)


_COUNT_OR_NONE = int_flag(1, U64_MAX, none=True)


def _on_off(text: str) -> bool:
    word = text.strip().lower()
    if word not in ("on", "off"):
        raise argparse.ArgumentTypeError(f"expected 'on' or 'off', got {show(text)}")
    return word == "on"


_on_off.__name__ = "'on' or 'off'"


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
    _add_batch_flags(s, planner)
    _add_pool_flags(s)
    s.add_argument(
        "--max-steps",
        type=int_flag(1, MAX_STEPS_LIMIT),
        default=DEFAULT_MAX_STEPS,
        metavar="N",
        help="refuse a configuration that needs more than N engine steps: checked from the"
        " workload before anything runs, and enforced while running, so that a huge scale"
        " cannot hang the run; about 100 000 steps take a second (default: %(default)s)",
    )


def _add_batch_flags(s: Any, planner: bool) -> None:
    """What one step may hold: chunk, token budget, prefills, decodes, running requests."""
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


def _add_pool_flags(s: Any) -> None:
    """The serving scheduler's KV-block pool: block size, blocks, watermark, prefix caching."""
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


def planner_configs(args: argparse.Namespace) -> list[SimConfig]:
    for flag, name in _SERVING_ONLY:
        if getattr(args, name) is not None:
            raise UsageError(f"argument {flag}: applies to --scheduler serving, not planner")
    from ...runs.planner import DEFAULT_CHUNK_SIZES, expand_configs

    return expand_configs(
        args.chunk_size if args.chunk_size is not None else DEFAULT_CHUNK_SIZES,
        args.token_budget if args.token_budget is not None else [None],
        args.max_prefills_per_step if args.max_prefills_per_step is not None else [1],
        args.max_decode_tokens if args.max_decode_tokens is not None else [128],
        args.max_running,
    )


def serving_configs_from_args(args: argparse.Namespace) -> list[ServingSimConfig]:
    """The serving configurations of the scheduler flags (their cross product)."""
    from ...runs.serving import expand_serving_configs

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


def serving_flags(cfg: ServingSimConfig) -> str:
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


def planner_flags(cfg: SimConfig) -> str:
    """The flags that give ``cfg``, for a message about it."""
    d = cfg.to_dict()
    parts = [f"--chunk-size {'none' if d['chunk_size'] is None else d['chunk_size']}"]
    if d["token_budget"] is not None:
        parts.append(f"--token-budget {d['token_budget']}")
    if d["max_prefills_per_step"] != 1:
        parts.append(f"--max-prefills-per-step {d['max_prefills_per_step']}")
    parts.append(f"--max-decode-tokens {d['max_decode_tokens']}")
    return "the configuration " + " ".join(parts)
