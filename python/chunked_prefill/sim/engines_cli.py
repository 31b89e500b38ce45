"""``chunked-prefill engines``: the catalog's models and GPUs and which fit together; and
the ``--model``/``--gpu``/``--tp`` flags ``simulate`` uses to run a roofline engine.

``add_parser(subparsers)`` adds the command; :func:`add_roofline_flags` and
:func:`roofline_from_args` are what ``simulate`` calls.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from typing import Any

from .._args import UsageError, float_flag, int_flag, one_line
from .catalog import (
    GPUS,
    MODELS,
    TP_DEGREES,
    EngineFitError,
    EngineRangeError,
    ModelConfigError,
    engine_for,
    fits,
    kv_memory,
    resolve_gpu,
)
from .engine import DEFAULT_GPU_MEMORY_UTILIZATION, GIB, KVMemory
from .roofline import RooflineModel
from .software import (
    ATTENTION_BACKENDS,
    DEFAULT_ATTENTION_BACKEND,
    DEFAULT_SERVING_ENGINE,
    SERVING_ENGINES,
)

__all__ = [
    "LINEAR_FLAGS",
    "REFERENCE_STEPS",
    "add_parser",
    "add_roofline_flags",
    "add_software_flags",
    "engine_rows",
    "run",
]

PROG = "chunked-prefill engines"

REFERENCE_STEPS = {
    "decode_s": (0, 64, 0, 64 * 2048, 0, 0),
    "prefill_s": (2048, 0, 2048 * 2049 // 2, 0, 2048 * 2048, 1),
}
"""Two steps whose roofline times ``engines`` reports (arguments of ``step_time``): 64
requests decoding at 2 048 tokens of context each, and one 2 048-token prompt chunk on an
empty cache."""


LINEAR_FLAGS = (
    ("--engine", "engine"),
    ("--profile", "profile"),
    ("--t-min", "t_min"),
    ("--c0", "c0"),
    ("--c-tok", "c_tok"),
    ("--c-attn", "c_attn"),
    ("--c-kv", "c_kv"),
    ("--c-chunk-sq", "c_chunk_sq"),
)
"""The linear engine's flags and their ``argparse`` names: none goes with ``--model``."""


def add_roofline_flags(p: argparse.ArgumentParser) -> None:
    """``simulate``'s roofline flags: ``--model``, ``--gpu``, ``--tp`` and the GPU
    overrides."""
    g = p.add_argument_group(
        "roofline engine (docs/engines.md; instead of --engine/--profile/coefficients)"
    )
    g.add_argument(
        "--model",
        metavar="NAME|config.json",
        help=f"the model: a Hugging Face config.json or one of {', '.join(MODELS)}",
    )
    g.add_argument(
        "--gpu",
        metavar="NAME|FILE",
        help=f"the GPU: a profile (.toml/.json) or one of {', '.join(GPUS)} (needs --model)",
    )
    g.add_argument(
        "--tp",
        type=int_flag(1, 1024),
        metavar="N",
        help="tensor-parallel degree: GPUs per replica (default: 1; needs --model)",
    )
    positive = float_flag(0.0, 1e30, low_open=True, what="a number")
    for flag, unit in (
        ("--gpu-tflops", "dense bf16/fp16 TFLOP/s"),
        ("--gpu-hbm-tbs", "memory bandwidth, TB/s"),
        ("--gpu-memory-gib", "memory per GPU, GiB"),
        ("--gpu-link-gbs", "TP link bandwidth per direction, GB/s"),
    ):
        g.add_argument(flag, type=positive, metavar="X", help=f"override the GPU's {unit}")
    add_software_flags(g)


def add_software_flags(g: Any) -> None:
    """``--serving-engine`` and ``--attention-backend`` (the roofline's software terms)."""
    g.add_argument(
        "--serving-engine",
        choices=list(SERVING_ENGINES),
        metavar="NAME",
        help="the serving engine whose CPU time each step adds: "
        + ", ".join(SERVING_ENGINES)
        + f" (default: {DEFAULT_SERVING_ENGINE}; none: GPU time only)",
    )
    g.add_argument(
        "--attention-backend",
        choices=list(ATTENTION_BACKENDS),
        metavar="NAME",
        help="how prefill attention is charged: "
        + ", ".join(ATTENTION_BACKENDS)
        + f" (default: {DEFAULT_ATTENTION_BACKEND})",
    )


def software_options(args: argparse.Namespace) -> dict[str, str]:
    """``engine_for``'s software keywords from the flags (defaults where not given)."""
    return {
        "serving_engine": getattr(args, "serving_engine", None) or DEFAULT_SERVING_ENGINE,
        "attention_backend": getattr(args, "attention_backend", None) or DEFAULT_ATTENTION_BACKEND,
    }


def software_flags(args: argparse.Namespace) -> tuple[str, ...]:
    """The software flags given, to repeat in a ``simulate`` command line."""
    out: tuple[str, ...] = ()
    for flag in ("serving_engine", "attention_backend"):
        value = getattr(args, flag, None)
        if value is not None:
            out += (f"--{flag.replace('_', '-')}", value)
    return out


_OVERRIDES = (
    ("gpu_tflops", "peak_flops", 1e12),
    ("gpu_hbm_tbs", "hbm_bandwidth", 1e12),
    ("gpu_memory_gib", "memory_bytes", GIB),
    ("gpu_link_gbs", "link_bandwidth", 1e9),
)


def roofline_from_args(
    args: argparse.Namespace, utilization: float
) -> tuple[RooflineModel, KVMemory] | None:
    """The roofline engine and KV memory ``--model``/``--gpu``/``--tp`` ask for (``None``
    without ``--model``). Raises :class:`UsageError` naming the flag."""
    software = ("serving_engine", "attention_backend")
    given = [
        f"--{k.replace('_', '-')}"
        for k in ("gpu", "tp", *software)
        if getattr(args, k, None) is not None
    ]
    given += [f"--{a.replace('_', '-')}" for a, _, _ in _OVERRIDES if getattr(args, a) is not None]
    if args.model is None:
        if given:
            raise UsageError(f"argument {given[0]}: needs --model")
        return None
    linear = [flag for flag, name in LINEAR_FLAGS if getattr(args, name, None) is not None]
    if linear:
        raise UsageError(f"argument {linear[0]}: not with --model (the roofline engine)")
    if args.gpu is None:
        raise UsageError(f"argument --model: needs --gpu (one of {', '.join(GPUS)}, or a file)")
    try:
        gpu = resolve_gpu(args.gpu)
    except ModelConfigError as err:
        raise UsageError(f"argument --gpu: {err}") from None
    overrides: dict[str, Any] = {}
    for attr, field, unit in _OVERRIDES:
        value = getattr(args, attr)
        if value is not None:
            overrides[field] = round(value * unit) if field == "memory_bytes" else value * unit
    if overrides:
        gpu = replace(gpu, name=f"{gpu.name} (overridden)", **overrides)
    try:
        return engine_for(
            args.model,
            gpu,
            args.tp or 1,
            gpu_memory_utilization=utilization,
            **software_options(args),
        )
    except ModelConfigError as err:
        raise UsageError(f"argument --model: {err}") from None
    except (EngineFitError, EngineRangeError) as err:
        raise UsageError(f"arguments --model/--gpu/--tp: {err}") from None


_PROFILE_CONFLICTS = (
    ("--model", "model"),
    ("--gpu", "gpu"),
    ("--tp", "tp"),
    ("--serving-engine", "serving_engine"),
    ("--attention-backend", "attention_backend"),
    *((f"--{a.replace('_', '-')}", a) for a, _, _ in _OVERRIDES),
    *(pair for pair in LINEAR_FLAGS if pair[0] != "--profile"),
)
"""The flags a roofline profile replaces (it names the model, GPU, TP and software)."""


def roofline_profile_from_args(
    args: argparse.Namespace, utilization: float
) -> tuple[RooflineModel, KVMemory, int] | None:
    """The roofline, KV memory and TP of ``--profile`` when it is a roofline profile
    (:mod:`.roofline_profile`), else ``None``. Raises :class:`UsageError` for a bad
    profile or a flag the profile replaces."""
    from .engine import ProfileError
    from .roofline_profile import is_roofline_profile, load_roofline_profile

    path = getattr(args, "profile", None)
    if path is None:
        return None
    try:
        if not is_roofline_profile(path):
            return None
        profile = load_roofline_profile(path)
    except ProfileError as err:
        raise UsageError(f"argument --profile: {err}") from None
    for flag, name in _PROFILE_CONFLICTS:
        if getattr(args, name, None) is not None:
            raise UsageError(
                f"argument {flag}: not with --profile {path}, a roofline profile (it names the"
                " model, GPU, TP and software)"
            )
    try:
        engine, memory = profile.build(utilization)
    except ProfileError as err:
        raise UsageError(f"argument --profile: {err}") from None
    return engine, memory, profile.tp


def engine_rows(
    utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION, block_size: int = 16
) -> list[dict[str, Any]]:
    """One row per (model, GPU, TP) of the catalog: whether it fits, its KV blocks and
    the roofline times of :data:`REFERENCE_STEPS` (the ``engines`` of ``--json``)."""
    rows = []
    for model in MODELS.values():
        for gpu in GPUS.values():
            for tp in TP_DEGREES:
                why = fits(model, gpu, tp, utilization, block_size)
                row: dict[str, Any] = {"model": model.name, "gpu": gpu.name, "tp": tp}
                row["fits"] = why is None
                row["reason"] = why
                if why is None:
                    engine, mem = engine_for(model, gpu, tp, gpu_memory_utilization=utilization)
                    row["num_blocks"] = mem.num_blocks(block_size, utilization)
                    row["kv_tokens"] = row["num_blocks"] * block_size
                    row["weight_bytes_per_gpu"] = mem.weight_bytes
                    row["kv_bytes_per_token"] = mem.bytes_per_token
                    for key, shape in REFERENCE_STEPS.items():
                        row[key] = engine.step_time(*shape)
                else:
                    mem = kv_memory(model, gpu, tp)
                    row["num_blocks"] = None
                    row["kv_tokens"] = None
                    row["weight_bytes_per_gpu"] = mem.weight_bytes
                    row["kv_bytes_per_token"] = mem.bytes_per_token
                    row["decode_s"] = row["prefill_s"] = None
                rows.append(row)
    return rows


def add_parser(subparsers: Any) -> None:
    """Add the ``engines`` subcommand."""
    p = subparsers.add_parser(
        "engines",
        help="list the model and GPU presets and which fit together",
        description="List the model and GPU presets of the roofline engine (simulate --model"
        " NAME --gpu NAME --tp N) and, for every (model, GPU, TP 1/2/4/8), whether the model"
        " fits and its KV-cache blocks per GPU, with the roofline's time for a 64-request"
        " decode step at 2048 tokens of context and a 2048-token prefill chunk. Every bad"
        f" input is one line '{PROG}: error: ...' on stderr and exit status 2.",
    )
    p.add_argument(
        "--gpu-memory-utilization",
        type=float_flag(0.0, 1.0, low_open=True, what="a fraction"),
        default=DEFAULT_GPU_MEMORY_UTILIZATION,
        metavar="F",
        help="fraction of each GPU's memory the engine may use (default: %(default)s)",
    )
    p.add_argument(
        "--block-size",
        type=int_flag(1, 2**20),
        default=16,
        metavar="N",
        help="tokens per KV-cache block (default: %(default)s)",
    )
    p.add_argument("--json", action="store_true", help="print the catalog as one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the catalog (a table, or ``--json``)."""
    try:
        rows = engine_rows(args.gpu_memory_utilization, args.block_size)
    except ValueError as err:  # pragma: no cover - the presets are checked by the tests
        print(f"{PROG}: error: {one_line(str(err))}", file=sys.stderr)
        return 2
    if args.json:
        doc = {
            "gpu_memory_utilization": args.gpu_memory_utilization,
            "block_size": args.block_size,
            "models": {k: m.to_dict() for k, m in MODELS.items()},
            "gpus": {k: g.to_dict() for k, g in GPUS.items()},
            "engines": rows,
        }
        print(json.dumps(doc))
        return 0
    _print_tables(rows, args.block_size, args.gpu_memory_utilization)
    return 0


def _print_tables(rows: list[dict[str, Any]], block_size: int, utilization: float) -> None:
    from rich.table import Table

    from .._stop import pipe_console as Console

    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=100)
    models = Table(title="models (--model)", title_justify="left")
    for col in ("name", "layers", "hidden", "heads/kv", "params", "active", "KV/token"):
        models.add_column(col, justify="left" if col == "name" else "right")
    for m in MODELS.values():
        models.add_row(
            m.name,
            str(m.num_hidden_layers),
            str(m.hidden_size),
            f"{m.num_attention_heads}/{m.num_key_value_heads}",
            f"{m.num_params / 1e9:.1f} B",
            f"{m.active_params / 1e9:.1f} B",
            f"{m.kv_bytes_per_token() // 1024} KiB",
        )
    gpus = Table(title="GPUs (--gpu)", title_justify="left")
    for col in ("name", "TFLOP/s", "HBM TB/s", "memory", "link GB/s"):
        gpus.add_column(col, justify="left" if col == "name" else "right")
    for g in GPUS.values():
        gpus.add_row(
            g.name,
            f"{g.peak_flops / 1e12:g}",
            f"{g.hbm_bandwidth / 1e12:g}",
            f"{g.memory_bytes / GIB:.1f} GiB",
            f"{g.link_bandwidth / 1e9:g}",
        )
    times = console.width >= 90  # the step times need 18 columns more (--json has them)
    grid = Table(
        title=f"KV blocks of {block_size} tokens per GPU at --gpu-memory-utilization"
        f" {utilization:g} ('-': does not fit)"
        + ("; decode/prefill: ms per step at TP 1 or the smallest TP that fits" if times else ""),
        title_justify="left",
    )
    grid.add_column("model", no_wrap=True)
    grid.add_column("gpu")
    for tp in TP_DEGREES:
        grid.add_column(f"TP {tp}", justify="right")
    if times:
        grid.add_column("decode", justify="right")
        grid.add_column("prefill", justify="right")
    by_pair: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        by_pair.setdefault((row["model"], row["gpu"]), []).append(row)
    for (model, gpu), cells in by_pair.items():
        first = next((c for c in cells if c["fits"]), None)
        blocks = [str(c["num_blocks"]) if c["fits"] else "-" for c in cells]
        if times:
            blocks.append(f"{first['decode_s'] * 1e3:.1f}" if first else "-")
            blocks.append(f"{first['prefill_s'] * 1e3:.1f}" if first else "-")
        grid.add_row(model, gpu, *blocks)
    console.print(models)
    console.print(gpus)
    console.print(grid)
