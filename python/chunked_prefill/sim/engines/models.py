"""Models described by architecture: :class:`ModelSpec` (the fields of a Hugging Face
``config.json``), the presets of :data:`MODELS` with their aliases, and the dtypes the
catalog knows. Every preset's source is in its ``source`` field."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from .errors import EngineFitError

if TYPE_CHECKING:
    pass


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
        """Gate, up and down projection weights of one MLP (one expert of a MoE layer, of
        ``expert_intermediate_size`` when set)."""
        return 3 * self.hidden_size * (self.expert_intermediate_size or self.intermediate_size)

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
    "qwen2.5-0.5b": ModelSpec(
        name="qwen2.5-0.5b",
        num_hidden_layers=24,
        hidden_size=896,
        num_attention_heads=14,
        num_key_value_heads=2,
        head_dim=64,
        intermediate_size=4864,
        vocab_size=151936,
        tie_word_embeddings=True,
        source=_HF.format("Qwen/Qwen2.5-0.5B-Instruct"),
    ),
    "qwen2.5-1.5b": ModelSpec(
        name="qwen2.5-1.5b",
        num_hidden_layers=28,
        hidden_size=1536,
        num_attention_heads=12,
        num_key_value_heads=2,
        head_dim=128,
        intermediate_size=8960,
        vocab_size=151936,
        tie_word_embeddings=True,
        source=_HF.format("Qwen/Qwen2.5-1.5B-Instruct"),
    ),
    "qwen2.5-3b": ModelSpec(
        name="qwen2.5-3b",
        num_hidden_layers=36,
        hidden_size=2048,
        num_attention_heads=16,
        num_key_value_heads=2,
        head_dim=128,
        intermediate_size=11008,
        vocab_size=151936,
        tie_word_embeddings=True,
        source=_HF.format("Qwen/Qwen2.5-3B-Instruct"),
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
    "phi-4-mini": ModelSpec(
        name="phi-4-mini",
        num_hidden_layers=32,
        hidden_size=3072,
        num_attention_heads=24,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=8192,
        vocab_size=200064,
        tie_word_embeddings=True,
        source=_HF.format("microsoft/Phi-4-mini-instruct"),
    ),
    "qwen1.5-moe-a2.7b": ModelSpec(
        name="qwen1.5-moe-a2.7b",
        num_hidden_layers=24,
        hidden_size=2048,
        num_attention_heads=16,
        num_key_value_heads=16,
        head_dim=128,
        intermediate_size=5632,
        vocab_size=151936,
        num_local_experts=60,
        num_experts_per_tok=4,
        expert_intermediate_size=1408,
        shared_expert_intermediate_size=5632,
        source=_HF.format("Qwen/Qwen1.5-MoE-A2.7B-Chat"),
    ),
    "qwen2-57b-a14b": ModelSpec(
        name="qwen2-57b-a14b",
        num_hidden_layers=28,
        hidden_size=3584,
        num_attention_heads=28,
        num_key_value_heads=4,
        head_dim=128,
        intermediate_size=18944,
        vocab_size=151936,
        num_local_experts=64,
        num_experts_per_tok=8,
        expert_intermediate_size=2560,
        shared_expert_intermediate_size=20480,
        source=_HF.format("Qwen/Qwen2-57B-A14B-Instruct"),
    ),
    "dbrx": ModelSpec(
        name="dbrx",
        num_hidden_layers=40,
        hidden_size=6144,
        num_attention_heads=48,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=10752,
        vocab_size=100352,
        num_local_experts=16,
        num_experts_per_tok=4,
        source=_HF.format("databricks/dbrx-instruct")
        + " (d_model, n_layers, n_heads, attn_config.kv_n_heads, ffn_config's"
        " ffn_hidden_size, moe_num_experts and moe_top_k)",
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
but the Llama-2 models' float16; untied embeddings but Llama-3.2's, Qwen2.5's up to 3B and
Phi-4-mini's; Qwen3-30B-A3B's ``intermediate_size`` is its unused dense MLP size,
``moe_intermediate_size`` its experts', as Qwen1.5-MoE's and Qwen2-57B-A14B's, whose
``shared_expert_intermediate_size`` is the shared expert's; DBRX's nested ``attn_config``
and ``ffn_config`` read as the flat keys)."""


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
    "Qwen/Qwen2.5-0.5B": "qwen2.5-0.5b",
    "Qwen/Qwen2.5-0.5B-Instruct": "qwen2.5-0.5b",
    "Qwen/Qwen2.5-1.5B": "qwen2.5-1.5b",
    "Qwen/Qwen2.5-1.5B-Instruct": "qwen2.5-1.5b",
    "Qwen/Qwen2.5-3B": "qwen2.5-3b",
    "Qwen/Qwen2.5-3B-Instruct": "qwen2.5-3b",
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
    "microsoft/Phi-4-mini-instruct": "phi-4-mini",
    "Qwen/Qwen1.5-MoE-A2.7B": "qwen1.5-moe-a2.7b",
    "Qwen/Qwen1.5-MoE-A2.7B-Chat": "qwen1.5-moe-a2.7b",
    "Qwen/Qwen2-57B-A14B": "qwen2-57b-a14b",
    "Qwen/Qwen2-57B-A14B-Instruct": "qwen2-57b-a14b",
    "databricks/dbrx-base": "dbrx",
    "databricks/dbrx-instruct": "dbrx",
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
