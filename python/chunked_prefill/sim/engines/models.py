"""Models described by architecture: :class:`ModelSpec` (the fields of a Hugging Face
``config.json``) and the dtypes the catalog knows; the presets are in
:mod:`.model_presets`."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from .errors import EngineFitError

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


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer as its ``config.json`` describes it (biases and norms
    other than RMSNorm weights are ignored)."""

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
    shared_expert_intermediate_size: int = 0
    """The MLP size of a MoE layer's shared expert, which every token passes through beside
    its routed experts (Qwen2-MoE's ``shared_expert_intermediate_size``, with a one-output
    sigmoid gate); 0: none."""
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
    gated_mlp: bool = True
    """Whether the MLP has a gate: three projections (gate, up, down: Llama, Qwen, Mistral,
    Gemma and every mixture of experts here) or two (up and down: GPT-NeoX, Phi-2,
    StarCoder2, OPT, GPT-2, Falcon)."""
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
        if self.is_moe and not self.gated_mlp:
            raise ValueError(
                f"model {self.name}: gated_mlp is false, but the experts of a mixture of"
                " experts are gated MLPs here (num_local_experts > 0)"
            )
        for key in ("expert_intermediate_size", "shared_expert_intermediate_size"):
            if getattr(self, key) and not self.is_moe:
                raise ValueError(
                    f"model {self.name}: {key} is for a mixture of experts (num_local_experts > 0)"
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
        """Gate, up and down projection weights of one MLP (up and down without
        :attr:`gated_mlp`; one expert of a MoE layer, of ``expert_intermediate_size`` when
        set)."""
        projections = 3 if self.gated_mlp else 2
        size = self.expert_intermediate_size or self.intermediate_size
        return projections * self.hidden_size * size

    @property
    def shared_mlp_params(self) -> int:
        """Gate, up and down projection weights of one layer's shared expert (0: none)."""
        return 3 * self.hidden_size * self.shared_expert_intermediate_size

    @property
    def router_params(self) -> int:
        """The MoE router of one layer, and the shared expert's one-output gate (0 for a
        dense model)."""
        gate = self.hidden_size if self.shared_expert_intermediate_size else 0
        return self.hidden_size * self.num_local_experts + gate

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
            + self.shared_mlp_params
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
        linear = attention + (experts * self.mlp_params + self.shared_mlp_params) // tp
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
