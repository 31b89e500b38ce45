"""Model families whose config.json is not Llama's (issue 23: a config.json is the way to
bring any model): MLPs without a gate, GPT-2's and OPT's names, Falcon's and StarCoder's
K/V heads, tied embeddings by default, vision-language configs read as their text
config, and the families refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chunked_prefill.sim.catalog import MODELS, ModelConfigError, engine_for, load_model_config


def _load(tmp_path: Path, doc: dict[str, Any]) -> Any:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return load_model_config(path)


GPT_NEOX_20B = {
    "architectures": ["GPTNeoXForCausalLM"],
    "hidden_size": 6144,
    "intermediate_size": 24576,
    "model_type": "gpt_neox",
    "num_attention_heads": 64,
    "num_hidden_layers": 44,
    "rotary_pct": 0.25,
    "tie_word_embeddings": False,
    "vocab_size": 50432,
}
"""EleutherAI/gpt-neox-20b's config.json (the keys read, and some ignored)."""

GPT_J_6B = {
    "architectures": ["GPTJForCausalLM"],
    "model_type": "gptj",
    "n_embd": 4096,
    "n_head": 16,
    "n_inner": None,
    "n_layer": 28,
    "n_positions": 2048,
    "rotary_dim": 64,
    "tie_word_embeddings": False,
    "vocab_size": 50400,
}
"""EleutherAI/gpt-j-6b's config.json (GPT-2's names; ``n_inner`` null: four times n_embd)."""

GPT2 = {
    "architectures": ["GPT2LMHeadModel"],
    "model_type": "gpt2",
    "n_ctx": 1024,
    "n_embd": 768,
    "n_head": 12,
    "n_layer": 12,
    "n_positions": 1024,
    "vocab_size": 50257,
}
"""openai-community/gpt2's config.json (no n_inner, no tie_word_embeddings: tied)."""


def test_an_mlp_without_a_gate_counts_two_projections(tmp_path: Path) -> None:
    spec = _load(tmp_path, GPT_NEOX_20B)
    assert not spec.gated_mlp
    assert spec.mlp_params == 2 * 6144 * 24576
    # The paper's 20 554 567 680 weights hold biases and norms' biases as well (0.01 %).
    assert spec.num_params == 20_551_587_840
    assert spec.num_params == pytest.approx(20_554_567_680, rel=1e-3)
    gated = _load(tmp_path, GPT_NEOX_20B | {"model_type": "llama"})
    assert gated.mlp_params == 3 * 6144 * 24576


def test_gpt2_names_and_its_default_mlp_size(tmp_path: Path) -> None:
    spec = _load(tmp_path, GPT_J_6B)
    assert (spec.num_hidden_layers, spec.hidden_size, spec.num_attention_heads) == (28, 4096, 16)
    assert (spec.intermediate_size, spec.num_key_value_heads, spec.head_dim) == (16384, 16, 256)
    assert not spec.tie_word_embeddings and not spec.gated_mlp
    # GPT-J's README: 6 053 381 344 weights (biases included).
    assert spec.num_params == pytest.approx(6_053_381_344, rel=1e-3)
    gpt2 = _load(tmp_path, GPT2)
    assert gpt2.tie_word_embeddings and gpt2.intermediate_size == 4 * 768
    # 124 439 808 with its 1 024 learned positions and its biases, which are not counted.
    assert gpt2.num_params == pytest.approx(124_439_808, rel=0.01)


def test_an_explicit_mlp_size_wins_over_the_default(tmp_path: Path) -> None:
    assert _load(tmp_path, GPT2 | {"n_inner": 1000}).intermediate_size == 1000


STARCODER = {
    "architectures": ["GPTBigCodeForCausalLM"],
    "model_type": "gpt_bigcode",
    "multi_query": True,
    "n_embd": 6144,
    "n_head": 48,
    "n_inner": 24576,
    "n_layer": 40,
    "n_positions": 8192,
    "vocab_size": 49152,
}
"""bigcode/starcoder's config.json (one K/V head: multi-query attention)."""

FALCON_7B = {
    "architectures": ["FalconForCausalLM"],
    "hidden_size": 4544,
    "model_type": "falcon",
    "multi_query": True,
    "new_decoder_architecture": False,
    "num_attention_heads": 71,
    "num_hidden_layers": 32,
    "parallel_attn": True,
    "torch_dtype": "bfloat16",
    "vocab_size": 65024,
}
"""tiiuae/falcon-7b's config.json."""

FALCON_40B = {
    "architectures": ["FalconForCausalLM"],
    "hidden_size": 8192,
    "model_type": "falcon",
    "new_decoder_architecture": True,
    "num_attention_heads": 128,
    "num_hidden_layers": 60,
    "num_kv_heads": 8,
    "parallel_attn": True,
    "torch_dtype": "bfloat16",
    "vocab_size": 65024,
}
"""tiiuae/falcon-40b's config.json (grouped K/V heads: the new decoder architecture)."""


@pytest.mark.parametrize(
    ("doc", "kv", "head_dim", "mlp"),
    [
        (STARCODER, 1, 128, 24576),
        (STARCODER | {"multi_query": False}, 48, 128, 24576),
        (FALCON_7B, 1, 64, 4 * 4544),
        (FALCON_7B | {"multi_query": False}, 71, 64, 4 * 4544),
        (FALCON_40B, 8, 64, 4 * 8192),
        (FALCON_40B | {"ffn_hidden_size": 20000}, 8, 64, 20000),
    ],
)
def test_multi_query_and_grouped_heads(
    tmp_path: Path, doc: dict[str, Any], kv: int, head_dim: int, mlp: int
) -> None:
    spec = _load(tmp_path, doc)
    assert (spec.num_key_value_heads, spec.head_dim, spec.intermediate_size) == (kv, head_dim, mlp)
    assert spec.tie_word_embeddings and not spec.gated_mlp


def test_falcon_7b_reads_one_kv_head_and_its_weights(tmp_path: Path) -> None:
    spec = _load(tmp_path, FALCON_7B)
    # Q and O at 4 544 x 4 544, K and V one head of 64 each (the fused QKV of
    # hidden + 2 x head_dim rows), two MLP matrices of 4 x 4 544; the embedding tied.
    layer = 2 * 4544 * 4544 + 2 * 4544 * 64 + 2 * 4544 * 18176 + 2 * 4544
    assert spec.num_params == 32 * layer + 65024 * 4544 + 4544
    assert spec.kv_bytes_per_token() == 2 * 32 * 1 * 64 * 2


OPT_13B = {
    "architectures": ["OPTForCausalLM"],
    "do_layer_norm_before": True,
    "ffn_dim": 20480,
    "hidden_size": 5120,
    "model_type": "opt",
    "num_attention_heads": 40,
    "num_hidden_layers": 40,
    "torch_dtype": "float16",
    "vocab_size": 50272,
    "word_embed_proj_dim": 5120,
}
"""facebook/opt-13b's config.json (``ffn_dim`` for the MLP, tied by default)."""


def test_opt_reads_ffn_dim_and_ties_its_embedding(tmp_path: Path) -> None:
    spec = _load(tmp_path, OPT_13B)
    assert (spec.intermediate_size, spec.tie_word_embeddings, spec.gated_mlp) == (
        20480,
        True,
        False,
    )
    assert spec.dtype_bytes == 2
    assert spec.num_params == pytest.approx(12.85e9, rel=0.01)
    assert not _load(tmp_path, OPT_13B | {"tie_word_embeddings": False}).tie_word_embeddings


GEMMA_2_9B = {
    "architectures": ["Gemma2ForCausalLM"],
    "head_dim": 256,
    "hidden_size": 3584,
    "intermediate_size": 14336,
    "model_type": "gemma2",
    "num_attention_heads": 16,
    "num_hidden_layers": 42,
    "num_key_value_heads": 8,
    "torch_dtype": "float32",
    "vocab_size": 256000,
}
"""google/gemma-2-9b's config.json (no tie_word_embeddings: Gemma's default, tied)."""


def test_gemma_ties_its_embedding_unless_the_file_says_otherwise(tmp_path: Path) -> None:
    spec = _load(tmp_path, GEMMA_2_9B)
    assert spec.tie_word_embeddings and spec.gated_mlp
    assert spec.num_params == pytest.approx(9.24e9, rel=0.01)  # the card: 9.24B
    assert not _load(tmp_path, GEMMA_2_9B | {"tie_word_embeddings": False}).tie_word_embeddings
    # Llama's family (and a model_type not listed) stays untied unless the file says so.
    assert not _load(tmp_path, GEMMA_2_9B | {"model_type": "llama"}).tie_word_embeddings


GEMMA_3_4B_IT = {
    "architectures": ["Gemma3ForConditionalGeneration"],
    "model_type": "gemma3",
    "text_config": {
        "hidden_size": 2560,
        "intermediate_size": 10240,
        "model_type": "gemma3_text",
        "num_hidden_layers": 34,
        "sliding_window": 1024,
    },
    "torch_dtype": "bfloat16",
    "vision_config": {"hidden_size": 1152, "model_type": "siglip_vision_model"},
}
"""google/gemma-3-4b-it's config.json: the text config holds only what differs from
Gemma3TextConfig's defaults (8 heads, 4 K/V heads of 256, a vocabulary of 262 208)."""

MISTRAL_SMALL_3_1 = {
    "architectures": ["Mistral3ForConditionalGeneration"],
    "model_type": "mistral3",
    "text_config": {
        "head_dim": 128,
        "hidden_size": 5120,
        "intermediate_size": 32768,
        "model_type": "mistral",
        "num_hidden_layers": 40,
        "num_key_value_heads": 8,
        "vocab_size": 131072,
    },
    "torch_dtype": "bfloat16",
    "vision_config": {"hidden_size": 1024, "model_type": "pixtral"},
}
"""mistralai/Mistral-Small-3.1-24B-Instruct-2503's config.json (32 heads: the default)."""


def test_a_vision_language_config_reads_as_its_text_config(tmp_path: Path) -> None:
    gemma = _load(tmp_path, GEMMA_3_4B_IT)
    assert (gemma.num_hidden_layers, gemma.hidden_size, gemma.num_attention_heads) == (34, 2560, 8)
    assert (gemma.num_key_value_heads, gemma.head_dim, gemma.vocab_size) == (4, 256, 262208)
    assert gemma.tie_word_embeddings and gemma.dtype_bytes == 2
    assert gemma.num_params == pytest.approx(3.88e9, rel=0.01)  # 4.3B with its vision tower
    mistral = _load(tmp_path, MISTRAL_SMALL_3_1)
    assert (mistral.num_attention_heads, mistral.num_key_value_heads) == (32, 8)
    assert not mistral.tie_word_embeddings
    assert mistral.num_params == pytest.approx(23.57e9, rel=0.01)  # 24B with its vision tower


def test_an_fp8_vision_language_checkpoint_keeps_its_quantization(tmp_path: Path) -> None:
    quant = {"quant_method": "fp8", "activation_scheme": "dynamic"}
    spec = _load(tmp_path, MISTRAL_SMALL_3_1 | {"quantization_config": quant})
    assert spec.weight_dtype == "fp8"


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (
            {key: value for key, value in GPT2.items() if key != "n_layer"},
            "key 'n_layer': missing (a positive whole number)",
        ),
        (GPT2 | {"n_embd": "768"}, "key 'n_embd': expected a positive whole number, got '768'"),
        (OPT_13B | {"ffn_dim": 0}, "key 'ffn_dim': expected a positive whole number, got 0"),
        (
            STARCODER | {"multi_query": "yes"},
            "key 'multi_query': expected true or false, got 'yes'",
        ),
        (
            FALCON_40B | {"num_kv_heads": 7},
            "key 'num_kv_heads': 7 does not divide num_attention_heads (128)",
        ),
        (
            OPT_13B | {"word_embed_proj_dim": 512},
            "key 'word_embed_proj_dim': 512: an embedding narrower than hidden_size (5120),"
            " with projections in and out, is not modelled",
        ),
        (
            GEMMA_2_9B | {"tie_word_embeddings": 1},
            "key 'tie_word_embeddings': expected true or false, got 1",
        ),
        (
            {"model_type": "mpt", "d_model": 4096},
            "key 'model_type': 'mpt': MPT's layout (ALiBi, d_model and expansion_ratio names)"
            " is not modelled",
        ),
        (
            {"model_type": "bloom", "n_layer": 70},
            "key 'model_type': 'bloom': BLOOM's layout (ALiBi, n_embed and n_layer names) is"
            " not modelled",
        ),
        (
            GPT_NEOX_20B | {"num_local_experts": 8, "num_experts_per_tok": 2},
            "key 'model_type': 'gpt_neox' has an MLP without a gate, and its experts are not"
            " modelled (a mixture of experts is read as gated MLPs)",
        ),
    ],
)
def test_a_bad_family_config_names_its_own_key(
    tmp_path: Path, doc: dict[str, Any], message: str
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(ModelConfigError) as err:
        load_model_config(path)
    where = f"{path}: text_config" if "text_config" in doc else str(path)
    assert str(err.value) == f"{where}: {message}"


def test_a_missing_text_config_key_names_the_text_config(tmp_path: Path) -> None:
    doc = GEMMA_3_4B_IT | {"text_config": {"model_type": "other", "hidden_size": 2560}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(ModelConfigError) as err:
        load_model_config(path)
    assert str(err.value) == (
        f"{path}: text_config: key 'num_hidden_layers': missing (a positive whole number)"
    )


def test_the_roofline_reads_two_thirds_of_a_gated_mlp(tmp_path: Path) -> None:
    ungated, _ = engine_for(_load(tmp_path, GPT_NEOX_20B), "a100-80gb")
    gated, _ = engine_for(_load(tmp_path, GPT_NEOX_20B | {"model_type": "llama"}), "a100-80gb")
    mlp = 44 * 6144 * 24576 * 2  # one MLP projection of every layer, in bytes
    reads = 2.039e12 * 0.80
    assert gated.dense_read_s - ungated.dense_read_s == pytest.approx(mlp / reads, rel=1e-6)
    assert gated.token_s - ungated.token_s == pytest.approx(
        2 * 44 * 6144 * 24576 / (312e12 * 0.675), rel=1e-6
    )


def test_a_preset_is_gated() -> None:
    assert all(spec.gated_mlp for spec in MODELS.values())
