"""Sliding windows (issue 23, engine fidelity): the layers that attend within a window of
``W`` tokens (Mistral-7B-v0.1, Gemma 2 and 3, Phi-3-mini, Llama 4's chunked attention) are
charged at most ``W`` keys a query and a decoded sequence, read from a ``config.json`` by
``layer_types`` or the family's rule."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from chunked_prefill.sim.catalog import (
    MODELS,
    ModelConfigError,
    ModelSpec,
    engine_for,
    load_model_config,
)
from chunked_prefill.sim.report import results_to_json
from chunked_prefill.sim.serving import ServingSimConfig, simulate_serving
from chunked_prefill.sim.workload import Workload

MISTRAL = {
    "model_type": "mistral",
    "num_hidden_layers": 32,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 32000,
    "sliding_window": 4096,
    "torch_dtype": "bfloat16",
}
"""Mistral-7B-v0.1's config.json (the keys read)."""

GEMMA2 = {
    "model_type": "gemma2",
    "num_hidden_layers": 42,
    "hidden_size": 3584,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 256,
    "intermediate_size": 14336,
    "vocab_size": 256000,
    "sliding_window": 4096,
    "torch_dtype": "bfloat16",
}
"""google/gemma-2-9b's config.json (no ``layer_types``: transformers derives it)."""

QWEN = {
    "model_type": "qwen2",
    "num_hidden_layers": 28,
    "hidden_size": 3584,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "intermediate_size": 18944,
    "vocab_size": 152064,
    "sliding_window": 131072,
    "use_sliding_window": False,
    "max_window_layers": 28,
}
"""Qwen2.5-7B-Instruct's config.json: a window given, and switched off."""

GEMMA3_TEXT = {
    "model_type": "gemma3_text",
    "num_hidden_layers": 34,
    "hidden_size": 2560,
    "head_dim": 256,
    "intermediate_size": 10240,
    "sliding_window": 1024,
}
"""Gemma-3-4B's ``text_config``: its class's defaults left out (``sliding_window_pattern``
6 among them)."""


def _load(tmp_path: Path, doc: dict[str, Any]) -> ModelSpec:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return load_model_config(path)


def _window(spec: ModelSpec) -> tuple[int, int]:
    return spec.sliding_window, spec.window_layers


def test_configs_read_as_the_presets(tmp_path: Path) -> None:
    assert _window(_load(tmp_path, MISTRAL)) == _window(MODELS["mistral-7b-v0.1"]) == (4096, 32)
    gemma = _load(tmp_path, GEMMA2)
    assert replace(gemma, name="", source="") == replace(MODELS["gemma-2-9b"], name="", source="")
    assert _window(gemma) == (4096, 21)
    assert _window(MODELS["llama-4-scout"]) == (8192, 36)


@pytest.mark.parametrize(
    ("doc", "window"),
    [
        (MISTRAL | {"sliding_window": None}, (0, 0)),  # Mistral-7B-v0.2/v0.3, Mixtral
        (QWEN, (0, 0)),
        (QWEN | {"use_sliding_window": True, "max_window_layers": 20}, (131072, 8)),
        (QWEN | {"use_sliding_window": True, "max_window_layers": 40}, (0, 0)),
        # Every other layer from the first, by default 4 096 tokens.
        ({k: v for k, v in GEMMA2.items() if k != "sliding_window"}, (4096, 21)),
        (GEMMA2 | {"num_hidden_layers": 5}, (4096, 3)),
        (GEMMA2 | {"layer_types": ["full_attention", "sliding_attention"] * 21}, (4096, 21)),
        (GEMMA2 | {"layer_types": ["full_attention"] * 42}, (0, 0)),
        (MISTRAL | {"model_type": "phi3", "sliding_window": 2047}, (2047, 32)),
        (MISTRAL | {"model_type": "cohere2", "tie_word_embeddings": True}, (4096, 24)),
        (MISTRAL | {"model_type": "gemma3_text", "sliding_window_pattern": 4}, (4096, 24)),
    ],
)
def test_the_family_rules(tmp_path: Path, doc: dict[str, Any], window: tuple[int, int]) -> None:
    assert _window(_load(tmp_path, doc)) == window


def test_a_gemma3_text_config_nested_with_its_defaults_left_out(tmp_path: Path) -> None:
    doc = {"model_type": "gemma3", "text_config": GEMMA3_TEXT, "torch_dtype": "bfloat16"}
    # Five layers in six attend within 1 024 tokens: 34 - 34 // 6 = 29.
    assert _window(_load(tmp_path, doc)) == (1024, 29)


def test_a_gemma3_config_reads_as_its_preset(tmp_path: Path) -> None:
    text = {
        "model_type": "gemma3_text",
        "head_dim": 128,
        "hidden_size": 5376,
        "intermediate_size": 21504,
        "num_attention_heads": 32,
        "num_hidden_layers": 62,
        "num_key_value_heads": 16,
        "sliding_window": 1024,
        "vocab_size": 262208,
    }
    doc = {"model_type": "gemma3", "text_config": text, "torch_dtype": "bfloat16"}
    spec = _load(tmp_path, doc)
    assert replace(spec, name="", source="") == replace(MODELS["gemma-3-27b"], name="", source="")
    # 52 of 62 layers attend within 1 024 tokens; each reads at most that many a sequence.
    engine, _ = engine_for(spec, "h100")
    assert engine.window_kv_token_s == pytest.approx(52 / 10 * engine.kv_token_s)


def test_a_mistral3_text_config_without_a_window_has_the_class_default(tmp_path: Path) -> None:
    # MistralConfig's default is 4 096; Mistral-Small-3.1 writes null to turn it off.
    text = {"model_type": "mistral", "hidden_size": 5120, "num_hidden_layers": 40}
    assert _window(_load(tmp_path, {"text_config": text})) == (4096, 40)
    off = text | {"sliding_window": None}
    assert _window(_load(tmp_path, {"text_config": off})) == (0, 0)


LLAMA4 = {
    "model_type": "llama4_text",
    "num_hidden_layers": 8,
    "hidden_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 256,
    "intermediate_size_mlp": 1024,
    "vocab_size": 1000,
    "num_local_experts": 4,
    "num_experts_per_tok": 1,
}


@pytest.mark.parametrize(
    ("change", "window"),
    [
        ({}, (8192, 6)),  # the default chunk, all layers but every fourth
        ({"attention_chunk_size": 4096}, (4096, 6)),
        ({"no_rope_layers": [1, 0, 1, 0, 1, 0, 1, 0]}, (8192, 4)),
        ({"no_rope_layer_interval": 2}, (8192, 4)),
        ({"attention_chunk_size": None}, (0, 0)),
        ({"no_rope_layers": [0] * 8}, (0, 0)),
    ],
)
def test_llama4_chunks_its_rope_layers(
    tmp_path: Path, change: dict[str, Any], window: tuple[int, int]
) -> None:
    assert _window(_load(tmp_path, LLAMA4 | change)) == window


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (
            GEMMA2 | {"layer_types": ["sliding_attention"] * 41},
            "key 'layer_types': expected a list of 42 entries (num_hidden_layers) each one of"
            " full_attention, sliding_attention, chunked_attention, got an array",
        ),
        (
            GEMMA2 | {"layer_types": ["linear_attention"] * 42},
            "key 'layer_types': expected a list of 42 entries",
        ),
        (
            GEMMA2 | {"layer_types": ["sliding_attention", "chunked_attention"] * 21},
            "key 'layer_types': both sliding_attention and chunked_attention layers are not"
            " modelled (one window size)",
        ),
        (
            MISTRAL | {"layer_types": ["sliding_attention"] * 32, "sliding_window": None},
            "key 'sliding_window': expected a positive whole number, got null",
        ),
        (MISTRAL | {"sliding_window": 0}, "key 'sliding_window': expected a positive whole"),
        (MISTRAL | {"sliding_window": "4k"}, "key 'sliding_window': expected a positive whole"),
        (QWEN | {"use_sliding_window": "yes"}, "key 'use_sliding_window': expected true or false"),
        (
            LLAMA4 | {"no_rope_layers": [1, 2, 1, 1, 1, 1, 1, 1]},
            "key 'no_rope_layers': expected a list of 8 entries (num_hidden_layers), each 0 or 1",
        ),
        (LLAMA4 | {"attention_chunk_size": -1}, "key 'attention_chunk_size': expected a positive"),
    ],
)
def test_a_bad_window_names_its_key(tmp_path: Path, doc: dict[str, Any], message: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(ModelConfigError) as err:
        load_model_config(path)
    assert str(err.value).startswith(f"{path}: {message}")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"sliding_window": 4096}, "sliding_window 4096 and window_layers 0"),
        ({"window_layers": 3}, "sliding_window 0 and window_layers 3"),
        ({"sliding_window": 4096, "window_layers": 33}, "window_layers from 1 to"),
    ],
)
def test_a_spec_checks_its_window(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match="a sliding window needs") as err:
        replace(MODELS["mistral-7b-v0.2"], **change)
    assert message in str(err.value)


def test_mla_with_a_window_is_refused() -> None:
    with pytest.raises(ValueError, match="with multi-head latent attention is not modelled"):
        replace(MODELS["deepseek-v2-lite"], sliding_window=4096, window_layers=1)


def test_the_windowed_layers_have_their_own_terms() -> None:
    gemma, _ = engine_for("gemma-2-9b", "a100-80gb")
    full, _ = engine_for(replace(MODELS["gemma-2-9b"], sliding_window=0, window_layers=0), "a100")
    # 21 layers of 42 each side: every attention coefficient halves, the rest is the same.
    assert gemma.window_tokens == 4096.0
    assert gemma.pair_s == gemma.window_pair_s == pytest.approx(full.pair_s / 2, rel=1e-15)
    assert gemma.kv_token_s == gemma.window_kv_token_s == pytest.approx(full.kv_token_s / 2)
    assert (gemma.dense_read_s, gemma.token_s) == (full.dense_read_s, full.token_s)
    assert full.window_tokens == full.window_pair_s == full.window_kv_token_s == 0.0


def test_a_decode_reads_at_most_the_window() -> None:
    v1, _ = engine_for("mistral-7b-v0.1", "a100-80gb")
    v2, _ = engine_for("mistral-7b-v0.2", "a100-80gb")
    # Every layer windowed: one sequence of 10 000 tokens reads 4 096 of them, as v0.2 at
    # 4 096; below the window both are the same.
    assert v1.step_time(0, 1, 0, 10_000) == v2.step_time(0, 1, 0, 4096)
    assert v1.step_time(0, 1, 0, 3000) == v2.step_time(0, 1, 0, 3000)
    # (One sequence reads at 8 / (8 + 1.75) of the full rate: 1.75 / 8 sequences' worth more.)
    slow = 1 + 1.75 / 8
    assert v1.terms(0, 1, 0, 10_000)["decode_attention"] == v1.window_kv_token_s * 4096 * slow
    # Two sequences of 1 000 and 9 000 tokens: the step's sum is capped at 2 x 4 096, more
    # than capping each (1 000 + 4 096): the decode group keeps only the sum.
    slow = 1 + 1.75 / 8 / 2
    assert v1.terms(0, 2, 0, 10_000)["decode_attention"] == v1.window_kv_token_s * 8192 * slow


def test_a_chunk_beyond_the_window_attends_to_the_window() -> None:
    v1, _ = engine_for("mistral-7b-v0.1", "h100")
    v2, _ = engine_for("mistral-7b-v0.2", "h100")
    deep = 512 * 8192 + 512 * 513 // 2  # a 512-token chunk after 8 192 cached tokens
    assert v1.terms(512, 0, deep, 0, 512 * 512, 1)["prefill_attention"] == (
        v1.window_pair_s * 4096 * 512
    )
    assert v2.terms(512, 0, deep, 0, 512 * 512, 1)["prefill_attention"] == v2.pair_s * deep
    first = 512 * 513 // 2  # the prompt's first chunk: below the window, nothing capped
    assert v1.step_time(512, 0, first, 0, 512 * 512, 1) == v2.step_time(
        512, 0, first, 0, 512 * 512, 1
    )


def test_the_rust_and_pure_loops_agree_across_the_window() -> None:
    # A 200-token window, which the prompts and outputs below straddle.
    spec = replace(MODELS["gemma-2-9b"], sliding_window=200)
    engine, _ = engine_for(spec, "h100-sxm")
    workload = Workload(
        (0.0, 0.0, 0.01, 0.02, 0.5), (150, 900, 40, 2500, 199), (300, 20, 180, 2, 64)
    )
    configs = [ServingSimConfig(chunk_size=128), ServingSimConfig(chunk_size=None)]
    rust = simulate_serving(workload, configs, engine=engine, num_blocks=400, backend="rust")
    pure = simulate_serving(workload, configs, engine=engine, num_blocks=400, backend="pure")
    assert results_to_json(rust) == results_to_json(pure)
    # And the window shortens the run against the same layers without it.
    (whole, _) = simulate_serving(
        workload,
        configs,
        engine=engine_for(replace(spec, sliding_window=0, window_layers=0), "h100-sxm")[0],
        num_blocks=400,
    )
    assert rust[0].sim_time_s < whole.sim_time_s
