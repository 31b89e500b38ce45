"""Model families whose ``config.json`` is not Llama's, by ``model_type``: whether their
MLP is gated, whether their embeddings are tied when the file does not say, and the names
they give the counts (:data:`FAMILIES`); and the families the roofline does not model
(:data:`REFUSED_FAMILIES`).

The facts are Hugging Face transformers' (v4.57 and v5): each ``configuration_*.py``
class's defaults and each ``modeling_*.py`` MLP. A ``model_type`` not listed reads as
Llama's (gated MLP, untied unless the file says so, the keys Llama uses), which is also how
Mistral, Mixtral, Qwen2/3 and their MoE, Phi-3, OLMo-2, Granite and StableLM are read.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    """How a ``config.json`` of one ``model_type`` is read."""

    gated_mlp: bool = True
    """Three MLP projections (gate, up, down) or two (up, down)."""
    tied: bool = False
    """``tie_word_embeddings`` when the file does not give it: the config class's default
    (transformers v4 leaves the key out of a file when it equals that default and its own
    ``True``)."""
    renames: tuple[tuple[str, str], ...] = ()
    """``(Llama's key, this family's key)`` for each count the family names differently."""
    mlp_per_hidden: int = 0
    """When the MLP size key is absent or null: that many times ``hidden_size`` (GPT-2's
    ``n_inner``, Falcon's ``ffn_hidden_size``: 4); 0: the key is required."""


_GPT2_KEYS = (
    ("num_hidden_layers", "n_layer"),
    ("hidden_size", "n_embd"),
    ("num_attention_heads", "n_head"),
    ("intermediate_size", "n_inner"),
)
"""GPT-2's names (its ``attribute_map``), which GPT-J and GPT-BigCode share."""


FAMILIES: dict[str, Family] = {
    # Gated MLPs whose embeddings are tied by default.
    "gemma": Family(tied=True),
    "gemma2": Family(tied=True),
    "gemma3_text": Family(tied=True),
    "cohere": Family(tied=True),
    "cohere2": Family(tied=True),
    # MLPs of two projections (dense_h_to_4h/dense_4h_to_h, fc1/fc2, c_fc/c_proj).
    "gpt_neox": Family(gated_mlp=False),
    "phi": Family(gated_mlp=False),
    "starcoder2": Family(gated_mlp=False, tied=True),
    "opt": Family(gated_mlp=False, tied=True, renames=(("intermediate_size", "ffn_dim"),)),
    "gpt2": Family(gated_mlp=False, tied=True, renames=_GPT2_KEYS, mlp_per_hidden=4),
    "gpt_bigcode": Family(gated_mlp=False, tied=True, renames=_GPT2_KEYS, mlp_per_hidden=4),
    "gptj": Family(gated_mlp=False, renames=_GPT2_KEYS, mlp_per_hidden=4),
    "falcon": Family(
        gated_mlp=False,
        tied=True,
        renames=(("intermediate_size", "ffn_hidden_size"),),
        mlp_per_hidden=4,
    ),
}
"""The families read differently from Llama, by ``model_type``. GPT-BigCode's K/V heads
come from ``multi_query`` (true by default: one), Falcon's from ``new_decoder_architecture``
(``num_kv_heads``) or ``multi_query`` (true by default: one); OPT's ``word_embed_proj_dim``
must equal ``hidden_size`` (its projections in and out are not counted). Learned position
embeddings (OPT, GPT-2) are not counted: under 1.5 % of the weights."""


REFUSED_FAMILIES: dict[str, str] = {
    "bloom": "BLOOM's layout (ALiBi, n_embed and n_layer names)",
    "mpt": "MPT's layout (ALiBi, d_model and expansion_ratio names)",
}
"""``model_type`` values refused, with what about them is not modelled."""


TEXT_CONFIG_DEFAULTS: dict[str, dict[str, int]] = {
    "gemma3_text": {
        "num_hidden_layers": 26,
        "hidden_size": 2304,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "intermediate_size": 9216,
        "vocab_size": 262208,
    },
    "mistral": {
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 32000,
        "sliding_window": 4096,
    },
    "llama4_text": {
        "num_hidden_layers": 48,
        "hidden_size": 5120,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 8192,
        "intermediate_size_mlp": 16384,
        "vocab_size": 202048,
        "num_local_experts": 16,
        "num_experts_per_tok": 1,
        "interleave_moe_layer_step": 1,
    },
    "llama": {
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "intermediate_size": 11008,
        "vocab_size": 32000,
    },
}
"""The defaults of the text configs that vision-language models nest (Gemma 3's
``Gemma3TextConfig``, Llama 4's ``Llama4TextConfig``, Mistral 3's and LLaVA's
``MistralConfig`` and ``LlamaConfig``):
transformers writes a nested config's keys only where they differ from its class's
defaults, so Gemma-3-4B's ``text_config`` has no ``num_attention_heads`` (8, the
default), and a Mistral 3 ``text_config`` without ``sliding_window`` has
``MistralConfig``'s 4 096 (Mistral-Small-3.1's says null)."""
