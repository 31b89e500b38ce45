"""Weight-only integer checkpoints (issue 23, a wider catalog): GPTQ and AWQ (and
compressed-tensors' W4A16/W8A16) read as int4/int8 linear weights with their group scales,
read by Marlin at 0.78 of a 16-bit GEMV's rate and multiplied in 16 bits; Qwen's quantized
checkpoint ids name the preset with those weights."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from chunked_prefill.sim.catalog import GPUS, MODELS, engine_for, load_model_config, resolve_model
from chunked_prefill.sim.engines.roofline import MARLIN_READ_FACTOR

QWEN_7B = {
    "architectures": ["Qwen2ForCausalLM"],
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "model_type": "qwen2",
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "vocab_size": 152064,
}
"""Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4's config.json without its quantization_config (GPTQ
checkpoints keep float16 activations)."""

GPTQ_INT4 = {
    "bits": 4,
    "damp_percent": 0.01,
    "desc_act": False,
    "group_size": 128,
    "quant_method": "gptq",
    "sym": True,
}
AWQ = {"bits": 4, "group_size": 128, "quant_method": "awq", "version": "gemm", "zero_point": True}
W8A16 = {
    "quant_method": "compressed-tensors",
    "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "int", "group_size": 128}}},
}


def _load(tmp_path: Path, quant: dict[str, Any]) -> Any:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(QWEN_7B | {"quantization_config": quant}), encoding="utf-8")
    return load_model_config(path)


LINEAR = 28 * (2 * 3584 * 3584 + 2 * 3584 * 512 + 3 * 3584 * 18944)
"""Qwen2.5-7B's decoder-layer linear weights."""


@pytest.mark.parametrize(
    ("quant", "dtype", "bits"),
    [(GPTQ_INT4, "int4", 4.125), (AWQ, "int4", 4.125), (W8A16, "int8", 8.125)],
)
def test_integer_weights_count_their_bits_and_group_scales(
    tmp_path: Path, quant: dict[str, Any], dtype: str, bits: float
) -> None:
    spec = _load(tmp_path, quant)
    assert (spec.weight_dtype, spec.weight_only, spec.weight_dtype_bytes) == (dtype, True, bits / 8)
    # The linear weights at their bits (a 16-bit scale per 128); norms, embedding, LM head
    # at 2 bytes.
    wide = 2 * (28 * 2 * 3584 + 2 * 152064 * 3584 + 3584)
    assert spec.weight_bytes_per_gpu(1) == -(-LINEAR * bits // 8) + wide


def test_marlin_reads_slower_and_multiplies_in_16_bits() -> None:
    bf16, _ = engine_for("qwen2.5-7b", "h100-sxm")
    int4, _ = engine_for("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4", "h100-sxm")
    h100 = GPUS["h100-sxm"]
    reads = h100.hbm_bandwidth * h100.weight_read_efficiency
    # The linear weights' reads: 2 bytes against 4.125 bits at 0.78 of the rate.
    saved = LINEAR * (2 - 4.125 / 8 / MARLIN_READ_FACTOR) / reads
    assert bf16.dense_read_s - int4.dense_read_s == pytest.approx(saved, rel=1e-9)
    # Weight-only: the GEMMs run at the 16-bit peak (the H100's FP8 peak is for FP8 only).
    assert int4.token_s == bf16.token_s
    fp8, _ = engine_for("Qwen/Qwen2.5-7B-Instruct-FP8", "h100-sxm")
    assert fp8.token_s == pytest.approx(bf16.token_s * h100.peak_flops / h100.fp8_peak_flops)


@pytest.mark.parametrize(
    ("model", "preset", "dtype", "name"),
    [
        ("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4", "qwen2.5-7b", "int4", "qwen2.5-7b-gptq-int4"),
        ("qwen/qwen2.5-14b-instruct-gptq-int8", "qwen2.5-14b", "int8", "qwen2.5-14b-gptq-int8"),
        ("Qwen/Qwen2.5-72B-Instruct-AWQ", "qwen2.5-72b", "int4", "qwen2.5-72b-awq"),
        ("Qwen/Qwen3-8B-FP8", "qwen3-8b", "fp8", "qwen3-8b-fp8"),
    ],
)
def test_a_quantized_checkpoint_id_names_its_preset(
    model: str, preset: str, dtype: str, name: str
) -> None:
    spec = resolve_model(model)
    assert spec == replace(MODELS[preset], name=name, weight_dtype=dtype)


def test_a_suffix_alone_or_on_an_unknown_model_is_no_model() -> None:
    with pytest.raises(Exception, match=r"unknown model 'Qwen/Qwen9-7B-AWQ'"):
        resolve_model("Qwen/Qwen9-7B-AWQ")
    with pytest.raises(Exception, match=r"unknown model 'qwen2\.5-7b-awq'"):
        resolve_model("qwen2.5-7b-awq")  # a preset name, not a Hugging Face id


def test_fp8_at_load_is_for_16_bit_weights_only() -> None:
    with pytest.raises(ValueError) as err:
        engine_for("Qwen/Qwen2.5-7B-Instruct-AWQ", "h100-sxm", quantization="fp8")
    assert str(err.value) == (
        "quantization 'fp8' quantizes 16-bit weights at load, but qwen2.5-7b-awq's are int4"
        " already (a GPTQ or AWQ checkpoint)"
    )
