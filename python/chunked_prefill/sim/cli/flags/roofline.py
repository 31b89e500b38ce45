"""The roofline flags of ``simulate`` and ``search`` (``--model``, ``--gpu``, ``--tp``,
dtypes, software, GPU overrides) and what they give: ``engine_for``'s keywords, a roofline
profile."""

from __future__ import annotations

import argparse
from typing import Any

from ...._args import UsageError, float_flag, int_flag, list_of, name_flag
from ...engines.gpus import GPU_ALIASES, GPUS
from ...engines.linear import GIB, KVMemory
from ...engines.models import KV_CACHE_DTYPES, QUANTIZATIONS
from ...engines.models.presets import MODELS
from ...engines.roofline import RooflineModel
from ...engines.software import (
    ATTENTION_BACKENDS,
    DEFAULT_ATTENTION_BACKEND,
    DEFAULT_SERVING_ENGINE,
    SERVING_ENGINES,
    vllm_software,
)

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
        type=name_flag("a preset, a Hugging Face id or a config.json"),
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
    """``--serving-engine``, ``--attention-backend`` (the roofline's software terms) and
    ``--vllm-version``, which picks both."""
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
        help="the attention kernels (prefill pairs, decode KV reads): "
        + ", ".join(ATTENTION_BACKENDS)
        + f" (default: {DEFAULT_ATTENTION_BACKEND})",
    )
    g.add_argument(
        "--vllm-version",
        metavar="X.Y.Z",
        help="the vLLM release to model, with CUDA graphs: picks --serving-engine"
        " (vllm-v0-sync before 0.6, vllm-v0 before 0.8, vllm from it) and"
        " --attention-backend (paged before 0.4.3, flash from it); not with either",
    )


def software_options(args: argparse.Namespace) -> dict[str, str]:
    """``engine_for``'s software keywords from the flags (defaults where not given).
    Raises :class:`UsageError` for a bad ``--vllm-version`` or one given with a flag it
    picks."""
    version = getattr(args, "vllm_version", None)
    if version is not None:
        for flag, name in VERSION_PICKS:
            if getattr(args, name, None) is not None:
                raise UsageError(f"argument {flag}: not with --vllm-version, which picks it")
        try:
            engine, backend = vllm_software(version)
        except ValueError as err:
            raise UsageError(f"argument --vllm-version: {err}") from None
        return {"serving_engine": engine, "attention_backend": backend}
    return {
        "serving_engine": getattr(args, "serving_engine", None) or DEFAULT_SERVING_ENGINE,
        "attention_backend": getattr(args, "attention_backend", None) or DEFAULT_ATTENTION_BACKEND,
    }


VERSION_PICKS = (
    ("--serving-engine", "serving_engine"),
    ("--attention-backend", "attention_backend"),
)
"""The software flags ``--vllm-version`` picks, and their ``argparse`` names."""

SOFTWARE_FLAGS = (*VERSION_PICKS, ("--vllm-version", "vllm_version"))
"""The software flags and their ``argparse`` names: they go with ``--model`` only."""


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
    """The :class:`~...engines.gpus.GpuSpec` fields that ``--gpu-tflops``, ``--gpu-hbm-tbs``,
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
    (:mod:`...engines.roofline_profile`), else ``None``. Raises :class:`UsageError` for a bad
    profile or a flag the profile replaces."""
    path = getattr(args, "profile", None)
    if path is None:
        return None
    from ...engines.linear import ProfileError
    from ...engines.roofline_profile import is_roofline_profile, load_roofline_profile

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
