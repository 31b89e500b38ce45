"""The engine axis of ``chunked-prefill simulate`` and ``search``: linear presets
(``--engine`` list, with ``--profile`` and the coefficient flags), a roofline profile, or
rooflines (``--model`` on each of the ``--gpu`` list at each degree of the ``--tp`` list),
each an :class:`~...engines.spec.EngineSpec` that remembers the ``simulate`` flags selecting
it."""

from __future__ import annotations

import argparse
from dataclasses import replace

from ...._args import UsageError
from ...engines.errors import EngineFitError, EngineRangeError, ModelConfigError
from ...engines.gpus import GPUS, GpuSpec, resolve_gpu
from ...engines.linear import (
    DEFAULT_ENGINE,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    ENGINE_PRESETS,
    MEMORY_PRESETS,
    EngineModel,
    ProfileError,
    load_profile,
)
from ...engines.spec import EngineSpec
from .roofline import (
    DTYPE_FLAGS,
    GPU_OVERRIDE_FLAGS,
    LINEAR_FLAGS,
    SOFTWARE_FLAGS,
    dtype_args,
    given_flags,
    gpu_overrides,
    roofline_profile_from_args,
    software_options,
)

__all__ = ["engine_from_args", "engine_specs", "utilization"]


def utilization(args: argparse.Namespace) -> float:
    """``--gpu-memory-utilization`` or its default."""
    if args.gpu_memory_utilization is None:
        return DEFAULT_GPU_MEMORY_UTILIZATION
    return float(args.gpu_memory_utilization)


def engine_specs(
    args: argparse.Namespace,
    *,
    model_flag: str = "--model/--gpu",
    unfit: list[str] | None = None,
) -> list[EngineSpec]:
    """The engines the flags ask for, in flag order (GPUs slowest, then TP degrees); a
    roofline ``--profile`` is the one engine. A (GPU, TP) combination the model does not
    fit is left out, a line saying why appended to ``unfit``; it is an error when it is the
    only combination asked for, or when none fits. ``model_flag`` names the flag of a bad
    model in the error (``simulate``: ``--model``)."""
    profile = roofline_profile_from_args(args, utilization(args))
    if profile is not None:
        engine, memory, tp = profile
        return [EngineSpec(engine, memory, tp, ())]  # the command line repeats --profile
    if args.model is None:
        needs_model = (("--gpu", "gpu"), ("--tp", "tp"), *SOFTWARE_FLAGS, *DTYPE_FLAGS)
        for flag, name in (*needs_model, *GPU_OVERRIDE_FLAGS):
            if getattr(args, name, None) is not None:
                raise UsageError(f"argument {flag}: needs --model")
        return _linear_specs(args)
    linear = [flag for flag, name in LINEAR_FLAGS if getattr(args, name, None) is not None]
    if linear:
        raise UsageError(f"argument {linear[0]}: not with --model (the roofline engine)")
    if args.gpu is None:
        raise UsageError(f"argument --model: needs --gpu (a list of {', '.join(GPUS)}, or files)")
    specs, left_out = _roofline_specs(args, model_flag)
    if unfit is not None:
        unfit += left_out
    return specs


def _linear_specs(args: argparse.Namespace) -> list[EngineSpec]:
    specs = []
    for preset in dict.fromkeys(args.engine or [DEFAULT_ENGINE.name]):
        model = engine_from_args(args, preset)
        specs.append(EngineSpec(model, MEMORY_PRESETS[preset], 1, ("--engine", preset)))
    return specs


def _roofline_specs(
    args: argparse.Namespace, model_flag: str
) -> tuple[list[EngineSpec], list[str]]:
    gpus: dict[str, tuple[str, GpuSpec]] = {}
    for text in args.gpu:
        try:
            gpu = resolve_gpu(text)
        except ModelConfigError as err:
            raise UsageError(f"argument --gpu: {err}") from None
        gpus.setdefault(gpu.name, (text, gpu))
    from ...engines.catalog import engine_for  # the catalog's lookup, only for --model

    overrides = gpu_overrides(args)
    specs = []
    unfit = []
    tps = list(dict.fromkeys(args.tp or [1]))
    # The dtype and software flags given, for the reproducing simulate command line.
    extra = given_flags(args, DTYPE_FLAGS + SOFTWARE_FLAGS)
    for text, gpu in gpus.values():
        if overrides:
            gpu = replace(gpu, name=f"{gpu.name} (overridden)", **overrides)
        for tp in tps:
            try:
                model, memory = engine_for(
                    args.model,
                    gpu,
                    tp,
                    gpu_memory_utilization=utilization(args),
                    **dtype_args(args),
                    **software_options(args),
                )
            except ModelConfigError as err:
                raise UsageError(f"argument {model_flag}: {err}") from None
            except EngineRangeError as err:
                raise UsageError(f"arguments --model/--gpu/--tp: {err}") from None
            except EngineFitError as err:
                if len(gpus) * len(tps) == 1:
                    raise UsageError(f"arguments --model/--gpu/--tp: {err}") from None
                unfit.append(str(err))
                continue
            flags = ("--model", args.model, "--gpu", text, "--tp", str(tp), *extra)
            specs.append(EngineSpec(model, memory, tp, flags))
    if not specs:
        raise UsageError(f"arguments --model/--gpu/--tp: no combination fits ({unfit[0]})")
    return specs, unfit


def engine_from_args(args: argparse.Namespace, preset: str | None = None) -> EngineModel:
    """The engine model of ``preset`` (default: ``--engine``'s first) with ``--profile``
    and the coefficient overrides applied."""
    model = ENGINE_PRESETS[preset or (args.engine or [DEFAULT_ENGINE.name])[0]]
    if args.profile is not None:
        try:
            model = load_profile(args.profile, base=model)
        except ProfileError as err:
            raise UsageError(f"argument --profile: {err}") from None
    overrides = {
        "t_min_s": args.t_min,
        "c0_s": args.c0,
        "c_tok_s": args.c_tok,
        "c_attn_s": args.c_attn,
        "c_kv_s": args.c_kv,
        "c_chunk_sq_s": args.c_chunk_sq,
    }
    if any(v is not None for v in overrides.values()):
        try:
            model = model.with_overrides(name=f"{model.name} (overridden)", **overrides)
        except ValueError as err:
            raise UsageError(f"arguments --t-min, --c0, --c-tok: {err}") from None
    return model
