"""Looking engines up in the catalog: :func:`engine_for` puts one model on one GPU type
at a tensor-parallel degree and gives the step-time model (:class:`~.roofline.RooflineModel`)
and the KV memory (:class:`~.linear.KVMemory`) the simulator runs with; :func:`fits` and
:func:`with_dtypes` answer the questions around it. Every figure's source is in
``docs/engines.md``."""

from __future__ import annotations

import math
import numbers
import os
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .._check import real, show
from .errors import EngineFitError, EngineRangeError, ModelConfigError
from .gpus import _GPU_KEYS, GpuSpec, resolve_gpu
from .linear import DEFAULT_GPU_MEMORY_UTILIZATION, GIB, KVMemory
from .models import KV_CACHE_DTYPES, QUANTIZATIONS, ModelSpec
from .models.config import resolve_model
from .software import DEFAULT_ATTENTION_BACKEND, DEFAULT_SERVING_ENGINE, ServingEngine

if TYPE_CHECKING:
    from .roofline import RooflineModel


TP_DEGREES = (1, 2, 4, 8)


MAX_TP = 1024
"""The largest tensor-parallel degree (``--tp``'s limit too)."""
"""The tensor-parallel degrees ``chunked-prefill engines`` lists."""


def kv_memory(model: ModelSpec, gpu: GpuSpec, tp: int) -> KVMemory:
    """The KV memory of one GPU of a TP group (weights and K/V heads split ``tp`` ways)."""
    return KVMemory(
        model=model.name,
        gpu=gpu.name if tp == 1 else f"{gpu.name} (each of TP {tp})",
        gpu_memory_bytes=gpu.memory_bytes,
        weight_bytes=model.weight_bytes_per_gpu(tp),
        activation_bytes=gpu.activation_reserve_bytes,
        layers=model.num_hidden_layers,
        kv_heads=model.kv_heads_per_gpu(tp),
        head_dim=model.head_dim,
        dtype_bytes=model.kv_element_bytes,
        latent_dim=model.latent_dim,
    )


def fits(
    model: ModelSpec,
    gpu: GpuSpec,
    tp: int,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    block_size: int = 16,
) -> str | None:
    """``None`` when ``model`` runs on ``tp`` GPUs of type ``gpu`` with at least one KV block
    per GPU, else why not (one sentence)."""
    try:
        model.check_tp(tp)
    except EngineFitError as err:
        return str(err)
    mem = kv_memory(model, gpu, tp)
    if mem.num_blocks(block_size, gpu_memory_utilization) == 0:
        usable = math.floor(gpu.memory_bytes * gpu_memory_utilization)
        return (
            f"{model.name} does not fit {gpu.name} at TP {tp}: {mem.weight_bytes / 1e9:.2f} GB"
            f" of weights per GPU + {gpu.activation_reserve_bytes / GIB:g} GiB activations"
            f" leave no KV block in {usable / GIB:.1f} GiB ({gpu.memory_bytes / GIB:g} GiB x"
            f" --gpu-memory-utilization {gpu_memory_utilization:g})"
        )
    return None


def engine_for(
    model: str | os.PathLike[str] | ModelSpec,
    gpu: str | os.PathLike[str] | GpuSpec,
    tp: int = 1,
    *,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    serving_engine: str | ServingEngine = DEFAULT_SERVING_ENGINE,
    attention_backend: str = DEFAULT_ATTENTION_BACKEND,
    kv_cache_dtype: str = "auto",
    quantization: str | None = None,
    **overrides: Any,
) -> tuple[RooflineModel, KVMemory]:
    """The step-time model and KV memory of ``model`` on ``tp`` GPUs of type ``gpu``.

    ``model`` is a :data:`MODELS` name, a ``config.json`` path or a :class:`ModelSpec`;
    ``gpu`` a :data:`GPUS` name, a GPU profile path or a :class:`GpuSpec`; ``overrides``
    replace :class:`GpuSpec` fields (``peak_flops=...``, ``hbm_efficiency=...``);
    ``serving_engine`` and ``attention_backend`` name the software (:mod:`.software`:
    the serving engine's CPU costs, how attention is charged; ``serving_engine``
    may be a :class:`~.software.ServingEngine`, as a fitted profile gives);
    ``kv_cache_dtype`` and ``quantization`` are vLLM's ``--kv-cache-dtype`` and
    ``--quantization`` (:func:`with_dtypes`). Returns
    ``(RooflineModel, KVMemory)``: pass them to ``simulate_serving(..., engine=...,
    memory=...)``. Raises :class:`ModelConfigError` for an unknown name or a bad file, and
    :class:`EngineFitError` when the model does not split across ``tp`` GPUs or its weights
    leave no KV block at ``gpu_memory_utilization``.
    """
    from .roofline import RooflineModel

    if isinstance(tp, bool) or not isinstance(tp, numbers.Integral) or not 1 <= tp <= MAX_TP:
        raise ValueError(f"tp must be a whole number of GPUs in [1, {MAX_TP}], got {show(tp)}")
    tp = int(tp)
    gpu_memory_utilization = real(
        "gpu_memory_utilization", gpu_memory_utilization, 0.0, 1.0, low_open=True
    )
    spec = with_dtypes(resolve_model(model), kv_cache_dtype, quantization)
    card = resolve_gpu(gpu)
    if overrides:
        unknown = sorted(set(overrides) - _GPU_KEYS)
        if unknown:
            raise ValueError(
                f"unknown GPU field(s): {', '.join(unknown)}; known: {', '.join(sorted(_GPU_KEYS))}"
            )
        card = replace(card, **{k: v for k, v in overrides.items() if v is not None})
    why = fits(spec, card, tp, gpu_memory_utilization)
    if why is not None:
        raise EngineFitError(why)
    try:
        roofline = RooflineModel.build(spec, card, tp, serving_engine, attention_backend)
    except ValueError as err:  # an unknown software name
        raise ModelConfigError(str(err)) from None
    _check_times(roofline)
    return roofline, kv_memory(spec, card, tp)


def with_dtypes(
    model: ModelSpec, kv_cache_dtype: str = "auto", quantization: str | None = None
) -> ModelSpec:
    """``model`` served with vLLM's ``--kv-cache-dtype`` (a :data:`KV_CACHE_DTYPES` key:
    ``auto`` keeps the model's, the fp8 ones store 1 byte per K/V element) and
    ``--quantization`` (``None``, or ``"fp8"``: the linear weights quantized to FP8 at load).
    A changed spec is named after what changed (``llama-3.1-8b (fp8 weights, fp8 KV)``).
    Raises ``ValueError`` naming a value that is not one of these, or ``"fp8"`` for a
    checkpoint whose weights are integers already."""
    if not isinstance(kv_cache_dtype, str) or kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ValueError(
            f"kv_cache_dtype must be one of {', '.join(KV_CACHE_DTYPES)}, got"
            f" {show(kv_cache_dtype)}"
        )
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ValueError(
            f"quantization must be None or one of {', '.join(QUANTIZATIONS)}, got"
            f" {show(quantization)}"
        )
    if quantization == "fp8" and model.weight_only:
        raise ValueError(
            f"quantization 'fp8' quantizes 16-bit weights at load, but {model.name}'s are"
            f" {model.weight_dtype} already (a GPTQ or AWQ checkpoint)"
        )
    changes: dict[str, Any] = {}
    tags = []
    if quantization == "fp8" and model.weight_dtype != "fp8":
        changes["weight_dtype"] = "fp8"
        tags.append("fp8 weights")
    kv = KV_CACHE_DTYPES[kv_cache_dtype]
    if kv and kv != model.kv_element_bytes:
        changes["kv_dtype_bytes"] = kv
        tags.append(f"{'fp8' if kv == 1 else kv_cache_dtype} KV")
    if not changes:
        return model
    return replace(model, name=f"{model.name} ({', '.join(tags)})", **changes)


_TIME_SOURCES = {
    "overhead_s": "-step_overhead_s, layer_overhead_s or moe_layer_s",
    "token_s": "peak_flops (--gpu-tflops) x gemm_efficiency",
    "gemm_fixed_s": "peak_flops (--gpu-tflops) x gemm_efficiency",
    "expert_fixed_s": "peak_flops (--gpu-tflops) x gemm_efficiency",
    "head_row_s": "peak_flops (--gpu-tflops) x gemm_efficiency",
    "dense_read_s": "hbm_bandwidth (--gpu-hbm-tbs) x weight_read_efficiency",
    "expert_read_s": "hbm_bandwidth (--gpu-hbm-tbs) x weight_read_efficiency",
    "pair_s": "peak_flops (--gpu-tflops) x attention_efficiency",
    "chunk_sq_s": "peak_flops (--gpu-tflops) x chunk_attention_efficiency",
    "kv_token_s": "hbm_bandwidth (--gpu-hbm-tbs) x hbm_efficiency",
    "window_pair_s": "peak_flops (--gpu-tflops) x attention_efficiency",
    "window_kv_token_s": "hbm_bandwidth (--gpu-hbm-tbs) x hbm_efficiency",
    "allreduce_call_s": "-allreduce_latency_s",
    "allreduce_token_s": "link_bandwidth (--gpu-link-gbs) x link_efficiency",
}
"""Each time coefficient of the roofline and the GPU figure it is inversely proportional to
(``-FIELD``: the GPU field in seconds it is proportional to), for :func:`_check_times`."""


def _check_times(roofline: RooflineModel) -> None:
    """Refuse a roofline with a time coefficient above ``MAX_COEFFICIENT_S`` (the linear
    engine's bound): the simulated times would reach infinity and the report mean nothing."""
    from .linear import MAX_COEFFICIENT_S

    for key, source in _TIME_SOURCES.items():
        value = getattr(roofline, key)
        if not value <= MAX_COEFFICIENT_S:  # NaN too
            why = (
                f"lower the GPU's {source[1:]}"
                if source.startswith("-")
                else f"{source} is too low for this model"
            )
            raise EngineRangeError(
                f"{roofline.name}: the roofline's {key} is {value:.3g} s, above"
                f" {MAX_COEFFICIENT_S:g} s: {why}"
            )
