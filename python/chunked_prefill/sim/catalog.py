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
import re
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
    "GPU_ALIASES",
    "KV_CACHE_DTYPES",
    "MODELS",
    "MODEL_ALIASES",
    "QUANTIZATIONS",
    "TP_DEGREES",
    "EngineFitError",
    "EngineRangeError",
    "GpuSpec",
    "ModelConfigError",
    "ModelSpec",
    "engine_for",
    "fits",
    "gpu_name",
    "load_gpu_profile",
    "load_model_config",
    "model_name",
    "resolve_gpu",
    "resolve_model",
    "with_dtypes",
]

TP_DEGREES = (1, 2, 4, 8)
MAX_TP = 1024
"""The largest tensor-parallel degree (``--tp``'s limit too)."""
"""The tensor-parallel degrees ``chunked-prefill engines`` lists."""

_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
_WEIGHT_DTYPE_BYTES = {**_DTYPE_BYTES, "fp8": 1}
KV_CACHE_DTYPES = {
    "auto": 0,
    "bfloat16": 2,
    "float16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
}
"""vLLM's ``--kv-cache-dtype`` values and their bytes per element (``auto``: the model's
dtype)."""
QUANTIZATIONS = ("fp8",)
"""vLLM's ``--quantization`` values the catalog models (FP8 weights quantized at load)."""


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
    Qwen2/3 and Mixtral have; biases and norms other than RMSNorm weights are ignored)."""

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
    expert_intermediate_size: int = 0
    """The MLP size of one expert (``moe_intermediate_size``); 0: ``intermediate_size``."""
    dtype_bytes: int = 2
    """Bytes per activation (``torch_dtype``: bfloat16/float16 2, float32 4): the compute
    dtype, the weights outside the decoder layers' linear layers, and the KV cache unless
    ``kv_dtype_bytes`` says otherwise."""
    weight_dtype: str = "bfloat16"
    """The dtype of the decoder layers' linear weights: ``torch_dtype``'s, or ``"fp8"`` for
    an FP8 checkpoint (``quantization_config``) or ``engine_for(quantization="fp8")``."""
    kv_dtype_bytes: int = 0
    """Bytes per K/V element (``engine_for(kv_cache_dtype=...)``); 0: ``dtype_bytes``."""
    tie_word_embeddings: bool = False
    source: str = ""
    """Where the figures come from."""

    def __post_init__(self) -> None:
        if self.weight_dtype not in _WEIGHT_DTYPE_BYTES:
            raise ValueError(
                f"model {self.name}: weight_dtype must be one of"
                f" {', '.join(_WEIGHT_DTYPE_BYTES)}, got {self.weight_dtype!r}"
            )
        if self.weight_dtype != "fp8" and self.weight_dtype_bytes != self.dtype_bytes:
            raise ValueError(
                f"model {self.name}: weight_dtype {self.weight_dtype!r} is"
                f" {self.weight_dtype_bytes} bytes but dtype_bytes is {self.dtype_bytes}"
                " (only fp8 weights differ from the compute dtype)"
            )
        if self.kv_dtype_bytes not in (0, 1, 2, 4):
            raise ValueError(
                f"model {self.name}: kv_dtype_bytes must be 0 (dtype_bytes), 1, 2 or 4, got"
                f" {self.kv_dtype_bytes!r}"
            )
        if self.expert_intermediate_size and not self.is_moe:
            raise ValueError(
                f"model {self.name}: expert_intermediate_size is for a mixture of experts"
                " (num_local_experts > 0)"
            )

    @property
    def is_moe(self) -> bool:
        """Whether the MLP is a mixture of experts."""
        return self.num_local_experts > 0

    @property
    def weight_dtype_bytes(self) -> int:
        """Bytes per weight of the decoder layers' linear layers (1 for fp8)."""
        return _WEIGHT_DTYPE_BYTES[self.weight_dtype]

    @property
    def kv_element_bytes(self) -> int:
        """Bytes per K/V element: ``kv_dtype_bytes``, or ``dtype_bytes`` when it is 0."""
        return self.kv_dtype_bytes or self.dtype_bytes

    def attention_params(self, kv_heads: int | None = None) -> int:
        """Q, K, V and O projection weights of one layer (``kv_heads`` K/V heads)."""
        kv = self.num_key_value_heads if kv_heads is None else kv_heads
        q = self.num_attention_heads * self.head_dim
        return 2 * self.hidden_size * q + 2 * self.hidden_size * kv * self.head_dim

    @property
    def mlp_params(self) -> int:
        """Gate, up and down projection weights of one MLP (one expert of a MoE layer, of
        ``expert_intermediate_size`` when set)."""
        return 3 * self.hidden_size * (self.expert_intermediate_size or self.intermediate_size)

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
        """The weights one token uses: all but the experts it is not routed to (the
        "activated parameters" of the model cards, embedding included)."""
        idle = self.num_local_experts - self.num_experts_per_tok if self.is_moe else 0
        return self.num_params - self.num_hidden_layers * idle * self.mlp_params

    def kv_heads_per_gpu(self, tp: int) -> int:
        """K/V heads each GPU holds: ``kv_heads / tp``, at least 1 (vLLM replicates a K/V
        head when there are fewer heads than GPUs)."""
        return max(1, self.num_key_value_heads // tp)

    def kv_bytes_per_token(self, tp: int = 1) -> int:
        """K and V of one token in every layer, on one GPU of a TP group (at
        :attr:`kv_element_bytes` per element)."""
        return (
            2
            * self.num_hidden_layers
            * self.kv_heads_per_gpu(tp)
            * self.head_dim
            * self.kv_element_bytes
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
        projections replicated when there are fewer K/V heads than GPUs), norms whole. The
        decoder layers' linear weights are at :attr:`weight_dtype_bytes`; the embedding, LM
        head, norms and MoE router at ``dtype_bytes`` (FP8 checkpoints keep them so)."""
        experts = max(1, self.num_local_experts)
        kv_dim = self.kv_heads_per_gpu(tp) * self.head_dim
        q_dim = self.num_attention_heads * self.head_dim // tp
        attention = 2 * self.hidden_size * q_dim + 2 * self.hidden_size * kv_dim
        linear = attention + experts * self.mlp_params // tp
        kept = self.router_params + 2 * self.hidden_size  # the router is replicated
        return (
            self.num_hidden_layers * (linear * self.weight_dtype_bytes + kept * self.dtype_bytes)
            + (self.embedding_params // tp + self.hidden_size) * self.dtype_bytes
        )

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
    activation_reserve_bytes: int = 2 * GIB
    """Memory kept back for activations (as the simulator's Llama-2-7B presets)."""
    source: str = ""
    """Where the figures come from."""
    fp8_peak_flops: float = 0.0
    """Dense FP8 tensor-core FLOP/s (no sparsity); 0: no FP8 tensor cores (A100, A10G)."""

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
    "llama-3.2-1b": ModelSpec(
        name="llama-3.2-1b",
        num_hidden_layers=16,
        hidden_size=2048,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=64,
        intermediate_size=8192,
        vocab_size=128256,
        tie_word_embeddings=True,
        source=_HF.format("meta-llama/Llama-3.2-1B-Instruct"),
    ),
    "llama-3.2-3b": ModelSpec(
        name="llama-3.2-3b",
        num_hidden_layers=28,
        hidden_size=3072,
        num_attention_heads=24,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=8192,
        vocab_size=128256,
        tie_word_embeddings=True,
        source=_HF.format("meta-llama/Llama-3.2-3B-Instruct"),
    ),
    "llama-3.3-70b": ModelSpec(
        name="llama-3.3-70b",
        num_hidden_layers=80,
        hidden_size=8192,
        num_attention_heads=64,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=28672,
        vocab_size=128256,
        source=_HF.format("meta-llama/Llama-3.3-70B-Instruct"),
    ),
    "llama-2-7b": ModelSpec(
        name="llama-2-7b",
        num_hidden_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_key_value_heads=32,
        head_dim=128,
        intermediate_size=11008,
        vocab_size=32000,
        weight_dtype="float16",
        source=_HF.format("meta-llama/Llama-2-7b-hf"),
    ),
    "llama-2-70b": ModelSpec(
        name="llama-2-70b",
        num_hidden_layers=80,
        hidden_size=8192,
        num_attention_heads=64,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=28672,
        vocab_size=32000,
        weight_dtype="float16",
        source=_HF.format("meta-llama/Llama-2-70b-hf"),
    ),
    "mistral-7b": ModelSpec(
        name="mistral-7b",
        num_hidden_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=14336,
        vocab_size=32768,
        source=_HF.format("mistralai/Mistral-7B-Instruct-v0.3"),
    ),
    "qwen2.5-7b": ModelSpec(
        name="qwen2.5-7b",
        num_hidden_layers=28,
        hidden_size=3584,
        num_attention_heads=28,
        num_key_value_heads=4,
        head_dim=128,
        intermediate_size=18944,
        vocab_size=152064,
        source=_HF.format("Qwen/Qwen2.5-7B-Instruct"),
    ),
    "qwen2.5-14b": ModelSpec(
        name="qwen2.5-14b",
        num_hidden_layers=48,
        hidden_size=5120,
        num_attention_heads=40,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=13824,
        vocab_size=152064,
        source=_HF.format("Qwen/Qwen2.5-14B-Instruct"),
    ),
    "qwen2.5-72b": ModelSpec(
        name="qwen2.5-72b",
        num_hidden_layers=80,
        hidden_size=8192,
        num_attention_heads=64,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=29568,
        vocab_size=152064,
        source=_HF.format("Qwen/Qwen2.5-72B-Instruct"),
    ),
    "qwen3-8b": ModelSpec(
        name="qwen3-8b",
        num_hidden_layers=36,
        hidden_size=4096,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=12288,
        vocab_size=151936,
        source=_HF.format("Qwen/Qwen3-8B"),
    ),
    "qwen3-32b": ModelSpec(
        name="qwen3-32b",
        num_hidden_layers=64,
        hidden_size=5120,
        num_attention_heads=64,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=25600,
        vocab_size=151936,
        source=_HF.format("Qwen/Qwen3-32B"),
    ),
    "qwen3-30b-a3b": ModelSpec(
        name="qwen3-30b-a3b",
        num_hidden_layers=48,
        hidden_size=2048,
        num_attention_heads=32,
        num_key_value_heads=4,
        head_dim=128,
        intermediate_size=6144,
        vocab_size=151936,
        num_local_experts=128,
        num_experts_per_tok=8,
        expert_intermediate_size=768,
        source=_HF.format("Qwen/Qwen3-30B-A3B"),
    ),
    "qwen3-235b-a22b": ModelSpec(
        name="qwen3-235b-a22b",
        num_hidden_layers=94,
        hidden_size=4096,
        num_attention_heads=64,
        num_key_value_heads=4,
        head_dim=128,
        intermediate_size=12288,
        vocab_size=151936,
        num_local_experts=128,
        num_experts_per_tok=8,
        expert_intermediate_size=1536,
        source=_HF.format("Qwen/Qwen3-235B-A22B"),
    ),
    "mixtral-8x22b": ModelSpec(
        name="mixtral-8x22b",
        num_hidden_layers=56,
        hidden_size=6144,
        num_attention_heads=48,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=16384,
        vocab_size=32768,
        num_local_experts=8,
        num_experts_per_tok=2,
        source=_HF.format("mistralai/Mixtral-8x22B-Instruct-v0.1"),
    ),
    "llama-3.1-405b": ModelSpec(
        name="llama-3.1-405b",
        num_hidden_layers=126,
        hidden_size=16384,
        num_attention_heads=128,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=53248,
        vocab_size=128256,
        source=_HF.format("meta-llama/Llama-3.1-405B-Instruct"),
    ),
}
"""Model presets (``--model NAME``), the values of each model's ``config.json`` (bfloat16
but the Llama-2 models' float16; untied embeddings but Llama-3.2's; Qwen3-30B-A3B's
``intermediate_size`` is its unused dense MLP size, ``moe_intermediate_size`` its experts')."""

MODEL_ALIASES: dict[str, str] = {
    "meta-llama/Llama-3.1-8B": "llama-3.1-8b",
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "meta-llama/Meta-Llama-3.1-8B": "llama-3.1-8b",
    "meta-llama/Meta-Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
    "meta-llama/Llama-3.1-70B-Instruct": "llama-3.1-70b",
    "meta-llama/Meta-Llama-3.1-70B": "llama-3.1-70b",
    "meta-llama/Meta-Llama-3.1-70B-Instruct": "llama-3.1-70b",
    "meta-llama/Llama-3.2-1B": "llama-3.2-1b",
    "meta-llama/Llama-3.2-1B-Instruct": "llama-3.2-1b",
    "meta-llama/Llama-3.2-3B": "llama-3.2-3b",
    "meta-llama/Llama-3.2-3B-Instruct": "llama-3.2-3b",
    "meta-llama/Llama-3.3-70B-Instruct": "llama-3.3-70b",
    "meta-llama/Llama-2-7b-hf": "llama-2-7b",
    "meta-llama/Llama-2-7b-chat-hf": "llama-2-7b",
    "meta-llama/Llama-2-70b-hf": "llama-2-70b",
    "meta-llama/Llama-2-70b-chat-hf": "llama-2-70b",
    "mistralai/Mistral-7B-v0.3": "mistral-7b",
    "mistralai/Mistral-7B-Instruct-v0.3": "mistral-7b",
    "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b",
    "mistralai/Mixtral-8x7B-Instruct-v0.1": "mixtral-8x7b",
    "Qwen/Qwen2.5-7B": "qwen2.5-7b",
    "Qwen/Qwen2.5-7B-Instruct": "qwen2.5-7b",
    "Qwen/Qwen2.5-14B": "qwen2.5-14b",
    "Qwen/Qwen2.5-14B-Instruct": "qwen2.5-14b",
    "Qwen/Qwen2.5-32B": "qwen2.5-32b",
    "Qwen/Qwen2.5-32B-Instruct": "qwen2.5-32b",
    "Qwen/Qwen2.5-72B": "qwen2.5-72b",
    "Qwen/Qwen2.5-72B-Instruct": "qwen2.5-72b",
    "Qwen/Qwen3-8B": "qwen3-8b",
    "Qwen/Qwen3-8B-Base": "qwen3-8b",
    "Qwen/Qwen3-32B": "qwen3-32b",
    "Qwen/Qwen3-30B-A3B": "qwen3-30b-a3b",
    "Qwen/Qwen3-30B-A3B-Base": "qwen3-30b-a3b",
    "Qwen/Qwen3-235B-A22B": "qwen3-235b-a22b",
    "mistralai/Mixtral-8x22B-v0.1": "mixtral-8x22b",
    "mistralai/Mixtral-8x22B-Instruct-v0.1": "mixtral-8x22b",
    "meta-llama/Llama-3.1-405B": "llama-3.1-405b",
    "meta-llama/Llama-3.1-405B-Instruct": "llama-3.1-405b",
    "meta-llama/Meta-Llama-3.1-405B": "llama-3.1-405b",
    "meta-llama/Meta-Llama-3.1-405B-Instruct": "llama-3.1-405b",
    # Same layers, widths and vocabulary as a preset; what differs (RoPE scaling, the
    # context length) costs nothing in a step.
    "meta-llama/Meta-Llama-3-8B": "llama-3.1-8b",
    "meta-llama/Meta-Llama-3-8B-Instruct": "llama-3.1-8b",
    "meta-llama/Meta-Llama-3-70B": "llama-3.1-70b",
    "meta-llama/Meta-Llama-3-70B-Instruct": "llama-3.1-70b",
    "Qwen/Qwen2-7B": "qwen2.5-7b",
    "Qwen/Qwen2-7B-Instruct": "qwen2.5-7b",
    "Qwen/Qwen2-72B": "qwen2.5-72b",
    "Qwen/Qwen2-72B-Instruct": "qwen2.5-72b",
}
"""Hugging Face repo ids of the presets (base and instruct models share a config), matched
without case: ``--model meta-llama/Llama-3.1-8B-Instruct`` is ``llama-3.1-8b``. Nothing is
downloaded; another model's ``config.json`` is given as a path."""

_MODEL_KEYS = {alias.lower(): preset for alias, preset in MODEL_ALIASES.items()}

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
        " NVLink 600 GB/s = 300 GB/s per direction; no FP8)",
    ),
    "a100-40gb": GpuSpec(
        name="a100-40gb",
        peak_flops=312e12,
        hbm_bandwidth=1.555e12,
        memory_bytes=40 * GIB,
        link_bandwidth=300e9,
        source=_NVIDIA.format("a100") + " (SXM 40 GB: 312 TFLOP/s bf16 dense, 1 555 GB/s,"
        " NVLink 600 GB/s = 300 GB/s per direction; no FP8)",
    ),
    "h100-sxm": GpuSpec(
        name="h100-sxm",
        peak_flops=989e12,
        fp8_peak_flops=1979e12,
        hbm_bandwidth=3.35e12,
        memory_bytes=80 * GIB,
        link_bandwidth=450e9,
        weight_read_efficiency=HOPPER_WEIGHT_READ_EFFICIENCY,
        source=_NVIDIA.format("h100") + " (SXM: 989 TFLOP/s bf16 and 1 979 fp8 dense,"
        " 3.35 TB/s, NVLink 900 GB/s = 450 GB/s per direction)",
    ),
    "h100-pcie": GpuSpec(
        name="h100-pcie",
        peak_flops=756.5e12,
        fp8_peak_flops=1513e12,
        hbm_bandwidth=2.0e12,
        memory_bytes=80 * GIB,
        link_bandwidth=64e9,
        weight_read_efficiency=HOPPER_WEIGHT_READ_EFFICIENCY,
        source=_NVIDIA.format("h100") + " (PCIe: 1 513 TFLOP/s bf16 and 3 026 fp8 with"
        " sparsity, half that dense; 80 GB at 2.0 TB/s; PCIe Gen5 x16, 128 GB/s = 64 GB/s"
        " per direction: the NVLink bridge joins pairs of cards only)",
    ),
    "h100-nvl": GpuSpec(
        name="h100-nvl",
        peak_flops=835.5e12,
        fp8_peak_flops=1670.5e12,
        hbm_bandwidth=3.9e12,
        memory_bytes=94_000_000_000,
        link_bandwidth=300e9,
        weight_read_efficiency=HOPPER_WEIGHT_READ_EFFICIENCY,
        source=_NVIDIA.format("h100") + " (NVL: 1 671 TFLOP/s bf16 and 3 341 fp8 with"
        " sparsity, half that dense; 94 GB at 3.9 TB/s; NVLink bridge 600 GB/s = 300 GB/s"
        " per direction)",
    ),
    "h200": GpuSpec(
        name="h200",
        peak_flops=989e12,
        fp8_peak_flops=1979e12,
        hbm_bandwidth=4.8e12,
        memory_bytes=141_000_000_000,
        link_bandwidth=450e9,
        weight_read_efficiency=HOPPER_WEIGHT_READ_EFFICIENCY,
        source=_NVIDIA.format("h200") + " (SXM: 989 TFLOP/s bf16 and 1 979 fp8 dense, 141 GB"
        " at 4.8 TB/s, NVLink 900 GB/s = 450 GB/s per direction)",
    ),
    "h20": GpuSpec(
        name="h20",
        peak_flops=148e12,
        fp8_peak_flops=296e12,
        hbm_bandwidth=4.0e12,
        memory_bytes=96_000_000_000,
        link_bandwidth=450e9,
        weight_read_efficiency=HOPPER_WEIGHT_READ_EFFICIENCY,
        source="https://willitrunai.com/es/gpus/h20-96gb (NVIDIA publishes no public"
        " datasheet: 148 TFLOP/s fp16 dense, 296 TOPS int8 = the fp8 rate on Hopper, 96 GB"
        " HBM3 at 4.0 TB/s, NVLink 900 GB/s = 450 GB/s per direction)",
    ),
    "b200": GpuSpec(
        name="b200",
        peak_flops=2.25e15,
        fp8_peak_flops=4.5e15,
        hbm_bandwidth=8.0e12,
        memory_bytes=180_000_000_000,
        link_bandwidth=900e9,
        weight_read_efficiency=HOPPER_WEIGHT_READ_EFFICIENCY,
        source=_NVIDIA.format("hgx") + " (HGX B200, 8 GPUs: 36 PFLOP/s fp16/bf16 and 72"
        " fp8 with sparsity, 1.44 TB of HBM3e at 64 TB/s; per GPU, dense: 2.25 and 4.5"
        " PFLOP/s, 180 GB at 8 TB/s, NVLink 5 1.8 TB/s = 900 GB/s per direction)",
    ),
    "l40s": GpuSpec(
        name="l40s",
        peak_flops=362.05e12,
        fp8_peak_flops=733e12,
        hbm_bandwidth=864e9,
        memory_bytes=48_000_000_000,
        link_bandwidth=32e9,
        source=_NVIDIA.format("l40s") + " (362.05 TFLOP/s bf16 and 733 fp8 dense, 48 GB"
        " GDDR6 at 864 GB/s, no NVLink: PCIe Gen4 x16, 64 GB/s = 32 GB/s per direction)",
    ),
    "l4": GpuSpec(
        name="l4",
        peak_flops=121e12,
        fp8_peak_flops=242.5e12,
        hbm_bandwidth=300e9,
        memory_bytes=24_000_000_000,
        link_bandwidth=32e9,
        source=_NVIDIA.format("l4") + " (242 TFLOP/s bf16 and 485 fp8 with sparsity, half"
        " that dense; 24 GB GDDR6 at 300 GB/s; PCIe Gen4 x16, 64 GB/s = 32 GB/s per"
        " direction)",
    ),
    "a10g": GpuSpec(
        name="a10g",
        peak_flops=70e12,
        hbm_bandwidth=600e9,
        memory_bytes=24_000_000_000,
        link_bandwidth=32e9,
        source="https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference/"
        " (AWS G5's A10G: 70 TFLOP/s bf16 dense against the A10's 125, 24 GB GDDR6 at"
        " 600 GB/s; PCIe Gen4 x16, 32 GB/s per direction; no FP8)",
    ),
    "mi300x": GpuSpec(
        name="mi300x",
        peak_flops=1307.4e12,
        fp8_peak_flops=2614.9e12,
        hbm_bandwidth=5.3e12,
        memory_bytes=192_000_000_000,
        link_bandwidth=448e9,
        source="https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html"
        " (1 307.4 TFLOP/s fp16/bf16 and 2 614.9 fp8 dense, 192 GB HBM3 at 5.3 TB/s,"
        " 7 Infinity Fabric links of 128 GB/s = 448 GB/s per direction to the 7 others)",
    ),
}
"""GPU presets (``--gpu NAME``): datasheet figures; the efficiency factors are the
:class:`GpuSpec` defaults (``step_overhead_s`` from Vidur's fitted intercepts, see
``docs/engines.md``: the Hopper and Blackwell parts take the H100's, the others the
A100's)."""

GPU_ALIASES: dict[str, str] = {
    "a100": "a100-80gb",
    "a100-80g": "a100-80gb",
    "a100-sxm": "a100-80gb",
    "a100-sxm4-80gb": "a100-80gb",
    "a100-40g": "a100-40gb",
    "a100-sxm4-40gb": "a100-40gb",
    "h100": "h100-sxm",
    "h100-80gb": "h100-sxm",
    "h100-sxm5": "h100-sxm",
    "h100-80gb-hbm3": "h100-sxm",
    "h200-sxm": "h200",
    "h20-96gb": "h20",
    "b200-sxm": "b200",
    "mi300": "mi300x",
}
"""Short names users type, and the names ``nvidia-smi``/``rocm-smi`` print (``NVIDIA
H100 80GB HBM3``, ``NVIDIA A100-SXM4-40GB``, ``AMD Instinct MI300X``): matched without
case, spaces and underscores read as ``-``, a leading ``nvidia-``, ``amd-instinct-`` or
``amd-`` dropped (:func:`gpu_name`)."""


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


def _present(table: dict[str, Any], key: str) -> bool:
    """Whether ``table[key]`` is set: not absent, null, 0, false or empty."""
    value = table.get(key)
    if isinstance(value, Number):
        parsed = exact(value)
        return parsed is None or parsed[0] != 0
    return value not in (None, False, 0) and value != [] and value != {}


def _refuse_moe_layouts(path: str, table: dict[str, Any]) -> None:
    """Refuse, naming the key, the mixture-of-experts layouts the roofline does not model:
    shared experts (DeepSeek's ``n_routed_experts``/``n_shared_experts``, Qwen2-MoE's
    ``shared_expert_intermediate_size``) and dense layers among the MoE ones
    (``mlp_only_layers``, ``decoder_sparse_step`` other than 1)."""
    for key in ("n_routed_experts", "n_shared_experts"):
        if _present(table, key):
            raise ModelConfigError(
                f"{path}: key {key!r}: DeepSeek-style routed and shared experts are not"
                " modelled (the reader takes Mixtral's num_local_experts or Qwen-MoE's"
                " num_experts, without shared experts)"
            )
    if _present(table, "shared_expert_intermediate_size"):
        raise ModelConfigError(
            f"{path}: key 'shared_expert_intermediate_size': shared experts are not modelled"
            f" (got {_kind(table['shared_expert_intermediate_size'])}; only 0 or absent)"
        )
    if _present(table, "mlp_only_layers"):
        raise ModelConfigError(
            f"{path}: key 'mlp_only_layers': dense layers among the MoE layers are not"
            f" modelled (got {_kind(table['mlp_only_layers'])}; only [] or absent)"
        )
    step = _count(path, table, "decoder_sparse_step", 1)
    if step != 1:
        raise ModelConfigError(
            f"{path}: key 'decoder_sparse_step': {step}: MoE in every {step}th layer only,"
            " dense layers among the MoE layers are not modelled (only 1)"
        )


def _experts(path: str, table: dict[str, Any]) -> tuple[int, int, int]:
    """``(experts, num_experts_per_tok, expert_intermediate_size)``, ``(0, 0, 0)`` for a
    dense model. Experts: Mixtral's ``num_local_experts`` or Qwen-MoE's ``num_experts``
    (with its ``moe_intermediate_size``, the MLP size of one expert)."""
    _refuse_moe_layouts(path, table)
    keys = [key for key in ("num_local_experts", "num_experts") if _present(table, key)]
    if len(keys) == 2:
        raise ModelConfigError(
            f"{path}: key 'num_experts': give num_local_experts or num_experts, not both"
        )
    if not keys:
        if table.get("num_experts_per_tok") is not None:
            _count(path, table, "num_local_experts")  # missing: the error names it
        if _present(table, "moe_intermediate_size"):
            raise ModelConfigError(
                f"{path}: key 'moe_intermediate_size': an expert size without experts"
                " (num_local_experts or num_experts)"
            )
        return 0, 0, 0
    (key,) = keys
    experts = _count(path, table, key)
    per_tok = _count(path, table, "num_experts_per_tok")
    if per_tok > experts:
        raise ModelConfigError(
            f"{path}: key 'num_experts_per_tok': {per_tok} is above {key} ({experts})"
        )
    # Qwen-MoE's experts have their own size; Mixtral's are intermediate_size.
    size = _count(path, table, "moe_intermediate_size", None if key == "num_experts" else 0)
    return experts, per_tok, size


def _dtype(path: str, table: dict[str, Any]) -> str:
    key = "torch_dtype" if "torch_dtype" in table else "dtype"
    value = table.get(key)
    if value is None:
        return "bfloat16"  # configs without a dtype: the bfloat16 every preset uses
    if not isinstance(value, str) or isinstance(value, Number) or value not in _DTYPE_BYTES:
        raise ModelConfigError(
            f"{path}: key {key!r}: expected one of {', '.join(_DTYPE_BYTES)}, got {_kind(value)}"
        )
    return value


FP8_QUANT_METHODS = ("fp8", "fbgemm_fp8", "compressed-tensors")
"""``quantization_config.quant_method`` values read as FP8 weights (compressed-tensors only
when every config group's weights are 8-bit floats)."""


def _fp8_groups(path: str, quant: dict[str, Any]) -> None:
    """Check that every config group of a compressed-tensors config quantizes its weights
    to 8-bit floats (``{"type": "float", "num_bits": 8}``), naming the first that does not."""
    groups = quant.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise ModelConfigError(
            f"{path}: key 'quantization_config.config_groups': expected a non-empty object,"
            f" got {_kind(groups)}"
        )
    for name, group in groups.items():
        key = f"quantization_config.config_groups.{name}.weights"
        weights = group.get("weights") if isinstance(group, dict) else None
        kind = weights.get("type") if isinstance(weights, dict) else None
        bits = weights.get("num_bits") if isinstance(weights, dict) else None
        parsed = exact(bits) if isinstance(bits, Number) else None
        if kind != "float" or parsed is None or parsed[0] != 8:
            got = (
                f"type {_kind(kind)}, num_bits {_kind(bits)}"
                if isinstance(weights, dict)
                else _kind(weights)
            )
            raise ModelConfigError(
                f"{path}: key {key!r}: {got} is not modelled (only 8-bit float weights,"
                ' {"type": "float", "num_bits": 8}, are: other quantized weights would be'
                " counted at the wrong size)"
            )


def _weight_dtype(path: str, table: dict[str, Any], dtype: str) -> str:
    """``"fp8"`` for an FP8 checkpoint (``quantization_config``), else ``dtype``. Any other
    quantization is refused: its weights are not ``dtype``'s size."""
    quant = table.get("quantization_config")
    if quant is None:
        return dtype
    if not isinstance(quant, dict):
        raise ModelConfigError(
            f"{path}: key 'quantization_config': expected an object, got {_kind(quant)}"
        )
    method = quant.get("quant_method")
    if method is None:
        raise ModelConfigError(f"{path}: key 'quantization_config.quant_method': missing")
    if not isinstance(method, str) or isinstance(method, Number):
        raise ModelConfigError(
            f"{path}: key 'quantization_config.quant_method': expected a string, got"
            f" {_kind(method)}"
        )
    if method not in FP8_QUANT_METHODS:
        raise ModelConfigError(
            f"{path}: key 'quantization_config.quant_method': {method!r} is not modelled"
            f" (only FP8 weights: {', '.join(FP8_QUANT_METHODS)}; other quantized weights"
            " would be counted at the wrong size)"
        )
    if method == "compressed-tensors":
        _fp8_groups(path, quant)
    return "fp8"


def load_model_config(path: str | os.PathLike[str]) -> ModelSpec:
    """A :class:`ModelSpec` from a Hugging Face ``config.json``.

    Required keys: ``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``,
    ``intermediate_size``, ``vocab_size``; optional: ``num_key_value_heads`` (default: the
    attention heads), ``head_dim`` (default: hidden / heads), ``num_local_experts`` (Mixtral)
    or ``num_experts`` with ``moe_intermediate_size`` (Qwen-MoE), each with
    ``num_experts_per_tok``, ``torch_dtype`` (or ``dtype``; default bfloat16),
    ``quantization_config`` (FP8 weights only), ``tie_word_embeddings`` (default false).
    Other keys are ignored, but for the MoE layouts not modelled (shared experts, dense
    layers among MoE ones), which are refused. A missing key or a bad value raises
    :class:`ModelConfigError` naming the file and key.
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
    experts, per_tok, expert_size = _experts(name, table)
    tied = table.get("tie_word_embeddings", False)
    if not isinstance(tied, bool):
        raise ModelConfigError(
            f"{name}: key 'tie_word_embeddings': expected true or false, got {_kind(tied)}"
        )
    label = table.get("_name_or_path")
    if not isinstance(label, str) or isinstance(label, Number) or not label:
        label = name
    dtype = _dtype(name, table)
    return ModelSpec(
        name=label,
        num_key_value_heads=kv,
        head_dim=head_dim,
        num_local_experts=experts,
        num_experts_per_tok=per_tok,
        expert_intermediate_size=expert_size,
        dtype_bytes=_DTYPE_BYTES[dtype],
        weight_dtype=_weight_dtype(name, table, dtype),
        tie_word_embeddings=tied,
        source=name,
        **counts,
    )


def _lookup(text: str) -> str:
    """``text`` as an alias key: lower case, spaces and underscores read as ``-``."""
    return "-".join(text.strip().lower().replace("_", " ").split())


def model_name(text: str) -> str | None:
    """The :data:`MODELS` preset ``text`` names (a preset or a Hugging Face repo id of
    :data:`MODEL_ALIASES`, any case), or ``None``."""
    key = text.strip().lower()
    if key in MODELS:
        return key
    return _MODEL_KEYS.get(key)


def resolve_model(model: str | os.PathLike[str] | ModelSpec) -> ModelSpec:
    """A preset name of :data:`MODELS` or a Hugging Face repo id of one (any case), a
    ``config.json`` path (or a directory holding one), or a spec as is."""
    if isinstance(model, ModelSpec):
        return model
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(
            f"model must be a preset name, a config.json path or a ModelSpec, got {show(model)}"
        )
    text = path("model", model)
    preset = model_name(text) if isinstance(model, str) else None
    if preset is not None and not os.path.exists(text):
        return MODELS[preset]
    if os.path.isdir(text) and os.path.isfile(os.path.join(text, "config.json")):
        return load_model_config(os.path.join(text, "config.json"))
    if not os.path.exists(text) and not text.lower().endswith(".json"):
        if _REPO_ID.fullmatch(text):
            raise ModelConfigError(
                f"unknown model {text!r}: not the Hugging Face id of a preset, and nothing"
                " is downloaded: save its config.json (https://huggingface.co/"
                f"{text}/blob/main/config.json) and give its path"
            )
        raise ModelConfigError(
            f"unknown model {text!r}: give a config.json path or one of {', '.join(MODELS)}"
            " (or a preset's Hugging Face id: chunked-prefill engines --json lists them)"
        )
    return load_model_config(text)


_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
"""A Hugging Face repo id, ``owner/name``."""


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
        canonical = (
            gpu_name(preset) if isinstance(preset, str) and not isinstance(preset, Number) else None
        )
        if canonical is None:
            raise ModelConfigError(
                f"{name}: key 'preset': expected one of {', '.join(GPUS)}, got {_kind(preset)}"
            )
        preset = canonical
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


def gpu_name(text: str) -> str | None:
    """The :data:`GPUS` preset ``text`` names (a preset or a :data:`GPU_ALIASES` entry,
    any case, ``nvidia-smi``'s spelling too), or ``None``."""
    key = _lookup(text)
    for prefix in ("nvidia-", "amd-instinct-", "amd-"):
        if key.startswith(prefix) and key not in GPUS:
            key = key[len(prefix) :]
            break
    if key in GPUS:
        return key
    return GPU_ALIASES.get(key)


def resolve_gpu(gpu: str | os.PathLike[str] | GpuSpec) -> GpuSpec:
    """A preset name of :data:`GPUS` or one of its :data:`GPU_ALIASES` (any case), a
    profile path, or a spec as is."""
    if isinstance(gpu, GpuSpec):
        return gpu
    if not isinstance(gpu, (str, os.PathLike)):
        raise TypeError(f"gpu must be a preset name, a profile path or a GpuSpec, got {show(gpu)}")
    text = path("gpu", gpu)
    preset = gpu_name(text) if isinstance(gpu, str) else None
    if preset is not None and not os.path.exists(text):
        return GPUS[preset]
    if not os.path.exists(text) and not text.lower().endswith((".json", ".toml")):
        aliases = ", ".join(f"{k} ({v})" for k, v in GPU_ALIASES.items())
        raise ModelConfigError(
            f"unknown GPU {text!r}: give a profile path (.toml or .json) or one of"
            f" {', '.join(GPUS)}; aliases: {aliases}"
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
        dtype_bytes=model.kv_element_bytes,
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
    the serving engine's CPU costs, how prefill attention is charged; ``serving_engine``
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
    Raises ``ValueError`` naming a value that is not one of these."""
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
