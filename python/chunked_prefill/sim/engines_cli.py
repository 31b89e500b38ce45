"""``chunked-prefill engines``: the catalog's models and GPUs and which fit together; and
the ``--model``/``--gpu``/``--tp`` flags ``simulate`` and ``search`` use to run roofline
engines.

``add_parser(subparsers)`` adds the command; :func:`add_roofline_flags` is what
``simulate`` and ``search`` call (:mod:`.search_engines` reads the flags).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from .._args import UsageError, float_flag, int_flag, list_of, one_line
from .catalog import (
    GPU_ALIASES,
    GPUS,
    KV_CACHE_DTYPES,
    MODEL_ALIASES,
    MODELS,
    QUANTIZATIONS,
    TP_DEGREES,
    GpuSpec,
    ModelConfigError,
    ModelSpec,
    engine_for,
    fits,
    kv_memory,
    resolve_gpu,
    resolve_model,
    with_dtypes,
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
    "gpu_overrides",
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

REFERENCE_CAPTION = (
    "decode: one step of 64 requests each decoding at 2 048 tokens of context, on the whole"
    " TP group; prefill: one 2 048-token chunk on an empty cache"
)
"""What the printed times measure (:data:`REFERENCE_STEPS`), under each table."""


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


def add_dtype_flags(g: Any) -> None:
    """``--kv-cache-dtype`` and ``--quantization`` (vLLM's flags of the same names)."""
    g.add_argument(
        "--kv-cache-dtype",
        choices=tuple(KV_CACHE_DTYPES),
        metavar="DTYPE",
        help="the KV cache's dtype, as vLLM's flag: auto (the model's), bfloat16, float16,"
        " fp8, fp8_e4m3, fp8_e5m2 (1 byte per element: twice the KV blocks of 2-byte"
        " ones); default: auto",
    )
    g.add_argument(
        "--quantization",
        choices=QUANTIZATIONS,
        metavar="fp8",
        help="quantize the model's linear weights to FP8 at load, as vLLM's --quantization"
        " fp8 (an FP8 checkpoint's config.json says so itself)",
    )


def add_roofline_flags(p: argparse.ArgumentParser, *, overrides: bool = True) -> None:
    """The roofline flags of ``simulate`` and ``search``: ``--model``, the ``--gpu`` and
    ``--tp`` comma lists, the dtypes, the software and (``overrides``, ``simulate`` only)
    the GPU datasheet overrides."""
    g = p.add_argument_group(
        "roofline engines (docs/engines.md; instead of --engine/--profile/coefficients)"
    )
    g.add_argument(
        "--model",
        metavar="NAME|config.json",
        help=f"the model: a Hugging Face config.json, one of {', '.join(MODELS)}, or a"
        " preset's Hugging Face id (meta-llama/Llama-3.1-8B-Instruct)",
    )
    g.add_argument(
        "--gpu",
        type=list_of(str),
        metavar="LIST",
        help=f"GPUs, a comma list of profiles (.toml/.json) or of {', '.join(GPUS)}, or"
        f" aliases ({', '.join(GPU_ALIASES)}) (needs --model)",
    )
    g.add_argument(
        "--tp",
        type=list_of(int_flag(1, 1024)),
        metavar="LIST",
        help="tensor-parallel degrees (GPUs per replica), a comma list; each (GPU, TP)"
        " combination that fits the model is an engine, the others are left out (default:"
        " 1; needs --model)",
    )
    add_dtype_flags(g)
    if overrides:
        _add_override_flags(g)
    add_software_flags(g)


def _add_override_flags(g: Any) -> None:
    positive = float_flag(0.0, 1e30, low_open=True, what="a number")
    for flag, unit in (
        ("--gpu-tflops", "dense bf16/fp16 TFLOP/s"),
        ("--gpu-hbm-tbs", "memory bandwidth, TB/s"),
        ("--gpu-memory-gib", "memory per GPU, GiB"),
        ("--gpu-link-gbs", "TP link bandwidth per direction, GB/s"),
    ):
        g.add_argument(flag, type=positive, metavar="X", help=f"override the GPU's {unit}")


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


SOFTWARE_FLAGS = (
    ("--serving-engine", "serving_engine"),
    ("--attention-backend", "attention_backend"),
)
"""The software flags and their ``argparse`` names: both go with ``--model`` only."""

DTYPE_FLAGS = (("--kv-cache-dtype", "kv_cache_dtype"), ("--quantization", "quantization"))
"""The dtype flags and their ``argparse`` names: both go with ``--model`` only."""


def given_flags(args: argparse.Namespace, pairs: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    """The flags of ``pairs`` (flag, ``argparse`` name) that were given, each followed by its
    value: to repeat in a ``simulate`` command line."""
    out: tuple[str, ...] = ()
    for flag, name in pairs:
        value = getattr(args, name, None)
        if value is not None:
            out += (flag, str(value))
    return out


def dtype_args(args: argparse.Namespace) -> dict[str, Any]:
    """``engine_for``'s ``kv_cache_dtype`` and ``quantization`` from the flags."""
    return {
        "kv_cache_dtype": getattr(args, "kv_cache_dtype", None) or "auto",
        "quantization": getattr(args, "quantization", None),
    }


_OVERRIDES = (
    ("gpu_tflops", "peak_flops", 1e12),
    ("gpu_hbm_tbs", "hbm_bandwidth", 1e12),
    ("gpu_memory_gib", "memory_bytes", GIB),
    ("gpu_link_gbs", "link_bandwidth", 1e9),
)

GPU_OVERRIDE_FLAGS = tuple((f"--{a.replace('_', '-')}", a) for a, _, _ in _OVERRIDES)
"""The GPU datasheet override flags and their ``argparse`` names: they go with ``--model``."""


def gpu_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The :class:`~.catalog.GpuSpec` fields that ``--gpu-tflops``, ``--gpu-hbm-tbs``,
    ``--gpu-memory-gib`` and ``--gpu-link-gbs`` replace (none when the command has no such
    flags)."""
    out: dict[str, Any] = {}
    for attr, field, unit in _OVERRIDES:
        value = getattr(args, attr, None)
        if value is not None:
            out[field] = round(value * unit) if field == "memory_bytes" else value * unit
    return out


_PROFILE_CONFLICTS = (
    ("--model", "model"),
    ("--gpu", "gpu"),
    ("--tp", "tp"),
    *SOFTWARE_FLAGS,
    *DTYPE_FLAGS,
    *GPU_OVERRIDE_FLAGS,
    *(pair for pair in LINEAR_FLAGS if pair[0] != "--profile"),
)
"""The flags a roofline profile replaces (it names the model, GPU, TP and software) or
does not take (it keeps no dtypes: the model's own are used)."""


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
            why = (
                "keeps no dtypes: the model's own are used"
                if (flag, name) in DTYPE_FLAGS
                else "names the model, GPU, TP and software"
            )
            raise UsageError(
                f"argument {flag}: not with --profile {path}, a roofline profile (it {why})"
            )
    try:
        engine, memory = profile.build(utilization)
    except ProfileError as err:
        raise UsageError(f"argument --profile: {err}") from None
    return engine, memory, profile.tp


def engine_rows(
    utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    block_size: int = 16,
    *,
    models: list[ModelSpec] | None = None,
    gpus: list[GpuSpec] | None = None,
    tps: list[int] | None = None,
    kv_cache_dtype: str = "auto",
    quantization: str | None = None,
) -> list[dict[str, Any]]:
    """One row per (model, GPU, TP) of the catalog (or of ``models``, ``gpus``, ``tps``):
    whether it fits, its KV blocks and the roofline times of :data:`REFERENCE_STEPS` (the
    ``engines`` of ``--json``), with the KV cache and weights in the dtypes asked for."""
    rows = []
    for base in models if models is not None else list(MODELS.values()):
        model = with_dtypes(base, kv_cache_dtype, quantization)
        for gpu in gpus if gpus is not None else list(GPUS.values()):
            for tp in tps if tps is not None else TP_DEGREES:
                rows.append(_row(model, base.name, gpu, tp, utilization, block_size))
    return rows


def _row(
    model: ModelSpec, name: str, gpu: GpuSpec, tp: int, utilization: float, block_size: int
) -> dict[str, Any]:
    why = fits(model, gpu, tp, utilization, block_size)
    row: dict[str, Any] = {"model": name, "gpu": gpu.name, "tp": tp}
    row["fits"] = why is None
    row["reason"] = why
    mem = kv_memory(model, gpu, tp)
    row["num_blocks"] = mem.num_blocks(block_size, utilization) if why is None else None
    row["kv_tokens"] = row["num_blocks"] * block_size if why is None else None
    row["weight_bytes_per_gpu"] = mem.weight_bytes
    row["kv_bytes_per_token"] = mem.bytes_per_token
    if why is None:
        engine, _ = engine_for(model, gpu, tp, gpu_memory_utilization=utilization)
        for key, shape in REFERENCE_STEPS.items():
            row[key] = engine.step_time(*shape)
    else:
        row["decode_s"] = row["prefill_s"] = None
    return row


def add_parser(subparsers: Any) -> None:
    """Add the ``engines`` subcommand."""
    p = subparsers.add_parser(
        "engines",
        help="list the model and GPU presets and which fit together",
        description="List the model and GPU presets of the roofline engine (simulate --model"
        " NAME --gpu NAME --tp N) and, for every (model, GPU, TP 1/2/4/8), whether the model"
        " fits and its KV-cache blocks per GPU, with the roofline's time for a 64-request"
        " decode step at 2048 tokens of context and a 2048-token prefill chunk, one table"
        " per TP degree (a step's time is the whole TP group's). Every bad"
        f" input is one line '{PROG}: error: ...' on stderr and exit status 2.",
    )
    p.add_argument(
        "--model",
        type=list_of(str),
        metavar="LIST",
        help="only these models: a comma list of presets, their Hugging Face ids or"
        " config.json paths (default: every preset)",
    )
    p.add_argument(
        "--gpu",
        type=list_of(str),
        metavar="LIST",
        help="only these GPUs: a comma list of presets, aliases or profiles (default: every"
        " preset)",
    )
    p.add_argument(
        "--tp",
        type=list_of(int_flag(1, 1024)),
        metavar="LIST",
        help="only these tensor-parallel degrees, a comma list (default: 1,2,4,8)",
    )
    add_dtype_flags(p)
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


def _selection(args: argparse.Namespace) -> tuple[list[ModelSpec], list[GpuSpec], list[int]]:
    """The models, GPUs and TP degrees the filters keep (in their order, once each)."""
    models, gpus = list(MODELS.values()), list(GPUS.values())
    if args.model is not None:
        try:
            models = [resolve_model(m) for m in args.model]
        except ModelConfigError as err:
            raise UsageError(f"argument --model: {err}") from None
    if args.gpu is not None:
        try:
            gpus = [resolve_gpu(g) for g in args.gpu]
        except ModelConfigError as err:
            raise UsageError(f"argument --gpu: {err}") from None
    models = list({m.name: m for m in models}.values())
    gpus = list({g.name: g for g in gpus}.values())
    return models, gpus, list(dict.fromkeys(args.tp or TP_DEGREES))


def run(args: argparse.Namespace) -> int:
    """Print the catalog (a table, or ``--json``)."""
    models, gpus, tps = _selection(args)
    dtypes = dtype_args(args)
    try:
        rows = engine_rows(
            args.gpu_memory_utilization,
            args.block_size,
            models=models,
            gpus=gpus,
            tps=tps,
            **dtypes,
        )
    except ValueError as err:  # pragma: no cover - the presets are checked by the tests
        print(f"{PROG}: error: {one_line(str(err))}", file=sys.stderr)
        return 2
    if args.json:
        doc = {
            "gpu_memory_utilization": args.gpu_memory_utilization,
            "block_size": args.block_size,
            "models": {m.name: with_dtypes(m, **dtypes).to_dict() for m in models},
            "gpus": {g.name: g.to_dict() for g in gpus},
            "engines": rows,
            "tp": tps,
            "kv_cache_dtype": dtypes["kv_cache_dtype"],
            "quantization": dtypes["quantization"],
            "reference_steps": REFERENCE_CAPTION,
            "model_aliases": MODEL_ALIASES,
            "gpu_aliases": GPU_ALIASES,
        }
        print(json.dumps(doc))
        return 0
    served = [with_dtypes(m, **dtypes) for m in models]
    _print_tables(rows, served, gpus, tps, args.block_size, args.gpu_memory_utilization)
    return 0


def _print_tables(
    rows: list[dict[str, Any]],
    models: list[ModelSpec],
    gpus: list[GpuSpec],
    tps: list[int],
    block_size: int,
    utilization: float,
) -> None:
    from rich.table import Table

    from .._stop import pipe_console as Console

    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=100)
    console.print(_models_table(models))
    console.print(_gpus_table(gpus))
    for tp in tps:
        at_tp = [r for r in rows if r["tp"] == tp]
        fit = [r for r in at_tp if r["fits"]]
        left_out = len(at_tp) - len(fit)
        gpus_word = "GPU" if tp == 1 else "GPUs"
        title = (
            f"TP {tp} ({tp} {gpus_word} per replica): KV blocks of {block_size} tokens per GPU"
            f" at --gpu-memory-utilization {utilization:g}; ms per step of the replica"
        )
        if not fit:
            console.print(f"{title}: none of the {len(at_tp)} (model, GPU) pairs fits")
            continue
        caption = REFERENCE_CAPTION
        if left_out:
            caption += f". {left_out} (model, GPU) pairs do not fit at TP {tp} (--json: why)"
        grid = Table(title=title, title_justify="left", caption=caption, caption_justify="left")
        grid.add_column("model", no_wrap=True)
        grid.add_column("gpu", no_wrap=True)
        for col in ("KV blocks", "KV tokens", "decode", "prefill"):
            grid.add_column(col, justify="right")
        for r in fit:
            grid.add_row(
                r["model"],
                r["gpu"],
                str(r["num_blocks"]),
                str(r["kv_tokens"]),
                f"{r['decode_s'] * 1e3:.1f}",
                f"{r['prefill_s'] * 1e3:.1f}",
            )
        console.print(grid)


def _models_table(models: list[ModelSpec]) -> Any:
    from rich.table import Table

    table = Table(title="models (--model)", title_justify="left")
    for col in ("name", "layers", "hidden", "heads/kv", "params", "active", "weights", "KV/token"):
        table.add_column(col, justify="left" if col == "name" else "right")
    for m in models:
        table.add_row(
            m.name,
            str(m.num_hidden_layers),
            str(m.hidden_size),
            f"{m.num_attention_heads}/{m.num_key_value_heads}",
            f"{m.num_params / 1e9:.1f} B",
            f"{m.active_params / 1e9:.1f} B",
            m.weight_dtype,
            f"{m.kv_bytes_per_token() / 1024:g} KiB",
        )
    return table


def _gpus_table(gpus: list[GpuSpec]) -> Any:
    from rich.table import Table

    table = Table(title="GPUs (--gpu)", title_justify="left")
    for col in ("name", "TFLOP/s", "FP8", "HBM TB/s", "memory", "link GB/s"):
        table.add_column(col, justify="left" if col == "name" else "right")
    for g in gpus:
        table.add_row(
            g.name,
            f"{g.peak_flops / 1e12:g}",
            f"{g.fp8_peak_flops / 1e12:g}" if g.fp8_peak_flops else "-",
            f"{g.hbm_bandwidth / 1e12:g}",
            f"{g.memory_bytes / GIB:.1f} GiB",
            f"{g.link_bandwidth / 1e9:g}",
        )
    return table
