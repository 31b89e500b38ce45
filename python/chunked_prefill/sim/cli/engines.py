"""``chunked-prefill engines``: the catalog's models and GPUs and which fit together."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ..._args import UsageError, float_flag, int_flag, list_of, one_line
from ..engines.errors import ModelConfigError
from ..engines.gpus import GPU_ALIASES, GPUS, GpuSpec, resolve_gpu
from ..engines.linear import DEFAULT_GPU_MEMORY_UTILIZATION, GIB
from ..engines.models import ModelSpec
from ..engines.models.aliases import MODEL_ALIASES
from ..engines.models.presets import MODELS
from .flags.roofline import add_dtype_flags, dtype_args

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
    from ..engines.catalog import TP_DEGREES, with_dtypes  # the catalog's lookup: run only

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
    from ..engines.catalog import engine_for, fits, kv_memory

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
    from ..engines.catalog import TP_DEGREES
    from ..engines.models.config import resolve_model  # reads config.json: run only

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
    from ..engines.catalog import with_dtypes

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

    from ..._stop import pipe_console as Console

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
    cols = ("name", "layers", "hidden", "heads/kv", "window", "params", "active", "weights")
    for col in (*cols, "KV/token"):
        table.add_column(col, justify="left" if col == "name" else "right")
    for m in models:
        table.add_row(
            m.name,
            str(m.num_hidden_layers),
            str(m.hidden_size),
            f"{m.num_attention_heads}/{'MLA' if m.is_mla else m.num_key_value_heads}",
            # The window and how many layers attend within it.
            f"{m.sliding_window} ({m.window_layers}/{m.num_hidden_layers})"
            if m.sliding_window
            else "-",
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
