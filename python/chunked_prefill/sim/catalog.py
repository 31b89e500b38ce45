"""The catalog of engines described by architecture: models, GPUs, and :func:`engine_for`.

A model is the fields of its Hugging Face ``config.json`` (:class:`ModelSpec`, read with
:func:`load_model_config` or taken from :data:`MODELS`); a GPU is its datasheet figures and
the efficiency factors the roofline applies to them (:class:`GpuSpec`, from :data:`GPUS` or a
profile file, :func:`load_gpu_profile`). :func:`engine_for` puts one model on one GPU type at
a tensor-parallel degree and gives the step-time model (:class:`~.roofline.RooflineModel`)
and the KV memory (:class:`~.engine.KVMemory`) the simulator runs with. Every figure's
source is in ``docs/engines.md``; the presets' sources are in their ``source`` fields.
"""

from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from ._check import path, real, show
from ._files import read_json_object, read_profile_bytes
from ._json import Number, exact, whole
from .engine import DEFAULT_GPU_MEMORY_UTILIZATION, GIB, KVMemory
from .software import DEFAULT_ATTENTION_BACKEND, DEFAULT_SERVING_ENGINE, ServingEngine

if TYPE_CHECKING:
    from .roofline import RooflineModel

__all__ = [
    "GPUS",
    "MODELS",
    "TP_DEGREES",
    "EngineFitError",
    "EngineRangeError",
    "GpuSpec",
    "ModelConfigError",
    "ModelSpec",
    "engine_for",
    "fits",
    "load_gpu_profile",
    "load_model_config",
    "resolve_gpu",
    "resolve_model",
]

TP_DEGREES = (1, 2, 4, 8)
MAX_TP = 1024
"""The largest tensor-parallel degree (``--tp``'s limit too)."""
"""The tensor-parallel degrees ``chunked-prefill engines`` lists."""

_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


class ModelConfigError(ValueError):
    """A model ``config.json`` that cannot be used; the message names the file and key."""


class EngineFitError(ValueError):
    """A model that does not fit (or does not split across) the GPUs at that TP degree."""


class EngineRangeError(ValueError):
    """A model and GPU whose roofline gives a step time past :data:`~.engine.MAX_COEFFICIENT_S`
    per unit (a GPU figure far too small for the model): the message names the GPU figure."""


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer as its ``config.json`` describes it (gated MLP, as Llama,
    Qwen2 and Mixtral have; biases and norms other than RMSNorm weights are ignored)."""

    name: str
    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    num_local_experts: int = 0
    """Experts per MoE layer; 0 for a dense model."""
    num_experts_per_tok: int = 0
    """Experts each token is routed to (MoE only)."""
    dtype_bytes: int = 2
    """Bytes per weight and per KV element (``torch_dtype``: bfloat16/float16 2, float32 4)."""
    tie_word_embeddings: bool = False
    source: str = ""
    """Where the figures come from."""
    weight_dtype: str = "bfloat16"
    """The decoder layers' weights: bfloat16, float16, float32 or fp8."""

    @property
    def weight_dtype_bytes(self) -> int:
        """Bytes per decoder-layer weight."""
        return 1 if self.weight_dtype == "fp8" else _DTYPE_BYTES[self.weight_dtype]

    @property
    def is_moe(self) -> bool:
        """Whether the MLP is a mixture of experts."""
        return self.num_local_experts > 0

    def attention_params(self, kv_heads: int | None = None) -> int:
        """Q, K, V and O projection weights of one layer (``kv_heads`` K/V heads)."""
        kv = self.num_key_value_heads if kv_heads is None else kv_heads
        q = self.num_attention_heads * self.head_dim
        return 2 * self.hidden_size * q + 2 * self.hidden_size * kv * self.head_dim

    @property
    def mlp_params(self) -> int:
        """Gate, up and down projection weights of one MLP (one expert of a MoE layer)."""
        return 3 * self.hidden_size * self.intermediate_size

    @property
    def router_params(self) -> int:
        """The MoE router of one layer (0 for a dense model)."""
        return self.hidden_size * self.num_local_experts

    @property
    def embedding_params(self) -> int:
        """The input embedding and the LM head (one matrix when tied)."""
        return self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)

    @property
    def num_params(self) -> int:
        """Every weight (RMSNorm weights included)."""
        experts = max(1, self.num_local_experts)
        layer = (
            self.attention_params()
            + experts * self.mlp_params
            + self.router_params
            + 2 * self.hidden_size
        )
        return self.num_hidden_layers * layer + self.embedding_params + self.hidden_size

    @property
    def active_params(self) -> int:
        """Weights one token's forward pass multiplies (its routed experts only)."""
        experts = self.num_experts_per_tok if self.is_moe else 1
        layer = self.attention_params() + experts * self.mlp_params + self.router_params
        return self.num_hidden_layers * layer + self.vocab_size * self.hidden_size

    def kv_heads_per_gpu(self, tp: int) -> int:
        """K/V heads each GPU holds: ``kv_heads / tp``, at least 1 (vLLM replicates a K/V
        head when there are fewer heads than GPUs)."""
        return max(1, self.num_key_value_heads // tp)

    def kv_bytes_per_token(self, tp: int = 1) -> int:
        """K and V of one token in every layer, on one GPU of a TP group."""
        return (
            2
            * self.num_hidden_layers
            * self.kv_heads_per_gpu(tp)
            * self.head_dim
            * (self.dtype_bytes)
        )

    def check_tp(self, tp: int) -> None:
        """Raise :class:`EngineFitError` when the heads do not split across ``tp`` GPUs (the
        rule vLLM enforces)."""
        kv = self.num_key_value_heads
        if self.num_attention_heads % tp or (kv % tp and tp % kv):
            raise EngineFitError(
                f"{self.name}: {self.num_attention_heads} attention heads and {kv} K/V heads"
                f" do not split across TP {tp} (the attention heads must divide by it, the"
                " K/V heads divide by it or it by them)"
            )

    def weight_bytes_per_gpu(self, tp: int) -> int:
        """The weights one GPU of a TP group holds: every matrix split ``tp`` ways (K/V
        projections replicated when there are fewer K/V heads than GPUs), norms whole."""
        experts = max(1, self.num_local_experts)
        kv_dim = self.kv_heads_per_gpu(tp) * self.head_dim
        q_dim = self.num_attention_heads * self.head_dim // tp
        attention = 2 * self.hidden_size * q_dim + 2 * self.hidden_size * kv_dim
        layer = (
            attention
            + experts * self.mlp_params // tp
            + self.router_params  # the router is replicated
            + 2 * self.hidden_size
        )
        params = self.num_hidden_layers * layer + self.embedding_params // tp + self.hidden_size
        return params * self.dtype_bytes

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain data, with the derived parameter counts."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["num_params"] = self.num_params
        out["active_params"] = self.active_params
        return out


@dataclass(frozen=True)
class GpuSpec:
    """One GPU type: datasheet figures and the efficiency factors the roofline applies.

    The efficiencies are fractions of the datasheet peak that real kernels reach (sources in
    ``docs/engines.md``); every field can be overridden (:func:`engine_for`'s keywords, a
    profile file, ``simulate``'s ``--gpu-*`` flags).
    """

    name: str
    peak_flops: float
    """Dense bf16/fp16 tensor-core FLOP/s (no sparsity)."""
    hbm_bandwidth: float
    """Memory bandwidth, bytes/s."""
    memory_bytes: int
    """Memory per GPU, bytes."""
    link_bandwidth: float
    """Tensor-parallel interconnect bandwidth per GPU and direction, bytes/s (NVLink, or
    PCIe where there is none)."""
    gemm_efficiency: float = 0.675
    """Achieved fraction of ``peak_flops`` in the linear layers at many tokens (their
    elementwise kernels included); at ``N`` tokens it is ``gemm_efficiency * N / (N +
    gemm_half_tokens)``."""
    gemm_half_tokens: float = 64.0
    """Tokens per GPU at which the linear layers reach half of ``gemm_efficiency`` (tiles
    padded at few tokens)."""
    attention_efficiency: float = 0.55
    """Achieved fraction of ``peak_flops`` in prefill attention (FlashAttention, causal)."""
    chunk_attention_efficiency: float = 0.26
    """The fraction of ``peak_flops`` at which a chunk's attention among its own tokens is
    charged again (a cost per squared chunk token, seen in Vidur's profiles; only with the
    ``vidur`` attention backend)."""
    hbm_efficiency: float = 0.85
    """Achieved fraction of ``hbm_bandwidth`` reading the KV cache (decode attention)."""
    weight_read_efficiency: float = 0.74
    """Achieved fraction of ``hbm_bandwidth`` reading the weights at few tokens (the GEMVs
    of a decode step)."""
    link_efficiency: float = 0.80
    """Achieved fraction of ``link_bandwidth`` (NCCL bus bandwidth / link bandwidth)."""
    allreduce_latency_s: float = 25e-6
    """Fixed cost of one all-reduce call."""
    layer_overhead_s: float = 26e-6
    """Fixed GPU time per decoder layer and step: its small kernels (norms, rotary
    embedding, activation, residual adds) at one token."""
    step_overhead_s: float = 0.0
    """Any other fixed GPU time per step."""
    fp8_peak_flops: float = 0.0
    """Dense FP8 tensor-core FLOP/s (0: no FP8 tensor cores)."""
    activation_reserve_bytes: int = 2 * GIB
    """Memory kept back for activations (as the simulator's Llama-2-7B presets)."""
    source: str = ""
    """Where the figures come from."""

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name in ("name", "source"):
                continue
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"GPU {self.name}: {f.name} must be a finite number, got {v!r}")
            if f.name.endswith("efficiency"):
                if not 0 < v <= 1:
                    raise ValueError(f"GPU {self.name}: {f.name} must be in (0, 1], got {v!r}")
            elif f.name in ("peak_flops", "hbm_bandwidth", "memory_bytes", "link_bandwidth"):
                if v <= 0:
                    raise ValueError(f"GPU {self.name}: {f.name} must be above 0, got {v!r}")
            elif v < 0:
                raise ValueError(f"GPU {self.name}: {f.name} must be at least 0, got {v!r}")
            if f.name.endswith("_bytes"):
                if v != int(v):
                    raise ValueError(f"GPU {self.name}: {f.name} must be whole bytes, got {v!r}")
                object.__setattr__(self, f.name, int(v))
            else:
                object.__setattr__(self, f.name, float(v))

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain data."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


# --------------------------------------------------------------------------- presets

_HF = "https://huggingface.co/{}/blob/main/config.json"

MODELS: dict[str, ModelSpec] = {
    "llama-3.1-8b": ModelSpec(
        name="llama-3.1-8b",
        num_hidden_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=14336,
        vocab_size=128256,
        source=_HF.format("meta-llama/Llama-3.1-8B-Instruct"),
    ),
    "llama-3.1-70b": ModelSpec(
        name="llama-3.1-70b",
        num_hidden_layers=80,
        hidden_size=8192,
        num_attention_heads=64,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=28672,
        vocab_size=128256,
        source=_HF.format("meta-llama/Llama-3.1-70B-Instruct"),
    ),
    "qwen2.5-32b": ModelSpec(
        name="qwen2.5-32b",
        num_hidden_layers=64,
        hidden_size=5120,
        num_attention_heads=40,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=27648,
        vocab_size=152064,
        source=_HF.format("Qwen/Qwen2.5-32B-Instruct"),
    ),
    "mixtral-8x7b": ModelSpec(
        name="mixtral-8x7b",
        num_hidden_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=14336,
        vocab_size=32000,
        num_local_experts=8,
        num_experts_per_tok=2,
        source=_HF.format("mistralai/Mixtral-8x7B-Instruct-v0.1"),
    ),
}
"""Model presets (``--model NAME``), the values of each model's ``config.json`` (all
bfloat16, untied embeddings)."""

_NVIDIA = "https://www.nvidia.com/en-us/data-center/{}/"

HOPPER_WEIGHT_READ_EFFICIENCY = 0.81
"""Vidur's H100 fit of Llama-2-7B (t_min 5.7 ms) less 32 layers' small kernels (0.83 ms)
reads its 13.2 GB of weights at 2.71 TB/s, 0.81 of 3.35 TB/s (docs/engines.md)."""

GPUS: dict[str, GpuSpec] = {
    "a100-80gb": GpuSpec(
        name="a100-80gb",
        peak_flops=312e12,
        hbm_bandwidth=2.039e12,
        memory_bytes=80 * GIB,
        link_bandwidth=300e9,
        source=_NVIDIA.format("a100") + " (SXM: 312 TFLOP/s bf16 dense, 2 039 GB/s,"
        " NVLink 600 GB/s = 300 GB/s per direction)",
    ),
    "h100-sxm": GpuSpec(
        name="h100-sxm",
        peak_flops=989e12,
        hbm_bandwidth=3.35e12,
        memory_bytes=80 * GIB,
        link_bandwidth=450e9,
        weight_read_efficiency=HOPPER_WEIGHT_READ_EFFICIENCY,
        source=_NVIDIA.format("h100") + " (SXM: 989 TFLOP/s bf16 dense, 3.35 TB/s,"
        " NVLink 900 GB/s = 450 GB/s per direction)",
    ),
    "h200": GpuSpec(
        name="h200",
        peak_flops=989e12,
        hbm_bandwidth=4.8e12,
        memory_bytes=141_000_000_000,
        link_bandwidth=450e9,
        weight_read_efficiency=HOPPER_WEIGHT_READ_EFFICIENCY,
        source=_NVIDIA.format("h200") + " (SXM: 989 TFLOP/s bf16 dense, 141 GB at 4.8 TB/s,"
        " NVLink 900 GB/s = 450 GB/s per direction)",
    ),
    "l40s": GpuSpec(
        name="l40s",
        peak_flops=362.05e12,
        hbm_bandwidth=864e9,
        memory_bytes=48_000_000_000,
        link_bandwidth=32e9,
        source=_NVIDIA.format("l40s") + " (362.05 TFLOP/s bf16 dense, 48 GB GDDR6 at"
        " 864 GB/s, no NVLink: PCIe Gen4 x16, 64 GB/s = 32 GB/s per direction)",
    ),
}
"""GPU presets (``--gpu NAME``): datasheet figures; the efficiency factors are the
:class:`GpuSpec` defaults (``step_overhead_s`` from Vidur's fitted intercepts, see
``docs/engines.md``)."""


# --------------------------------------------------------------------------- config.json


def _kind(value: object) -> str:
    if isinstance(value, Number):
        return value if len(value) <= 40 else f"a {len(value)}-character number"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else "a long string"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


def _read_json(path: str, error: type[ValueError]) -> dict[str, Any]:
    return read_json_object(path, error)


MAX_MODEL_COUNT = 10**12
"""The largest count a ``config.json`` key may hold (layers, sizes, heads, experts): far
above any real model, low enough that every figure derived from them stays exact."""


def _count(path: str, table: dict[str, Any], key: str, default: int | None = None) -> int:
    """A positive whole number of ``table[key]``, at most :data:`MAX_MODEL_COUNT`
    (``default`` when absent or null)."""
    value = table.get(key)
    if value is None and default is not None:
        return default
    if value is None and key not in table:
        raise ModelConfigError(f"{path}: key {key!r}: missing (a positive whole number)")
    parsed = exact(value) if isinstance(value, Number) else None
    number = whole(*parsed) if parsed is not None and abs(parsed[0]) < 10**30 else None
    if number is None or number < 1:
        raise ModelConfigError(
            f"{path}: key {key!r}: expected a positive whole number, got {_kind(value)}"
        )
    if number > MAX_MODEL_COUNT:
        raise ModelConfigError(
            f"{path}: key {key!r}: expected a positive whole number up to 10**12, got"
            f" {_kind(value)}"
        )
    return number


def _heads(path: str, table: dict[str, Any], hidden: int, heads: int) -> tuple[int, int]:
    """The K/V heads and the head size, checked against the attention heads: the K/V heads
    divide them (grouped-query attention), and without ``head_dim`` the heads divide
    ``hidden_size`` (``head_dim`` is then ``hidden_size / num_attention_heads``)."""
    kv = _count(path, table, "num_key_value_heads", heads)
    if kv > heads:
        raise ModelConfigError(
            f"{path}: key 'num_key_value_heads': {kv} is above num_attention_heads ({heads})"
        )
    if heads % kv:
        raise ModelConfigError(
            f"{path}: key 'num_key_value_heads': {kv} does not divide num_attention_heads ({heads})"
        )
    if table.get("head_dim") is None and hidden % heads:
        raise ModelConfigError(
            f"{path}: key 'num_attention_heads': {heads} does not divide hidden_size ({hidden}),"
            " and there is no head_dim to give the head size"
        )
    return kv, _count(path, table, "head_dim", hidden // heads)


_OTHER_MOE_KEYS = ("num_experts", "n_routed_experts", "moe_intermediate_size", "n_shared_experts")
"""Keys of mixture-of-experts layouts other than Mixtral's (Qwen-MoE, DeepSeek): their
shared experts and expert sizes are not modelled, so a config with them is refused rather
than read as a dense model."""


def _experts(path: str, table: dict[str, Any]) -> tuple[int, int]:
    """``(num_local_experts, num_experts_per_tok)``, ``(0, 0)`` for a dense model."""
    other = [key for key in _OTHER_MOE_KEYS if table.get(key) not in (None, 0)]
    if other and table.get("num_local_experts") is None:
        raise ModelConfigError(
            f"{path}: key {other[0]!r}: a mixture of experts this reader does not model (it"
            " reads Mixtral's num_local_experts and num_experts_per_tok)"
        )
    if table.get("num_local_experts") is None and table.get("num_experts_per_tok") is None:
        return 0, 0
    experts = _count(path, table, "num_local_experts")
    per_tok = _count(path, table, "num_experts_per_tok")
    if per_tok > experts:
        raise ModelConfigError(
            f"{path}: key 'num_experts_per_tok': {per_tok} is above num_local_experts ({experts})"
        )
    return experts, per_tok


def _dtype(path: str, table: dict[str, Any]) -> int:
    key = "torch_dtype" if "torch_dtype" in table else "dtype"
    value = table.get(key)
    if value is None:
        return 2  # configs without a dtype: the bfloat16 every preset uses
    if not isinstance(value, str) or isinstance(value, Number) or value not in _DTYPE_BYTES:
        raise ModelConfigError(
            f"{path}: key {key!r}: expected one of {', '.join(_DTYPE_BYTES)}, got {_kind(value)}"
        )
    return _DTYPE_BYTES[value]


def load_model_config(path: str | os.PathLike[str]) -> ModelSpec:
    """A :class:`ModelSpec` from a Hugging Face ``config.json``.

    Required keys: ``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``,
    ``intermediate_size``, ``vocab_size``; optional: ``num_key_value_heads`` (default: the
    attention heads), ``head_dim`` (default: hidden / heads), ``num_local_experts`` and
    ``num_experts_per_tok`` (MoE, both or neither), ``torch_dtype`` (or ``dtype``;
    default bfloat16), ``tie_word_embeddings`` (default false). Other keys are ignored. A
    missing key or a bad value raises :class:`ModelConfigError` naming the file and key.
    """
    name = os.fspath(path)
    table = _read_json(name, ModelConfigError)
    counts = {
        key: _count(name, table, key)
        for key in (
            "num_hidden_layers",
            "hidden_size",
            "num_attention_heads",
            "intermediate_size",
            "vocab_size",
        )
    }
    kv, head_dim = _heads(name, table, counts["hidden_size"], counts["num_attention_heads"])
    experts, per_tok = _experts(name, table)
    tied = table.get("tie_word_embeddings", False)
    if not isinstance(tied, bool):
        raise ModelConfigError(
            f"{name}: key 'tie_word_embeddings': expected true or false, got {_kind(tied)}"
        )
    label = table.get("_name_or_path")
    if not isinstance(label, str) or isinstance(label, Number) or not label:
        label = name
    return ModelSpec(
        name=label,
        num_key_value_heads=kv,
        head_dim=head_dim,
        num_local_experts=experts,
        num_experts_per_tok=per_tok,
        dtype_bytes=_dtype(name, table),
        tie_word_embeddings=tied,
        source=name,
        **counts,  # type: ignore[arg-type]
    )


def resolve_model(model: str | os.PathLike[str] | ModelSpec) -> ModelSpec:
    """A preset name of :data:`MODELS`, a ``config.json`` path, or a spec as is."""
    if isinstance(model, ModelSpec):
        return model
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(
            f"model must be a preset name, a config.json path or a ModelSpec, got {show(model)}"
        )
    text = path("model", model)
    if text in MODELS:
        return MODELS[text]
    if not os.path.exists(text) and not text.lower().endswith(".json"):
        raise ModelConfigError(
            f"unknown model {text!r}: give a config.json path or one of {', '.join(MODELS)}"
        )
    return load_model_config(text)


# --------------------------------------------------------------------------- GPU profiles

_GPU_KEYS = {f.name for f in fields(GpuSpec)} - {"name", "source"}


def _gpu_value(path: str, key: str, value: object) -> float:
    if isinstance(value, Number):
        parsed = exact(value)
        if parsed is not None and abs(parsed[0]) < 10**30:
            return float(parsed[0])
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise ModelConfigError(f"{path}: key {key!r}: expected a number, got {_kind(value)}")


def load_gpu_profile(path: str | os.PathLike[str]) -> GpuSpec:
    """A :class:`GpuSpec` from a TOML (``.toml``) or JSON file: ``preset = "NAME"`` (a
    :data:`GPUS` entry to start from; without it every datasheet key is required), ``name``
    and any :class:`GpuSpec` field in SI units (``peak_flops`` in FLOP/s, bandwidths in
    bytes/s, ``memory_bytes``, efficiencies as fractions, times in seconds). An unknown key
    or a bad value raises :class:`ModelConfigError` naming the file and key."""
    name = os.fspath(path)
    if name.lower().endswith(".toml"):
        from .engine import _load_toml

        try:
            table = _load_toml(name, read_profile_bytes(name, ModelConfigError))
        except ModelConfigError:
            raise
        except ValueError as err:
            raise ModelConfigError(str(err)) from None
    else:
        table = _read_json(name, ModelConfigError)
    base: dict[str, Any] = {}
    preset = table.get("preset")
    if preset is not None:
        if not isinstance(preset, str) or isinstance(preset, Number) or preset not in GPUS:
            raise ModelConfigError(
                f"{name}: key 'preset': expected one of {', '.join(GPUS)}, got {_kind(preset)}"
            )
        base = GPUS[preset].to_dict()
    values: dict[str, Any] = dict(base)
    values["source"] = name
    values["name"] = f"{preset} ({os.path.basename(name)})" if preset else os.path.basename(name)
    for key, value in table.items():
        if key == "preset":
            continue
        if key == "name":
            if not isinstance(value, str) or isinstance(value, Number):
                raise ModelConfigError(f"{name}: key 'name': expected a string, got {_kind(value)}")
            values["name"] = str(value)
        elif key in _GPU_KEYS:
            values[key] = _gpu_value(name, key, value)
        else:
            raise ModelConfigError(
                f"{name}: unknown key {key!r}; known keys: preset, name, "
                + ", ".join(sorted(_GPU_KEYS))
            )
    for key in ("peak_flops", "hbm_bandwidth", "memory_bytes", "link_bandwidth"):
        if key not in values:
            raise ModelConfigError(f"{name}: key {key!r}: missing (or give a preset)")
    try:
        return GpuSpec(**values)
    except ValueError as err:
        raise ModelConfigError(f"{name}: {err}") from None


def resolve_gpu(gpu: str | os.PathLike[str] | GpuSpec) -> GpuSpec:
    """A preset name of :data:`GPUS`, a profile path, or a spec as is."""
    if isinstance(gpu, GpuSpec):
        return gpu
    if not isinstance(gpu, (str, os.PathLike)):
        raise TypeError(f"gpu must be a preset name, a profile path or a GpuSpec, got {show(gpu)}")
    text = path("gpu", gpu)
    if text in GPUS:
        return GPUS[text]
    if not os.path.exists(text) and not text.lower().endswith((".json", ".toml")):
        raise ModelConfigError(
            f"unknown GPU {text!r}: give a profile path (.toml or .json) or one of"
            f" {', '.join(GPUS)}"
        )
    return load_gpu_profile(text)


# --------------------------------------------------------------------------- engine_for


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
        dtype_bytes=model.dtype_bytes,
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
    **overrides: Any,
) -> tuple[RooflineModel, KVMemory]:
    """The step-time model and KV memory of ``model`` on ``tp`` GPUs of type ``gpu``.

    ``model`` is a :data:`MODELS` name, a ``config.json`` path or a :class:`ModelSpec`;
    ``gpu`` a :data:`GPUS` name, a GPU profile path or a :class:`GpuSpec`; ``overrides``
    replace :class:`GpuSpec` fields (``peak_flops=...``, ``hbm_efficiency=...``);
    ``serving_engine`` and ``attention_backend`` name the software (:mod:`.software`:
    the serving engine's CPU costs, how prefill attention is charged; ``serving_engine``
    may be a :class:`~.software.ServingEngine`, as a fitted profile gives). Returns
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
    spec = resolve_model(model)
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


_TIME_SOURCES = {
    "overhead_s": "-step_overhead_s or layer_overhead_s",
    "token_s": "peak_flops (--gpu-tflops) x gemm_efficiency",
    "gemm_fixed_s": "peak_flops (--gpu-tflops) x gemm_efficiency",
    "expert_fixed_s": "peak_flops (--gpu-tflops) x gemm_efficiency",
    "head_row_s": "peak_flops (--gpu-tflops) x gemm_efficiency",
    "dense_read_s": "hbm_bandwidth (--gpu-hbm-tbs) x weight_read_efficiency",
    "expert_read_s": "hbm_bandwidth (--gpu-hbm-tbs) x weight_read_efficiency",
    "pair_s": "peak_flops (--gpu-tflops) x attention_efficiency",
    "chunk_sq_s": "peak_flops (--gpu-tflops) x chunk_attention_efficiency",
    "kv_token_s": "hbm_bandwidth (--gpu-hbm-tbs) x hbm_efficiency",
    "allreduce_call_s": "-allreduce_latency_s",
    "allreduce_token_s": "link_bandwidth (--gpu-link-gbs) x link_efficiency",
}
"""Each time coefficient of the roofline and the GPU figure it is inversely proportional to
(``-FIELD``: the GPU field in seconds it is proportional to), for :func:`_check_times`."""


def _check_times(roofline: RooflineModel) -> None:
    """Refuse a roofline with a time coefficient above ``MAX_COEFFICIENT_S`` (the linear
    engine's bound): the simulated times would reach infinity and the report mean nothing."""
    from .engine import MAX_COEFFICIENT_S

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
