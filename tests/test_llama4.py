"""Llama 4 (issue 23, a wider catalog): its text config nested in a vision-language one,
experts of ``intermediate_size`` with a shared expert of that size beside each token's
routed one, and Maverick's dense layers (of ``intermediate_size_mlp``) between its MoE
layers."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from chunked_prefill.sim.catalog import MODELS, ModelConfigError, engine_for, load_model_config

TEXT = {
    "attention_chunk_size": 8192,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 5120,
    "interleave_moe_layer_step": 1,
    "intermediate_size": 8192,
    "intermediate_size_mlp": 16384,
    "model_type": "llama4_text",
    "num_attention_heads": 40,
    "num_experts_per_tok": 1,
    "num_hidden_layers": 48,
    "num_key_value_heads": 8,
    "num_local_experts": 16,
    "torch_dtype": "bfloat16",
    "vocab_size": 202048,
}
"""Llama-4-Scout-17B-16E-Instruct's text_config (as ai-dynamo/aiconfigurator keeps its
config.json, commit 0b077da; the keys read, and some ignored)."""


def _config(text: dict[str, Any]) -> dict[str, Any]:
    return {
        "architectures": ["Llama4ForConditionalGeneration"],
        "model_type": "llama4",
        "text_config": text,
        "torch_dtype": "bfloat16",
        "vision_config": {"model_type": "llama4_vision_model"},
    }


def _load(tmp_path: Path, doc: dict[str, Any]) -> Any:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return load_model_config(path)


MAVERICK = TEXT | {"interleave_moe_layer_step": 2, "num_local_experts": 128}
"""Llama-4-Maverick-17B-128E-Instruct's text_config: the same but for these two."""


@pytest.mark.parametrize(
    ("text", "preset"), [(TEXT, "llama-4-scout"), (MAVERICK, "llama-4-maverick")]
)
def test_a_llama4_config_reads_as_the_preset(
    tmp_path: Path, text: dict[str, Any], preset: str
) -> None:
    spec = _load(tmp_path, _config(text))
    assert replace(spec, name="", source="") == replace(MODELS[preset], name="", source="")


def test_maverick_has_a_dense_layer_between_two_moe_layers() -> None:
    scout, maverick = MODELS["llama-4-scout"], MODELS["llama-4-maverick"]
    assert (scout.moe_layers, maverick.moe_layers, maverick.dense_layers) == (48, 24, 24)
    expert = 3 * 5120 * 8192
    attention = 2 * 5120 * 5120 + 2 * 5120 * 1024
    # Each MoE layer: 128 routed experts, the shared one (no gate), the router.
    moe = 129 * expert + 128 * 5120
    dense = 3 * 5120 * 16384
    assert maverick.num_params == (
        48 * (attention + 2 * 5120) + 24 * moe + 24 * dense + 2 * 202048 * 5120 + 5120
    )
    # One routed and the shared expert a token: 17B active, as both cards say.
    assert maverick.active_params == pytest.approx(17.18e9, rel=1e-3)


def test_a_text_config_that_leaves_its_defaults_out(tmp_path: Path) -> None:
    # transformers writes a nested config's keys only where they differ from its class.
    sparse = {"model_type": "llama4_text", "interleave_moe_layer_step": 2, "num_local_experts": 128}
    spec = _load(tmp_path, _config(sparse))
    assert replace(spec, name="", source="") == replace(
        MODELS["llama-4-maverick"], name="", source=""
    )


def test_the_roofline_reads_the_shared_expert_and_the_dense_layers_every_step() -> None:
    scout, _ = engine_for("llama-4-scout", "h100", 4)
    expert = 3 * 5120 * 8192 // 4 * 2  # bf16 bytes of one expert on each of 4 GPUs
    reads = 3.35e12 * 0.898
    assert scout.expert_read_s == pytest.approx(48 * expert / reads)
    assert scout.experts == 16 and scout.expert_miss == pytest.approx(1 - 1 / 16)
    maverick, _ = engine_for("llama-4-maverick", "h200", 8)
    expert = 3 * 5120 * 8192 // 8 * 2
    assert maverick.expert_read_s == pytest.approx(24 * expert / (4.8e12 * 0.898))
    # Only the MoE layers pay the fused-MoE call's latency.
    assert maverick.overhead_s == pytest.approx(48 * 26e-6 + 24 * 25e-6)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"intermediate_size_mlp": None}, "key 'intermediate_size_mlp': expected a positive"),
        ({"moe_layers": [1, 48]}, "key 'moe_layers': layer 48 is not below num_hidden_layers (48)"),
        ({"moe_layers": "all"}, "key 'moe_layers': expected a list of layer indices, got 'all'"),
        (
            {"interleave_moe_layer_step": 49},
            "key 'interleave_moe_layer_step': no layer of num_hidden_layers (48) is a MoE layer",
        ),
    ],
)
def test_a_bad_llama4_config_names_its_key(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_config(TEXT | change)), encoding="utf-8")
    with pytest.raises(ModelConfigError) as err:
        load_model_config(path)
    assert str(err.value).startswith(f"{path}: text_config: {message}")


def test_listed_moe_layers_win_over_the_step(tmp_path: Path) -> None:
    spec = _load(tmp_path, _config(MAVERICK | {"moe_layers": [0, 1, 2]}))
    assert (spec.moe_layers, spec.dense_layers) == (3, 45)
