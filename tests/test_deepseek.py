"""DeepSeek's layers (issue 23, a wider catalog): multi-head latent attention (one
compressed K/V per token and layer, shared by every head and held whole on every GPU),
routed experts after dense first layers, and shared experts without a gate."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from chunked_prefill.sim.catalog import MODELS, ModelConfigError, engine_for, load_model_config

DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "first_k_dense_replace": 3,
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "kv_lora_rank": 512,
    "model_type": "deepseek_v3",
    "moe_intermediate_size": 2048,
    "moe_layer_freq": 1,
    "n_group": 8,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_attention_heads": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 61,
    "num_key_value_heads": 128,
    "num_nextn_predict_layers": 1,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "quantization_config": {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "weight_block_size": [128, 128],
    },
    "tie_word_embeddings": False,
    "topk_group": 4,
    "torch_dtype": "bfloat16",
    "v_head_dim": 128,
    "vocab_size": 129280,
}
"""deepseek-ai/DeepSeek-V3's config.json (as ai-dynamo/aiconfigurator keeps it, commit
0b077da; the keys read, and some ignored)."""

DEEPSEEK_V2_LITE = {
    "architectures": ["DeepseekV2ForCausalLM"],
    "first_k_dense_replace": 1,
    "hidden_size": 2048,
    "intermediate_size": 10944,
    "kv_lora_rank": 512,
    "model_type": "deepseek_v2",
    "moe_intermediate_size": 1408,
    "moe_layer_freq": 1,
    "n_routed_experts": 64,
    "n_shared_experts": 2,
    "num_attention_heads": 16,
    "num_experts_per_tok": 6,
    "num_hidden_layers": 27,
    "num_key_value_heads": 16,
    "q_lora_rank": None,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "v_head_dim": 128,
    "vocab_size": 102400,
}
"""deepseek-ai/DeepSeek-V2-Lite's config.json (no query compression: q_lora_rank null)."""


def _write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("doc", "preset"), [(DEEPSEEK_V3, "deepseek-v3"), (DEEPSEEK_V2_LITE, "deepseek-v2-lite")]
)
def test_a_deepseek_config_reads_as_the_preset(
    tmp_path: Path, doc: dict[str, Any], preset: str
) -> None:
    spec = load_model_config(_write(tmp_path, doc))
    assert replace(spec, name="", source="") == replace(MODELS[preset], name="", source="")


def test_mla_weights_and_cache() -> None:
    spec = MODELS["deepseek-v3"]
    # q: 7168 -> 1536 -> 128 x 192; K/V: 7168 -> 512 + 64, then 512 -> 128 x (128 + 128);
    # O: 128 x 128 -> 7168.
    q = 7168 * 1536 + 1536 * 128 * 192
    kv = 7168 * 576 + 512 * 128 * 256
    assert spec.attention_params() == q + kv + 128 * 128 * 7168
    # On 8 GPUs the down-projections stay whole, the rest splits by heads.
    split = 1536 * 128 * 192 + 512 * 128 * 256 + 128 * 128 * 7168
    assert spec.attention_params_per_gpu(8) == 7168 * 1536 + 7168 * 576 + split // 8
    # One latent of 512 + 64 per token and layer, the same on every GPU of the group.
    assert spec.kv_bytes_per_token(1) == spec.kv_bytes_per_token(8) == 61 * 576 * 2
    assert spec.kv_heads_per_gpu(8) == 1
    assert spec.pair_flops_per_head == 2 * (192 + 128)


def test_deepseek_counts_as_its_cards() -> None:
    lite, v3 = MODELS["deepseek-v2-lite"], MODELS["deepseek-v3"]
    assert (lite.moe_layers, v3.moe_layers) == (26, 58)
    # Routed experts in the MoE layers only, shared ones added as they are (no gate).
    expert = 3 * 7168 * 2048
    layer = 257 * expert + 256 * 7168
    assert v3.num_params - v3.embedding_params == (
        61 * (v3.attention_params() + 2 * 7168) + 3 * 3 * 7168 * 18432 + 58 * layer + 7168
    )
    # The cards' activated weights leave the input embedding out: 2.4B and 37B.
    for spec, card in ((lite, 2.4e9), (v3, 37e9)):
        active = spec.active_params - spec.vocab_size * spec.hidden_size
        assert active == pytest.approx(card, rel=0.025)


def test_the_roofline_of_mla_and_dense_first_layers() -> None:
    v3, _ = engine_for("deepseek-v3", "h200", 8)
    spec, gpu_reads = MODELS["deepseek-v3"], 4.8e12 * 0.898
    # The experts' reads are the 58 MoE layers' (FP8: a byte a weight, each GPU an eighth).
    assert v3.expert_read_s == pytest.approx(58 * (3 * 7168 * 2048 // 8) / gpu_reads)
    assert v3.experts == 256 and v3.expert_miss == pytest.approx(1 - 8 / 256)
    # Decode attention reads each context token's latent once per layer.
    assert v3.kv_token_s == pytest.approx(61 * 576 * 2 / (4.8e12 * 0.85))
    # The dense layers' MLPs and the shared experts are read every step.
    dense_mlp, shared = 3 * 7168 * 18432 // 8, 3 * 7168 * 2048 // 8
    linear = 61 * spec.attention_params_per_gpu(8) + 3 * dense_mlp + 58 * shared
    wide = (58 * 256 * 7168 + 129280 * 7168 // 8) * 2
    gemvs = 61 * 5 + 3 * 2 + 58 * 3 + 1
    assert v3.dense_read_s == pytest.approx((linear + wide) / gpu_reads + gemvs * 4.4e-6)
    # 8 x H100 (80 GB) cannot hold its 671B FP8 weights; 8 x H200 can.
    with pytest.raises(Exception, match="does not fit h100-sxm at TP 8"):
        engine_for("deepseek-v3", "h100", 8)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"v_head_dim": None}, "key 'v_head_dim': expected a positive whole number, got null"),
        (
            {"first_k_dense_replace": 61},
            "key 'first_k_dense_replace': no layer of num_hidden_layers (61) is a MoE layer",
        ),
        ({"moe_layer_freq": 0}, "key 'moe_layer_freq': expected a positive whole number, got 0"),
        (
            {"num_local_experts": 8},
            "key 'n_routed_experts': give one of num_local_experts, num_experts,"
            " n_routed_experts, not both num_local_experts and n_routed_experts",
        ),
        (
            {"moe_intermediate_size": None},
            "key 'moe_intermediate_size': expected a positive whole number, got null",
        ),
    ],
)
def test_a_bad_deepseek_config_names_its_key(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    path = _write(tmp_path, DEEPSEEK_V3 | change)
    with pytest.raises(ModelConfigError) as err:
        load_model_config(path)
    assert str(err.value) == f"{path}: {message}"


def test_every_other_deepseek_layer_with_moe_layer_freq(tmp_path: Path) -> None:
    # Layers 3 to 60, every second one from layer 3's index parity: 4, 6, ..., 60 are MoE.
    spec = load_model_config(_write(tmp_path, DEEPSEEK_V3 | {"moe_layer_freq": 2}))
    assert (spec.moe_layers, spec.dense_layers) == (29, 32)


def test_mla_fields_go_together() -> None:
    with pytest.raises(ValueError, match="needs qk_nope_head_dim, qk_rope_head_dim"):
        replace(MODELS["deepseek-v3"], v_head_dim=0)
    with pytest.raises(ValueError, match="are for multi-head latent attention"):
        replace(MODELS["llama-3.1-8b"], q_lora_rank=1536)
    with pytest.raises(ValueError, match="dense_layers is for a mixture of experts"):
        replace(MODELS["llama-3.1-8b"], dense_layers=1)
