"""Models described by architecture: :class:`ModelSpec` (the fields of a Hugging Face
``config.json``) and the dtypes the catalog knows; the presets are in
:mod:`.presets`."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from ..errors import EngineFitError

_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


GROUP_SCALE_BITS = 16 / 128
"""The bits a weight-only integer checkpoint (GPTQ, AWQ) adds per weight: a 16-bit scale per
group of 128 weights, the group size of the Qwen, Llama and Mistral checkpoints of
GPTQ/AutoAWQ (smaller groups add at most half a bit more, not counted)."""

_WEIGHT_BITS = {
    **{dtype: 8.0 * size for dtype, size in _DTYPE_BYTES.items()},
    "fp8": 8.0,
    "int8": 8 + GROUP_SCALE_BITS,
    "int4": 4 + GROUP_SCALE_BITS,
}
"""Bits per weight of the decoder layers' linear layers, by ``weight_dtype``."""

WEIGHT_ONLY_DTYPES = ("int8", "int4")
"""Weight-only integer dtypes (GPTQ, AWQ): vLLM's Marlin kernels read them and multiply in
16 bits (w8a16, w4a16)."""


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
    """The dtype of the decoder layers' linear weights: ``torch_dtype``'s, ``"fp8"`` for an
    FP8 checkpoint (``quantization_config``) or ``engine_for(quantization="fp8")``, or
    ``"int8"``/``"int4"`` for a GPTQ or AWQ checkpoint (weight-only: 16-bit activations)."""
    kv_dtype_bytes: int = 0
    """Bytes per K/V element (``engine_for(kv_cache_dtype=...)``); 0: ``dtype_bytes``."""
    tie_word_embeddings: bool = False
    gated_mlp: bool = True
    """Whether the MLP has a gate: three projections (gate, up, down: Llama, Qwen, Mistral,
    Gemma and every mixture of experts here) or two (up and down: GPT-NeoX, Phi-2,
    StarCoder2, OPT, GPT-2, Falcon)."""
    kv_lora_rank: int = 0
    """Multi-head latent attention (DeepSeek-V2/V3): the width of the compressed K/V that
    every head shares, cached per token and layer beside one ``qk_rope_head_dim`` rotary
    key; 0: standard attention (K/V heads of ``head_dim``)."""
    q_lora_rank: int = 0
    """MLA's compressed query width (0: queries projected from the hidden state)."""
    qk_nope_head_dim: int = 0
    """MLA: each head's query/key width without rotary embedding."""
    qk_rope_head_dim: int = 0
    """MLA: each head's query/key width with rotary embedding (the key's is shared)."""
    v_head_dim: int = 0
    """MLA: each head's value width."""
    dense_layers: int = 0
    """The layers of a mixture of experts whose MLP is dense, of ``intermediate_size``
    (DeepSeek's ``first_k_dense_replace``, Llama 4 Maverick's every other layer, Qwen-MoE's
    ``mlp_only_layers``); the others are MoE layers. A step's cost depends on their count,
    not on where they are."""
    shared_expert_gate: bool = True
    """Whether a shared expert's output passes a one-output sigmoid gate (Qwen2-MoE) or is
    added as it is (DeepSeek)."""
    sliding_window: int = 0
    """The attention window of the :attr:`window_layers`, in tokens: each query attends to
    at most its last ``sliding_window`` keys (Mistral-7B-v0.1, Gemma 2 and 3, Phi-3,
    StarCoder2), or to the keys of its own chunk of that many tokens (Llama 4's
    ``attention_chunk_size``, charged as a window of that size: at most that many keys); 0:
    every layer attends to the whole context."""
    window_layers: int = 0
    """How many layers attend within :attr:`sliding_window` (the others attend to the whole
    context): all of Mistral-7B-v0.1's, every other one of Gemma 2's, five of six of Gemma
    3's, three of four of Llama 4's."""
    source: str = ""
    """Where the figures come from."""

    def __post_init__(self) -> None:
        if self.weight_dtype not in _WEIGHT_BITS:
            raise ValueError(
                f"model {self.name}: weight_dtype must be one of"
                f" {', '.join(_WEIGHT_BITS)}, got {self.weight_dtype!r}"
            )
        floating = self.weight_dtype in _DTYPE_BYTES
        if floating and _DTYPE_BYTES[self.weight_dtype] != self.dtype_bytes:
            raise ValueError(
                f"model {self.name}: weight_dtype {self.weight_dtype!r} is"
                f" {_DTYPE_BYTES[self.weight_dtype]} bytes but dtype_bytes is {self.dtype_bytes}"
                " (only quantized weights differ from the compute dtype)"
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
        mla = ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
        if self.kv_lora_rank and not all(getattr(self, key) > 0 for key in mla):
            raise ValueError(
                f"model {self.name}: multi-head latent attention (kv_lora_rank > 0) needs"
                " qk_nope_head_dim, qk_rope_head_dim and v_head_dim above 0"
            )
        if not self.kv_lora_rank and (self.q_lora_rank or any(getattr(self, k) for k in mla)):
            raise ValueError(
                f"model {self.name}: q_lora_rank and the MLA head widths are for multi-head"
                " latent attention (kv_lora_rank > 0)"
            )
        if self.dense_layers and not 0 < self.dense_layers < self.num_hidden_layers:
            raise ValueError(
                f"model {self.name}: dense_layers must be below num_hidden_layers"
                f" ({self.num_hidden_layers}), got {self.dense_layers}"
            )
        if self.dense_layers and not self.is_moe:
            raise ValueError(
                f"model {self.name}: dense_layers is for a mixture of experts"
                " (num_local_experts > 0)"
            )
        self._check_window()
        for key in ("expert_intermediate_size", "shared_expert_intermediate_size"):
            if getattr(self, key) and not self.is_moe:
                raise ValueError(
                    f"model {self.name}: {key} is for a mixture of experts (num_local_experts > 0)"
                )

    def _check_window(self) -> None:
        if not self.sliding_window and not self.window_layers:
            return
        if self.sliding_window < 1 or not 0 < self.window_layers <= self.num_hidden_layers:
            raise ValueError(
                f"model {self.name}: a sliding window needs sliding_window > 0 and"
                f" window_layers from 1 to num_hidden_layers ({self.num_hidden_layers}), got"
                f" sliding_window {self.sliding_window} and window_layers {self.window_layers}"
            )
        if self.is_mla:
            raise ValueError(
                f"model {self.name}: a sliding window with multi-head latent attention is not"
                " modelled"
            )

    @property
    def full_attention_layers(self) -> int:
        """The layers that attend to the whole context (all but :attr:`window_layers`)."""
        return self.num_hidden_layers - self.window_layers

    @property
    def is_moe(self) -> bool:
        """Whether the MLP is a mixture of experts."""
        return self.num_local_experts > 0

    @property
    def weight_dtype_bytes(self) -> float:
        """Bytes per weight of the decoder layers' linear layers (1 for fp8; 4.125 bits for
        int4 and 8.125 for int8, their group scales included)."""
        return _WEIGHT_BITS[self.weight_dtype] / 8

    @property
    def weight_only(self) -> bool:
        """Whether the linear weights are weight-only integers (GPTQ, AWQ: Marlin)."""
        return self.weight_dtype in WEIGHT_ONLY_DTYPES

    @property
    def kv_element_bytes(self) -> int:
        """Bytes per K/V element: ``kv_dtype_bytes``, or ``dtype_bytes`` when it is 0."""
        return self.kv_dtype_bytes or self.dtype_bytes

    @property
    def is_mla(self) -> bool:
        """Whether attention is multi-head latent attention (a shared compressed K/V)."""
        return self.kv_lora_rank > 0

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts (0 for a dense model)."""
        return self.num_hidden_layers - self.dense_layers if self.is_moe else 0

    def _mla_params(self) -> tuple[int, int]:
        """MLA's weights of one layer: (replicated on every GPU of a TP group, split by
        heads): the query's and the K/V's down-projections are replicated; the query's
        up-projection (or its projection from the hidden state), the K/V's up-projection
        and the output split."""
        hidden, heads = self.hidden_size, self.num_attention_heads
        qk = self.qk_nope_head_dim + self.qk_rope_head_dim
        q_in = self.q_lora_rank or hidden
        replicated = hidden * self.q_lora_rank + hidden * self.latent_dim
        split = q_in * heads * qk
        split += self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)
        return replicated, split + heads * self.v_head_dim * hidden

    def attention_params(self) -> int:
        """Q, K, V and O projection weights of one layer (MLA's projections when
        :attr:`is_mla`)."""
        if self.is_mla:
            return sum(self._mla_params())
        q = self.num_attention_heads * self.head_dim
        kv = self.num_key_value_heads * self.head_dim
        return 2 * self.hidden_size * q + 2 * self.hidden_size * kv

    def attention_params_per_gpu(self, tp: int) -> int:
        """One layer's attention weights on one GPU of a TP group: split by heads, K/V
        heads replicated when there are fewer than GPUs, MLA's down-projections whole."""
        if self.is_mla:
            replicated, split = self._mla_params()
            return replicated + split // tp
        q_dim = self.num_attention_heads * self.head_dim // tp
        kv_dim = self.kv_heads_per_gpu(tp) * self.head_dim
        return 2 * self.hidden_size * q_dim + 2 * self.hidden_size * kv_dim

    @property
    def latent_dim(self) -> int:
        """MLA's cache per token and layer, in elements: the compressed K/V and the rotary
        key (0 without MLA)."""
        return self.kv_lora_rank + self.qk_rope_head_dim if self.is_mla else 0

    @property
    def pair_flops_per_head(self) -> int:
        """FLOPs of one (query, key) pair in one head of one layer in prefill: the score
        and the value's weighted sum (MLA: at its query/key and value widths, as vLLM
        prefills it)."""
        if self.is_mla:
            return 2 * (self.qk_nope_head_dim + self.qk_rope_head_dim + self.v_head_dim)
        return 4 * self.head_dim

    @property
    def mlp_params(self) -> int:
        """Gate, up and down projection weights of one MLP (up and down without
        :attr:`gated_mlp`; one expert of a MoE layer, of ``expert_intermediate_size`` when
        set)."""
        return self._mlp(self.expert_intermediate_size or self.intermediate_size)

    @property
    def dense_mlp_params(self) -> int:
        """One dense MLP of ``intermediate_size`` (a dense model's every layer, a MoE's
        :attr:`dense_layers`)."""
        return self._mlp(self.intermediate_size)

    def _mlp(self, size: int) -> int:
        """The weights of one MLP of ``size``: three matrices, two without a gate."""
        return (3 if self.gated_mlp else 2) * self.hidden_size * size

    @property
    def shared_mlp_params(self) -> int:
        """Gate, up and down projection weights of one layer's shared expert (0: none)."""
        return 3 * self.hidden_size * self.shared_expert_intermediate_size

    @property
    def router_params(self) -> int:
        """The MoE router of one layer, and the shared expert's one-output gate (0 for a
        dense model)."""
        gated = self.shared_expert_intermediate_size and self.shared_expert_gate
        gate = self.hidden_size if gated else 0
        return self.hidden_size * self.num_local_experts + gate

    @property
    def embedding_params(self) -> int:
        """The input embedding and the LM head (one matrix when tied)."""
        return self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)

    @property
    def num_params(self) -> int:
        """Every weight (RMSNorm weights included)."""
        layers, moe = self.num_hidden_layers, self.moe_layers
        experts = self.num_local_experts * self.mlp_params + self.shared_mlp_params
        return (
            layers * (self.attention_params() + 2 * self.hidden_size)
            + (layers - moe) * self.dense_mlp_params
            + moe * (experts + self.router_params)
            + self.embedding_params
            + self.hidden_size
        )

    @property
    def active_params(self) -> int:
        """The weights one token uses: all but the experts it is not routed to (the
        "activated parameters" of the model cards, embedding included)."""
        idle = self.num_local_experts - self.num_experts_per_tok if self.is_moe else 0
        return self.num_params - self.moe_layers * idle * self.mlp_params

    def kv_heads_per_gpu(self, tp: int) -> int:
        """K/V heads each GPU holds: ``kv_heads / tp``, at least 1 (vLLM replicates a K/V
        head when there are fewer heads than GPUs); MLA's one shared latent: 1."""
        if self.is_mla:
            return 1
        return max(1, self.num_key_value_heads // tp)

    def kv_bytes_per_token(self, tp: int = 1) -> int:
        """K and V of one token in every layer, on one GPU of a TP group (at
        :attr:`kv_element_bytes` per element); with MLA its :attr:`latent_dim` per layer,
        which every GPU holds whole."""
        if self.is_mla:
            return self.num_hidden_layers * self.latent_dim * self.kv_element_bytes
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
        layers, moe = self.num_hidden_layers, self.moe_layers
        experts = self.num_local_experts * self.mlp_params + self.shared_mlp_params
        linear = (
            layers * self.attention_params_per_gpu(tp)
            + (layers - moe) * (self.dense_mlp_params // tp)
            + moe * (experts // tp)
        )
        kept = moe * self.router_params + layers * 2 * self.hidden_size  # routers replicated
        return (
            math.ceil(linear * self.weight_dtype_bytes)
            + kept * self.dtype_bytes
            + (self.embedding_params // tp + self.hidden_size) * self.dtype_bytes
        )

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain data, with the derived parameter counts."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["num_params"] = self.num_params
        out["active_params"] = self.active_params
        return out
