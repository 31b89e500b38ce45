"""The linear engine flags (``--engine`` presets, ``--profile``, coefficient overrides,
``--gpu-memory-utilization``) and the engines all the engine flags ask for."""

from __future__ import annotations

import argparse

from ...._args import (
    float_flag,
    input_file,
    list_of,
    show,
)
from ...engines.linear import (
    DEFAULT_ENGINE,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    ENGINE_PRESETS,
    MAX_COEFFICIENT_S,
)
from ...engines.spec import EngineSpec
from .engine_specs import engine_specs
from .roofline import add_roofline_flags

_COEFFICIENT = float_flag(0.0, MAX_COEFFICIENT_S, what="seconds")


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
    (:func:`~.roofline.add_roofline_flags`; ``overrides=False`` leaves out its GPU
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
        type=input_file,
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


def engine_specs_from_args(args: argparse.Namespace, unfit: list[str]) -> list[EngineSpec]:
    """The engines the flags ask for: a roofline ``--profile``'s, the roofline of
    ``--model`` on each ``--gpu`` at each ``--tp`` that fits (the others appended to
    ``unfit``), else each linear ``--engine`` preset (with ``--profile`` and overrides)."""
    return engine_specs(args, model_flag="--model", unfit=unfit)
