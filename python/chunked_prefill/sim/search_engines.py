"""The engine axis of ``chunked-prefill search``: linear presets (``--engine`` list, with
``--profile`` and the coefficient flags) or rooflines (``--model`` on each of the ``--gpu``
list at each degree of the ``--tp`` list), each an :class:`~.search_space.EngineSpec` that
remembers the ``simulate`` flags selecting it."""

from __future__ import annotations

import argparse

from .._args import UsageError, int_flag, list_of
from .catalog import GPUS, MODELS, EngineFitError, EngineRangeError, ModelConfigError, engine_for
from .cli import engine_from_args
from .engine import DEFAULT_ENGINE, DEFAULT_GPU_MEMORY_UTILIZATION, MEMORY_PRESETS
from .engines_cli import (
    DTYPE_FLAGS,
    LINEAR_FLAGS,
    SOFTWARE_FLAGS,
    add_dtype_flags,
    add_software_flags,
    dtype_args,
    given_flags,
    roofline_profile_from_args,
    software_options,
)
from .search_space import EngineSpec

__all__ = ["add_roofline_lists", "engine_specs", "utilization"]


def add_roofline_lists(p: argparse.ArgumentParser) -> None:
    """``--model`` and the ``--gpu`` and ``--tp`` comma lists."""
    g = p.add_argument_group(
        "roofline engines (docs/engines.md; instead of --engine, --profile and coefficients)"
    )
    g.add_argument(
        "--model",
        metavar="NAME|config.json",
        help=f"the model: a Hugging Face config.json or one of {', '.join(MODELS)}",
    )
    g.add_argument(
        "--gpu",
        type=list_of(str),
        metavar="LIST",
        help=f"GPUs, a comma list of profiles (.toml/.json) or of {', '.join(GPUS)}"
        " (needs --model)",
    )
    g.add_argument(
        "--tp",
        type=list_of(int_flag(1, 1024)),
        metavar="LIST",
        help="tensor-parallel degrees (GPUs per replica), a comma list; combinations that do"
        " not fit are left out (default: 1; needs --model)",
    )
    add_dtype_flags(g)
    add_software_flags(g)


def utilization(args: argparse.Namespace) -> float:
    """``--gpu-memory-utilization`` or its default."""
    if args.gpu_memory_utilization is None:
        return DEFAULT_GPU_MEMORY_UTILIZATION
    return float(args.gpu_memory_utilization)


def engine_specs(args: argparse.Namespace) -> list[EngineSpec]:
    """The engines the flags ask for, in flag order (GPUs slowest, then TP degrees); a
    roofline ``--profile`` is the one engine."""
    profile = roofline_profile_from_args(args, utilization(args))
    if profile is not None:
        engine, memory, tp = profile
        return [EngineSpec(engine, memory, tp, ())]  # the command line repeats --profile
    if args.model is None:
        for flag, name in (("--gpu", "gpu"), ("--tp", "tp"), *SOFTWARE_FLAGS, *DTYPE_FLAGS):
            if getattr(args, name, None) is not None:
                raise UsageError(f"argument {flag}: needs --model")
        return _linear_specs(args)
    linear = [flag for flag, name in LINEAR_FLAGS if getattr(args, name, None) is not None]
    if linear:
        raise UsageError(f"argument {linear[0]}: not with --model (the roofline engines)")
    if args.gpu is None:
        raise UsageError(f"argument --model: needs --gpu (a list of {', '.join(GPUS)}, or files)")
    return _roofline_specs(args)


def _linear_specs(args: argparse.Namespace) -> list[EngineSpec]:
    specs = []
    for preset in dict.fromkeys(args.engine or [DEFAULT_ENGINE.name]):
        model = engine_from_args(args, preset)
        specs.append(EngineSpec(model, MEMORY_PRESETS[preset], 1, ("--engine", preset)))
    return specs


def _roofline_specs(args: argparse.Namespace) -> list[EngineSpec]:
    specs = []
    unfit = []
    dtypes = dtype_args(args)
    # The dtype and software flags given, for the reproducing simulate command line.
    extra = given_flags(args, DTYPE_FLAGS + SOFTWARE_FLAGS)
    for gpu in dict.fromkeys(args.gpu):
        for tp in dict.fromkeys(args.tp or [1]):
            try:
                model, memory = engine_for(
                    args.model,
                    gpu,
                    tp,
                    gpu_memory_utilization=utilization(args),
                    **dtypes,
                    **software_options(args),
                )
            except (ModelConfigError, EngineRangeError) as err:
                raise UsageError(f"argument --model/--gpu: {err}") from None
            except EngineFitError as err:
                unfit.append(f"{gpu} at TP {tp}: {err}")
                continue
            flags = ("--model", args.model, "--gpu", gpu, "--tp", str(tp), *extra)
            specs.append(EngineSpec(model, memory, tp, flags))
    if not specs:
        raise UsageError(f"arguments --model/--gpu/--tp: no combination fits ({unfit[0]})")
    return specs
