"""The roofline engine (issue 13): hand-computed step times per term, KV memory per preset,
config.json and GPU profile files, ``chunked-prefill engines`` and ``simulate --model``."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from chunked_prefill.cli import main
from chunked_prefill.sim.catalog import (
    GPUS,
    MODELS,
    EngineFitError,
    ModelConfigError,
    ModelSpec,
    engine_for,
    gpu_name,
    load_gpu_profile,
    load_model_config,
)
from chunked_prefill.sim.engine import DEFAULT_ENGINE, GIB
from chunked_prefill.sim.roofline import RooflineModel, pow_int
from chunked_prefill.sim.software import vllm_software, vllm_token_budget

LLAMA_31_8B_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 128256,
}
"""meta-llama/Llama-3.1-8B-Instruct's config.json (the keys the roofline reads, and a few
it ignores)."""

LLAMA_2_7B = ModelSpec(
    name="llama-2-7b",
    num_hidden_layers=32,
    hidden_size=4096,
    num_attention_heads=32,
    num_key_value_heads=32,
    head_dim=128,
    intermediate_size=11008,
    vocab_size=32000,
    dtype_bytes=2,
    weight_dtype="float16",
    source="https://huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json",
)


def _write(tmp_path: Path, name: str, doc: Any) -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc), encoding="utf-8")
    return path


# ------------------------------------------------------------------- the roofline, by hand

# Llama-3.1-8B per layer: Q and O 4096 x 4096 each, K and V 4096 x 1024 each; gated MLP
# 3 x 4096 x 14336. LM head 128256 x 4096. bf16.
ATTN_8B = 2 * 4096 * 4096 + 2 * 4096 * 1024  # 41 943 040
MLP_8B = 3 * 4096 * 14336  # 176 160 768
HEAD_8B = 128256 * 4096  # 525 336 576


def test_dense_roofline_terms_by_hand() -> None:
    engine, _ = engine_for("llama-3.1-8b", "a100-80gb", 1)
    flops = 312e12 * 0.675
    reads = 2.039e12 * 0.80  # weights
    gemvs = (32 * 4 + 1) * 5.1e-6  # Q/K/V, O, gate/up and down in 32 layers, the LM head
    kv_reads = 2.039e12 * 0.70  # FlashAttention's decode kernel on the A100, measured
    token_s = 2 * 32 * (ATTN_8B + MLP_8B) / flops
    assert engine.token_s == pytest.approx(token_s, rel=1e-12)
    # The GEMMs' efficiency is 0.675 N / (N + 64): 64 tokens' worth of time more.
    assert engine.gemm_fixed_s == pytest.approx(64 * token_s, rel=1e-12)
    assert engine.expert_fixed_s == 0.0
    assert engine.head_row_s == pytest.approx(2 * HEAD_8B / flops, rel=1e-12)
    weights = 2 * (32 * (ATTN_8B + MLP_8B) + HEAD_8B)  # every weight read but the embedding
    assert engine.dense_read_s == pytest.approx(weights / reads + gemvs, rel=1e-12)
    assert engine.gemv_fixed_s == pytest.approx(gemvs, rel=1e-12)
    # FlashAttention (the default backend): pairs at 55 % of peak, no squared-chunk term.
    assert engine.pair_s == pytest.approx(4 * 128 * 32 * 32 / (312e12 * 0.55), rel=1e-12)
    assert engine.chunk_sq_s == 0.0
    assert engine.kv_token_s == pytest.approx(2 * 32 * 8 * 128 * 2 / kv_reads, rel=1e-12)
    # Half that rate at 1.75 (sequence, K/V head) pairs: 1.75 / 8 sequences of 8 K/V heads.
    assert engine.kv_half_seqs == 1.75 / 8
    assert (engine.allreduce_call_s, engine.allreduce_token_s, engine.experts) == (0, 0, 0)
    # 32 layers' small kernels; vLLM's CPU (the default serving engine), CUDA graphs.
    assert engine.overhead_s == pytest.approx(32 * 26e-6, rel=1e-12)
    assert (engine.cpu_step_s, engine.seq_s, engine.launch_s) == (0.5e-3, 5e-6, 0.0)
    # A decode step of 8 requests at 1 000 tokens of context reads the weights (12.0 ms),
    # and their caches at 64 / (64 + 1.75) of the full rate.
    decode = engine.step_time(0, 8, 0, 8000)
    cpu = 0.5e-3 + 8 * 5e-6
    kv = 8000 * 131072 / kv_reads * (1 + 1.75 / 64)
    assert decode == pytest.approx(32 * 26e-6 + weights / reads + gemvs + kv + cpu)
    assert 0.0119 < decode < 0.0120
    # A 2 048-token chunk on an empty cache is bound by its FLOPs: 2 048 + 64 tokens + 1
    # LM-head row, and 2048 * 2049 / 2 attention pairs.
    pairs = 2048 * 2049 // 2
    prefill = engine.step_time(2048, 0, pairs, 0, 2048 * 2048, 1)
    want = 32 * 26e-6 + (2048 + 64) * token_s + 2 * HEAD_8B / flops
    want += pairs * 4 * 128 * 32 * 32 / (312e12 * 0.55)
    want += 0.5e-3 + 5e-6
    assert prefill == pytest.approx(want, rel=1e-12)
    terms = engine.terms(2048, 0, pairs, 0, 2048 * 2048, 1)
    assert terms["linear_compute"] > terms["linear_memory"]
    assert sum(v for k, v in terms.items() if k != "linear_memory") == pytest.approx(prefill)


def test_the_vidur_backend_charges_squared_chunks_and_none_drops_the_cpu() -> None:
    engine, _ = engine_for(
        "llama-3.1-8b", "a100-80gb", 1, serving_engine="none", attention_backend="vidur"
    )
    assert engine.pair_s == pytest.approx(4 * 128 * 32 * 32 / (312e12 * 0.65), rel=1e-12)
    assert engine.chunk_sq_s == pytest.approx(4 * 128 * 32 * 32 / (312e12 * 0.26), rel=1e-12)
    assert (engine.cpu_step_s, engine.seq_s, engine.launch_s) == (0.0, 0.0, 0.0)
    flash, _ = engine_for("llama-3.1-8b", "a100-80gb", 1, serving_engine="none")
    pairs = 512 * 513 // 2
    extra = engine.step_time(512, 0, pairs, 0, 512 * 512, 1) - flash.step_time(
        512, 0, pairs, 0, 512 * 512, 1
    )
    assert extra == pytest.approx(
        pairs * (engine.pair_s - flash.pair_s) + 512 * 512 * engine.chunk_sq_s, rel=1e-9
    )


def test_v0_before_0_6_and_eager_process_outputs_in_line() -> None:
    # RFC #6913: _process_model_outputs took 0.2 ms at batch 1 and 3.4 ms at batch 32; the
    # asynchronous output processor (0.6.0) hides it, but not in eager mode.
    v0, _ = engine_for("llama-3.1-8b", "a100-80gb", serving_engine="vllm-v0")
    for name in ("vllm-v0-sync", "vllm-v0-eager"):
        sync, _ = engine_for("llama-3.1-8b", "a100-80gb", serving_engine=name)
        # (8B's decode on an A100 outlasts launching its kernels eagerly: 4.8 ms.)
        extra = [sync.step_time(0, b, 0, 0) - v0.step_time(0, b, 0, 0) for b in (1, 32)]
        assert extra == pytest.approx([0.2e-3, 3.4e-3], rel=1e-9)


def test_few_decodes_with_few_kv_heads_read_their_cache_slower() -> None:
    # Qwen2.5-72B at TP 4 on A100s: 2 of its 8 K/V heads a GPU, so one sequence is 2 (sequence,
    # K/V head) pairs, and FlashAttention's decode reads run at 2 / (2 + 1.75) of their rate.
    engine, _ = engine_for("qwen2.5-72b", "a100-80gb", 4)
    assert engine.kv_half_seqs == 1.75 / 2
    full_rate = engine.kv_token_s * 100_000
    one = engine.terms(0, 1, 0, 100_000)["decode_attention"]
    assert one == pytest.approx(full_rate * (2 + 1.75) / 2, rel=1e-12)
    # 64 sequences of the same total context: nearly the full rate.
    many = engine.terms(0, 64, 0, 100_000)["decode_attention"]
    assert many == pytest.approx(full_rate * (1 + 1.75 / 128), rel=1e-12)
    # The step's time holds the same term: one sequence's step with and without its context.
    gap = engine.step_time(0, 1, 0, 100_000) - engine.step_time(0, 1, 0, 0)
    assert gap == pytest.approx(one, rel=1e-9)
    # A prefill-only step reads no decode cache; MLA's kernel was not measured: no loss.
    assert engine.terms(512, 0, 512 * 513 // 2, 0)["decode_attention"] == 0.0
    v3, _ = engine_for("deepseek-v3", "h200", 8)
    assert v3.kv_half_seqs == 0.0


def test_the_paged_backend_reads_kv_once_per_query_head() -> None:
    # vLLM's PagedAttention decode kernel: one thread block per query head, each reading its
    # K/V head's cache. Llama-3.1-8B: 32 query heads share 8 K/V heads, so 4 reads.
    flash, _ = engine_for("llama-3.1-8b", "a100-80gb", 1)
    paged, _ = engine_for("llama-3.1-8b", "a100-80gb", 1, attention_backend="paged")
    once = 2 * 32 * 8 * 128 * 2 / 2.039e12
    # FlashAttention at its measured rate; PagedAttention (not measured) at hbm_efficiency,
    # every K/V head's cache read 4 times, and no loss at few sequences.
    assert flash.kv_token_s == pytest.approx(once / 0.70, rel=1e-12)
    assert paged.kv_token_s == pytest.approx(4 * once / 0.85, rel=1e-12)
    assert (flash.kv_half_seqs, paged.kv_half_seqs) == (1.75 / 8, 0.0)
    assert (paged.pair_s, paged.chunk_sq_s) == (flash.pair_s, flash.chunk_sq_s)
    assert paged.attention_backend == "paged"
    # TP 8 of Llama-3.1-70B: 8 query heads and 1 K/V head per GPU, so 8 reads of that head.
    flash70, _ = engine_for("llama-3.1-70b", "h100-sxm", 8)
    paged70, _ = engine_for("llama-3.1-70b", "h100-sxm", 8, attention_backend="paged")
    assert paged70.kv_token_s == pytest.approx(8 * flash70.kv_token_s * 0.91 / 0.85, rel=1e-12)
    # Without grouped-query attention (Llama-2-7B: 32 and 32) there is nothing to re-read:
    # only the two kernels' rates differ.
    mha, _ = engine_for("llama-2-7b", "a100-80gb", 1)
    mha_paged, _ = engine_for("llama-2-7b", "a100-80gb", 1, attention_backend="paged")
    assert mha_paged.kv_token_s == pytest.approx(mha.kv_token_s * 0.70 / 0.85, rel=1e-12)


@pytest.mark.parametrize(
    ("version", "eager", "software"),
    [
        ("0.4.2", False, ("vllm-v0-sync", "paged")),  # PagedAttention decode until 0.4.3
        ("v0.3.3", True, ("vllm-v0-eager", "paged")),
        ("0.4.3", False, ("vllm-v0-sync", "flash")),
        ("0.5.5", False, ("vllm-v0-sync", "flash")),  # outputs processed in line until 0.6
        ("0.6.0", False, ("vllm-v0", "flash")),
        ("0.6.4.post1", False, ("vllm-v0", "flash")),
        ("0.7", True, ("vllm-v0-eager", "flash")),
        ("0.8.0", False, ("vllm", "flash")),  # V1 by default from 0.8
        ("0.10.1rc1", True, ("vllm-eager", "flash")),
        ("1.2", False, ("vllm", "flash")),
    ],
)
def test_vllm_software_follows_the_release(
    version: str, eager: bool, software: tuple[str, str]
) -> None:
    assert vllm_software(version, eager=eager) == software


@pytest.mark.parametrize("version", ["banana", "", "0", "0.x", "x0.4.2", "04"])
def test_vllm_software_refuses_what_is_no_release(version: str) -> None:
    with pytest.raises(ValueError, match=rf"vLLM version {re.escape(repr(version))}: want"):
        vllm_software(version)


def test_vllm_software_refuses_a_version_that_is_no_string() -> None:
    with pytest.raises(TypeError, match=r"vLLM version must be a string such as '0.4.2', got 0.4"):
        vllm_software(0.4)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("version", "max_model_len", "budget"),
    [
        ("0.6.3", 32768, None),  # V0 prefills whole up to 32 k of context
        ("0.6.3", 32769, 512),  # and chunks at 512 beyond (PR #6666)
        ("0.5.4", 131072, 512),
        ("0.5.3", 131072, None),  # tagged the day PR #6666 merged: not counted
        ("0.4.2", 131072, None),
        ("0.7.3", 131072, 512),
    ],
)
def test_vllm_token_budget_follows_the_release_and_context(
    version: str, max_model_len: int, budget: int | None
) -> None:
    assert vllm_token_budget(version, max_model_len) == budget


@pytest.mark.parametrize(
    ("gpu", "offline", "budget"),
    [
        ("h100", True, 16384),  # V1 always chunks; more on the H100 and H200 (PR #12369)
        ("h100-pcie", False, 8192),
        ("H200", True, 16384),
        ("a100-80gb", True, 8192),
        ("l40s", False, 2048),
    ],
)
def test_vllm_v1_token_budget_follows_the_gpu_and_entry_point(
    gpu: str, offline: bool, budget: int
) -> None:
    assert vllm_token_budget("0.8.0", 4096, gpu=gpu, offline=offline) == budget
    spec = GPUS[gpu_name(gpu) or gpu]  # a spec as well as a name
    assert vllm_token_budget("0.10.1rc1", 131072, gpu=spec, offline=offline) == budget


def test_vllm_token_budget_refuses_a_bad_context() -> None:
    rule = r"max_model_len must be an int in \[1, 9223372036854775807\], got "
    with pytest.raises(ValueError, match=rule + "0$"):
        vllm_token_budget("0.6.3", 0)
    with pytest.raises(ValueError, match=rule + "3.5$"):
        vllm_token_budget("0.6.3", 3.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=rule + "True$"):
        vllm_token_budget("0.6.3", True)
    with pytest.raises(TypeError, match=r"^offline must be True or False, got 'yes'$"):
        vllm_token_budget("0.8.0", 4096, gpu="h100", offline="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"vLLM version 'x': want"):
        vllm_token_budget("x", 4096)
    with pytest.raises(ValueError, match=r"^vLLM 0.8.1's default token budget depends on the GPU"):
        vllm_token_budget("0.8.1", 4096)


def test_eager_launches_bound_a_short_step() -> None:
    spec = ModelSpec(
        name="tiny",
        num_hidden_layers=16,
        hidden_size=2048,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=64,
        intermediate_size=8192,
        vocab_size=128256,
    )
    graphs, _ = engine_for(spec, "h100-sxm", 1, serving_engine="vllm")
    eager_engine, _ = engine_for(spec, "h100-sxm", 1, serving_engine="vllm-eager")
    # 16 layers x 150 us of launches = 2.4 ms, longer than the GPU's 1.2 ms decode step.
    assert eager_engine.launch_s == pytest.approx(16 * 150e-6)
    step = (0, 1, 0, 100)
    gpu = graphs.step_time(*step) - graphs.cpu_step_s - graphs.seq_s
    assert gpu < eager_engine.launch_s
    assert eager_engine.step_time(*step) == pytest.approx(
        eager_engine.launch_s + eager_engine.cpu_step_s + eager_engine.seq_s
    )


def test_unknown_software_names_are_refused() -> None:
    with pytest.raises(ModelConfigError, match=r"unknown serving engine 'vllm2': one of vllm,"):
        engine_for("llama-3.1-8b", "a100-80gb", serving_engine="vllm2")
    with pytest.raises(ModelConfigError, match=r"unknown attention backend 'xformers': one of"):
        engine_for("llama-3.1-8b", "a100-80gb", attention_backend="xformers")


def test_moe_reads_the_experts_its_tokens_route_to() -> None:
    engine, _ = engine_for("mixtral-8x7b", "h200", 1)
    reads = 4.8e12 * 0.898
    gemvs = (32 * 3 + 1) * 4.4e-6  # Q/K/V, O and the router in 32 layers, the LM head
    expert = 2 * 32 * MLP_8B  # one expert's weights in all 32 layers, bf16
    assert engine.expert_read_s == pytest.approx(expert / reads, rel=1e-12)
    assert (engine.experts, engine.expert_miss) == (8.0, 0.75)
    # Top-2 of 8: one token touches 2 experts, two tokens 8 * (1 - 0.75**2) = 3.5 expected,
    # and a large batch all 8.
    assert [engine.experts_touched(n) for n in (0, 1, 2)] == [0.0, 2.0, 3.5]
    assert engine.experts_touched(1000) == 8.0
    # Dense part: attention (K/V 4096 x 1024), routers (4096 x 8) and the LM head.
    dense = 2 * (32 * (ATTN_8B + 4096 * 8) + 32000 * 4096)
    one = engine.step_time(0, 1, 0, 100)
    # One sequence of 8 K/V heads reads at 8 / (8 + 12.75) of the H200's measured 0.90.
    kv = 100 * 2 * 32 * 8 * 128 * 2 / (4.8e12 * 0.90) * (1 + 12.75 / 8)
    # Each layer's small kernels, and each MoE layer's fused-MoE latency on top (25 us).
    assert engine.overhead_s == pytest.approx(32 * (26e-6 + 25e-6), rel=1e-12)
    assert one == pytest.approx(
        32 * (26e-6 + 25e-6) + (dense + 2 * expert) / reads + gemvs + kv + 0.5e-3 + 5e-6,
        rel=1e-12,
    )
    # Active FLOPs per token: attention, 2 experts, the router; each touched expert's GEMMs
    # pad to 64 tokens of their own.
    flops = 989e12 * 0.675
    assert engine.token_s == pytest.approx(
        2 * 32 * (ATTN_8B + 2 * MLP_8B + 4096 * 8) / flops, rel=1e-12
    )
    # The dense GEMMs pad to the H200's 172 tokens, each expert's to the fused-MoE kernel's 64.
    assert engine.gemm_fixed_s == pytest.approx(172 * 2 * 32 * (ATTN_8B + 4096 * 8) / flops)
    assert engine.expert_fixed_s == pytest.approx(64 * 2 * 32 * MLP_8B / flops, rel=1e-12)
    terms = engine.terms(4096, 0, 4096 * 4097 // 2, 0, 4096 * 4096, 1)
    assert terms["linear_compute"] == pytest.approx(
        4096 * engine.token_s + engine.gemm_fixed_s + 8 * engine.expert_fixed_s + engine.head_row_s
    )


def test_tensor_parallel_splits_the_weights_and_adds_all_reduces() -> None:
    engine, memory = engine_for("llama-3.1-70b", "h100-sxm", 4)
    attn = (2 * 8192 * 8192 + 2 * 8192 * 1024) // 4
    mlp = 3 * 8192 * 28672 // 4
    head = 128256 * 8192 // 4
    flops = 989e12 * 0.675
    assert engine.token_s == pytest.approx(2 * 80 * (attn + mlp) / flops, rel=1e-12)
    assert engine.dense_read_s == pytest.approx(
        2 * (80 * (attn + mlp) + head) / (3.35e12 * 0.898) + (80 * 4 + 1) * 4.4e-6, rel=1e-12
    )
    # Two all-reduces per layer, ring: 2 (tp - 1) / tp of a token's hidden state (8 192 x
    # 2 bytes) over 450 GB/s x 0.61 (NCCL at a step's message sizes), plus 25 us per call.
    assert engine.allreduce_call_s == pytest.approx(160 * 25e-6)
    assert engine.allreduce_token_s == pytest.approx(
        160 * 1.5 * 8192 * 2 / (450e9 * 0.61), rel=1e-12
    )
    # Two of the eight K/V heads per GPU.
    assert memory.kv_heads == 2 and memory.bytes_per_token == 2 * 80 * 2 * 128 * 2
    assert engine.name == "llama-3.1-70b on h100-sxm x TP 4"


def test_fewer_kv_heads_than_gpus_keeps_one_per_gpu() -> None:
    spec = MODELS["llama-3.1-8b"]
    assert spec.kv_heads_per_gpu(16) == 1
    assert spec.kv_bytes_per_token(16) == 2 * 32 * 1 * 128 * 2
    # K and V projections are replicated: each GPU holds one head's worth of them.
    assert spec.weight_bytes_per_gpu(16) == 2 * (
        32 * (2 * 4096 * 4096 // 16 + 2 * 4096 * 128 + MLP_8B // 16 + 2 * 4096)
        + 2 * HEAD_8B // 16
        + 4096
    )


def test_heads_that_do_not_split_are_refused() -> None:
    with pytest.raises(EngineFitError, match=r"40 attention heads and 8 K/V heads do not split"):
        engine_for("qwen2.5-32b", "h100-sxm", 16)
    with pytest.raises(ValueError, match="tp must be a whole number"):
        engine_for("qwen2.5-32b", "h100-sxm", 0)


def test_pow_int_is_plain_squaring() -> None:
    assert pow_int(0.75, 0) == 1.0
    assert pow_int(0.75, 3) == 0.75 * 0.75 * 0.75
    assert pow_int(0.5, 10) == 1 / 1024


# ------------------------------------------------------------------- memory and presets


def test_kv_blocks_of_a_preset_by_hand() -> None:
    _, memory = engine_for("llama-3.1-8b", "a100-80gb", 1)
    weights = 2 * MODELS["llama-3.1-8b"].num_params
    assert memory.weight_bytes == weights == 16_060_522_496
    kv = int(80 * GIB * 0.9) - weights - 2 * GIB
    assert memory.num_blocks(16) == kv // 131072 // 16 == 28181


@pytest.mark.parametrize(
    ("model", "gpu", "tp", "blocks"),
    [
        ("llama-3.1-8b", "h200", 1, 51828),
        ("llama-3.1-70b", "a100-80gb", 2, 1757),
        ("llama-3.1-70b", "h100-sxm", 8, 87770),
        ("qwen2.5-32b", "l40s", 2, 3952),
        ("mixtral-8x7b", "h200", 1, 14947),
        ("mixtral-8x7b", "l40s", 4, 33758),
    ],
)
def test_kv_blocks_per_preset(model: str, gpu: str, tp: int, blocks: int) -> None:
    _, memory = engine_for(model, gpu, tp)
    spec, card = MODELS[model], GPUS[gpu]
    usable = int(card.memory_bytes * 0.9) - spec.weight_bytes_per_gpu(tp) - 2 * GIB
    assert memory.num_blocks(16) == usable // spec.kv_bytes_per_token(tp) // 16 == blocks


@pytest.mark.parametrize(
    ("model", "gpu", "tp"),
    [("llama-3.1-70b", "h200", 1), ("mixtral-8x7b", "a100-80gb", 1), ("qwen2.5-32b", "l40s", 1)],
)
def test_a_model_too_big_for_its_gpus_is_a_clear_error(model: str, gpu: str, tp: int) -> None:
    with pytest.raises(EngineFitError, match=rf"^{model} does not fit {gpu} at TP {tp}: "):
        engine_for(model, gpu, tp)


@pytest.mark.parametrize(
    ("model", "published"),
    # Model cards: 8.03 B, 70.6 B, 32.5 B, 46.7 B parameters.
    [
        ("llama-3.1-8b", 8.03e9),
        ("llama-3.1-70b", 70.6e9),
        ("qwen2.5-32b", 32.5e9),
        ("mixtral-8x7b", 46.7e9),
    ],
)
def test_parameter_counts_match_the_model_cards(model: str, published: float) -> None:
    assert MODELS[model].num_params == pytest.approx(published, rel=0.01)


def test_every_preset_has_a_source() -> None:
    for spec in [*MODELS.values(), *GPUS.values()]:
        assert spec.source.startswith("https://")


# ------------------------------------------------------------------- files


def test_a_config_json_reads_as_the_preset(tmp_path: Path) -> None:
    path = _write(tmp_path, "config.json", LLAMA_31_8B_CONFIG)
    spec = load_model_config(path)
    preset = MODELS["llama-3.1-8b"]
    assert replace(spec, name="", source="") == replace(preset, name="", source="")
    engine, memory = engine_for(path, "a100-80gb")
    assert engine.step_time(0, 8, 0, 8000) == engine_for(preset, "a100-80gb")[0].step_time(
        0, 8, 0, 8000
    )
    assert memory.num_blocks(16) == 28181


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"hidden_size": None}, "key 'hidden_size': expected a positive whole number, got null"),
        ({"num_hidden_layers": "32"}, "key 'num_hidden_layers': expected a positive whole number"),
        ({"vocab_size": 1.5}, "key 'vocab_size': expected a positive whole number, got 1.5"),
        ({"num_key_value_heads": 0}, "key 'num_key_value_heads': expected a positive whole"),
        ({"num_key_value_heads": 5}, "key 'num_key_value_heads': 5 does not divide"),
        ({"torch_dtype": "int4"}, "key 'torch_dtype': expected one of bfloat16, float16"),
        ({"tie_word_embeddings": "no"}, "key 'tie_word_embeddings': expected true or false"),
        ({"num_local_experts": 8}, "key 'num_experts_per_tok': missing"),
    ],
)
def test_a_bad_config_json_names_file_and_key(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    path = _write(tmp_path, "config.json", LLAMA_31_8B_CONFIG | change)
    with pytest.raises(ModelConfigError) as err:
        load_model_config(path)
    assert str(err.value).startswith(f"{path}: {message}")


def test_a_missing_key_and_a_broken_file(tmp_path: Path) -> None:
    doc = {k: v for k, v in LLAMA_31_8B_CONFIG.items() if k != "intermediate_size"}
    path = _write(tmp_path, "config.json", doc)
    with pytest.raises(ModelConfigError) as err:
        load_model_config(path)
    assert str(err.value) == f"{path}: key 'intermediate_size': missing (a positive whole number)"
    broken = _write(tmp_path, "broken.json", "{")
    with pytest.raises(ModelConfigError, match=r"broken.json: not valid JSON"):
        load_model_config(broken)
    with pytest.raises(ModelConfigError, match=r"^unknown model 'llama-9'"):
        engine_for("llama-9", "h100-sxm")


def test_a_gpu_profile_overrides_a_preset(tmp_path: Path) -> None:
    path = _write(tmp_path, "gpu.toml", 'preset = "h100-sxm"\nhbm_efficiency = 0.5\n')
    card = load_gpu_profile(path)
    assert card.hbm_bandwidth == 3.35e12 and card.hbm_efficiency == 0.5
    assert card.name == "h100-sxm (gpu.toml)"
    bad = _write(tmp_path, "bad.json", {"preset": "h100-sxm", "hbm_efficency": 0.5})
    with pytest.raises(ModelConfigError, match=r"bad.json: unknown key 'hbm_efficency'"):
        load_gpu_profile(bad)
    alone = _write(tmp_path, "alone.json", {"peak_flops": 1e15})
    with pytest.raises(ModelConfigError, match=r"alone.json: key 'hbm_bandwidth': missing"):
        load_gpu_profile(alone)
    engine, _ = engine_for("llama-3.1-8b", "h100-sxm", hbm_efficiency=0.5)
    assert engine.dense_read_s == pytest.approx(
        engine_for("llama-3.1-8b", path)[0].dense_read_s, rel=1e-15
    )


# ------------------------------------------------------------------- Llama-2-7B cross-check


def test_llama2_7b_roofline_agrees_with_the_vidur_fitted_preset() -> None:
    # GPU time only, with the kernel Vidur profiled: the like of Vidur's own prediction.
    roof = RooflineModel.build(LLAMA_2_7B, GPUS["a100-80gb"], 1, "none", "vidur")
    cases = [
        (0, 1, 0, 1024, 0, 0),  # one decode
        (0, 64, 0, 64 * 1024, 0, 0),  # 64 decodes at 1k context
        (512, 0, 512 * 513 // 2, 0, 512 * 512, 1),  # a 512-token chunk, empty cache
        (2048, 0, 2048 * 2049 // 2, 0, 2048 * 2048, 1),
        (512, 32, 512 * 1024 + 512 * 513 // 2, 32 * 1024, 512 * 512, 1),  # hybrid
    ]
    # The preset fitted to Vidur's profiles: t_min 9.8 ms, c0 7.4 ms, c_tok 57.5 us, c_attn
    # 2.7 ns, c_kv 0.31 us, 6.5 ns per squared chunk token.
    for shape in cases:
        linear = DEFAULT_ENGINE.step_time(*shape[:5])
        assert roof.step_time(*shape) == pytest.approx(linear, rel=0.065), shape


def test_the_example_llama2_config_gives_the_linear_presets_pool() -> None:
    from chunked_prefill.sim.engine import MEMORY_PRESETS

    example = Path(__file__).resolve().parent.parent / "examples" / "llama-2-7b" / "config.json"
    spec = load_model_config(example)
    assert replace(spec, name="", source="") == replace(LLAMA_2_7B, name="", source="")
    _, memory = engine_for(example, "a100-80gb")
    linear = MEMORY_PRESETS["llama2-7b-a100"]
    assert memory.weight_bytes == 13_476_831_232  # the preset's 6.74e9 x 2 B, to 8 KB
    assert memory.num_blocks(16) == linear.num_blocks(16) == 7353


# ------------------------------------------------------------------- the command line


def test_engines_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["engines", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert sorted(doc["models"]) == sorted(MODELS) and sorted(doc["gpus"]) == sorted(GPUS)
    assert len(doc["engines"]) == len(MODELS) * len(GPUS) * 4
    rows = {(r["model"], r["gpu"], r["tp"]): r for r in doc["engines"]}
    row = rows["llama-3.1-8b", "a100-80gb", 1]
    assert row["fits"] and row["num_blocks"] == 28181 and row["kv_tokens"] == 28181 * 16
    assert row["kv_bytes_per_token"] == 131072 and row["reason"] is None
    engine, _ = engine_for("llama-3.1-8b", "a100-80gb", 1)
    assert row["decode_s"] == engine.step_time(0, 64, 0, 64 * 2048, 0)
    no = rows["llama-3.1-70b", "h200", 1]
    assert not no["fits"] and no["num_blocks"] is None
    assert no["reason"].startswith("llama-3.1-70b does not fit h200 at TP 1")
    assert doc["models"]["mixtral-8x7b"]["num_experts_per_tok"] == 2


def test_engines_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["engines", "--block-size", "32"]) == 0
    out = capsys.readouterr().out
    assert "KV blocks of 32 tokens per GPU" in out
    assert "llama-3.1-70b" in out and "l40s" in out


def test_simulate_with_a_roofline_engine(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["simulate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tp", "2"]
    args += ["--requests", "60", "--chunk-size", "512"]
    assert main([*args, "--json", "--backend", "pure"]) == 0
    pure = capsys.readouterr().out
    assert main([*args, "--json", "--backend", "rust"]) == 0
    assert capsys.readouterr().out == pure
    (result,) = json.loads(pure)
    engine, memory = engine_for("llama-3.1-8b", "h100-sxm", 2)
    assert result["engine"] == engine.to_dict() | {"kind": "roofline"}
    assert result["num_blocks"] == memory.num_blocks(16) == 64021
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "engine: llama-3.1-8b on h100-sxm x TP 2 (roofline; 64021 KV blocks of 16 tokens)" in out
    assert main([*args, "--scheduler", "planner", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["engine"]["tp"] == 2


def test_simulate_gpu_flags_override_the_datasheet(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["simulate", "--model", "llama-3.1-8b", "--gpu", "a100-80gb", "--requests", "5"]
    args += ["--chunk-size", "512"]
    assert main([*args, "--gpu-memory-gib", "40", "--gpu-hbm-tbs", "1", "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    engine, memory = engine_for(
        "llama-3.1-8b", "a100-80gb", hbm_bandwidth=1e12, memory_bytes=40 * GIB
    )
    assert result["num_blocks"] == memory.num_blocks(16)
    assert result["engine"]["dense_read_s"] == engine.dense_read_s


def test_vllm_version_picks_the_engine_and_backend(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["simulate", "--model", "qwen2.5-7b", "--gpu", "a100-80gb", "--requests", "20"]
    args += ["--chunk-size", "512"]
    assert main([*args, "--vllm-version", "0.4.2", "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    paged, _ = engine_for("qwen2.5-7b", "a100-80gb", serving_engine="vllm-v0-sync",
                          attention_backend="paged")  # fmt: skip
    assert (result["engine"]["serving_engine"], result["engine"]["attention_backend"]) == (
        "vllm-v0-sync",
        "paged",
    )
    assert result["engine"]["kv_token_s"] == paged.kv_token_s
    assert result["engine"]["seq_s"] == paged.seq_s == pytest.approx(123.2e-6, rel=1e-3)
    assert main([*args, "--vllm-version", "0.9.2", "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    assert (result["engine"]["serving_engine"], result["engine"]["attention_backend"]) == (
        "vllm",
        "flash",
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpu", "h100-sxm"], "argument --gpu: needs --model"),
        (["--tp", "2"], "argument --tp: needs --model"),
        (["--model", "llama-3.1-8b"], "argument --model: needs --gpu"),
        (
            ["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "llama2-7b-h100"],
            "argument --engine: not with --model",
        ),
        (
            ["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--c0", "0.001"],
            "argument --c0: not with --model",
        ),
        (["--model", "llama-9", "--gpu", "h100-sxm"], "argument --model: unknown model 'llama-9'"),
        (["--model", "llama-3.1-8b", "--gpu", "b300"], "argument --gpu: unknown GPU 'b300'"),
        (
            ["--model", "llama-3.1-70b", "--gpu", "a100-80gb"],
            "arguments --model/--gpu/--tp: llama-3.1-70b does not fit a100-80gb at TP 1",
        ),
        (["--model", "x", "--gpu", "h200", "--tp", "0"], "argument --tp: "),
        (["--vllm-version", "0.4.2"], "argument --vllm-version: needs --model"),
        (
            ["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--vllm-version", "v.4"],
            "argument --vllm-version: vLLM version 'v.4': want MAJOR.MINOR or MAJOR.MINOR.PATCH",
        ),
        (
            [
                *("--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--vllm-version", "0.4.2"),
                *("--serving-engine", "vllm-eager"),
            ],
            "argument --serving-engine: not with --vllm-version, which picks it",
        ),
    ],
)
def test_simulate_roofline_flag_errors(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) if "--tp', '0" in str(args) else _no_raise():
        code = main(["simulate", *args])
        assert code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"chunked-prefill simulate: error: {message}"), err
    assert err.count("\n") == 1


class _no_raise:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_a_roofline_without_its_memory_is_refused() -> None:
    from chunked_prefill.sim import default_workload
    from chunked_prefill.sim.serving import ServingSimConfig, simulate_serving

    engine, memory = engine_for("llama-3.1-8b", "l40s", 2)
    cfg = ServingSimConfig(chunk_size=512)
    with pytest.raises(ValueError, match=r"has no KV-memory preset: pass memory="):
        simulate_serving(default_workload(5), cfg, engine=engine)
    (given,) = simulate_serving(default_workload(5), cfg, engine=engine, memory=memory)
    assert given.serving is not None and given.serving.num_blocks == 31492
    (fixed,) = simulate_serving(default_workload(5), cfg, engine=engine, num_blocks=500)
    assert fixed.serving is not None and fixed.serving.num_blocks == 500
