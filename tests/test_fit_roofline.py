"""``chunked-prefill fit --model/--gpu``: the roofline's efficiencies and overheads fitted
back from steps a known roofline timed, the terms the steps cannot determine named, the
profile read back by ``simulate``/``search --profile`` with the model's KV memory, the
poor-fit warnings, and the errors."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from chunked_prefill.cli import build_parser, main
from chunked_prefill.sim.catalog import GPUS, engine_for
from chunked_prefill.sim.cli.flags.engine_specs import engine_specs
from chunked_prefill.sim.engines.fit_roofline import fit_roofline
from chunked_prefill.sim.fit import Steps
from chunked_prefill.sim.roofline import RooflineModel
from chunked_prefill.sim.software import SERVING_ENGINES

TRUE = {
    "gemm_efficiency": 0.6,
    "weight_read_efficiency": 0.68,
    "attention_efficiency": 0.5,
    "chunk_attention_efficiency": 0.3,
    "hbm_efficiency": 0.8,
    "flash_decode_efficiency": 0.8,
    "layer_overhead_s": 30e-6,
    "moe_layer_s": 25e-6 * 30 / 26,
    "step_overhead_s": 0.0,
}
"""The "measured" GPU: every efficiency and the per-layer overheads moved off the defaults
(both fixed times by the same factor: one fixed time per step is all steps can tell)."""
TRUE_SEQ_S = 8e-6
PRESET_BLOCKS = 7353
"""The A100 Llama-2-7B preset's pool, which profiles used to fall back to."""


def true_roofline(
    model: str, tp: int, backend: str, serving: str = "vllm", seq_s: float = TRUE_SEQ_S
) -> RooflineModel:
    gpu = replace(GPUS["a100-80gb"], **TRUE)
    engine = replace(SERVING_ENGINES[serving], cpu_seq_s=seq_s)
    roofline, _ = engine_for(model, gpu, tp, serving_engine=engine, attention_backend=backend)
    return roofline


def synthetic(engine: RooflineModel, n: int = 600, noise: float = 0.0, seed: int = 1) -> Steps:
    """A third decode-only steps (1-255 sequences), a third prefill steps of 1-3 chunks
    with few decodes, a third mixed; every chunk 16-1023 tokens after 0-4095 cached ones."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        kind = i % 3
        d = int(rng.integers(1, 256)) if kind != 1 else int(rng.integers(0, 32))
        chunks = 0 if kind == 0 else int(rng.integers(1, 4))
        lens = [int(rng.integers(16, 1024)) for _ in range(chunks)]
        starts = [int(rng.integers(0, 4096)) for _ in range(chunks)]
        pairs = sum(k * s + k * (k + 1) // 2 for k, s in zip(lens, starts))
        context = d * int(rng.integers(100, 4000))
        rows.append((sum(lens), d, pairs, context, sum(k * k for k in lens), chunks))
    a = np.array(rows, dtype=float)
    t = np.array([engine.step_time(*r) for r in rows]) * (1 + rng.uniform(-noise, noise, n))
    return Steps(a[:, 0], a[:, 1], a[:, 2], a[:, 3], t, prefill_chunk_sq=a[:, 4],
                 prefill_chunks=a[:, 5])  # fmt: skip


def rel(a: float, b: float) -> float:
    return abs(a - b) / b


CASES = [
    ("llama-3.1-8b", 1, "flash", "attention_efficiency", ()),
    ("mixtral-8x7b", 2, "flash", "attention_efficiency", ()),
    (
        "llama-3.1-8b",
        1,
        "vidur",
        "chunk_attention_efficiency",
        (
            (
                "attention_efficiency",
                "the vidur backend charges (query, key) pairs at its own efficiency",
            ),
        ),
    ),
]


@pytest.mark.parametrize(("model", "tp", "backend", "attention", "unidentified"), CASES)
def test_noise_free_steps_give_back_the_efficiencies_within_1_percent(
    model: str, tp: int, backend: str, attention: str, unidentified: tuple[object, ...]
) -> None:
    s = synthetic(true_roofline(model, tp, backend))
    fit = fit_roofline(s, model, "a100-80gb", tp, "vllm", backend)
    # The KV reads' efficiency is FlashAttention's decode kernel's with the flash backend.
    kv = "flash_decode_efficiency" if backend == "flash" else "hbm_efficiency"
    assert kv in fit.fields and ({"flash_decode_efficiency", "hbm_efficiency"} - {kv}).isdisjoint(
        fit.fields
    )
    for key in ("gemm_efficiency", "weight_read_efficiency", attention, kv):
        assert rel(fit.fields[key], TRUE[key]) < 0.01, key
    assert rel(fit.fields["layer_overhead_s"], TRUE["layer_overhead_s"]) < 0.01
    assert rel(fit.fields["moe_layer_s"], TRUE["moe_layer_s"]) < 0.01
    assert fit.fields["step_overhead_s"] == 0
    assert rel(fit.fields["cpu_seq_s"], TRUE_SEQ_S) < 0.01
    assert fit.unidentified == unidentified
    assert fit.regimes["compute"] > 0 and fit.regimes["memory"] > 0
    assert fit.error_max < 1e-9 and fit.warnings == [f"not identified: {t} ({w})"
                                                     for t, w in unidentified]  # fmt: skip


def test_5_percent_noise() -> None:
    s = synthetic(true_roofline("llama-3.1-8b", 1, "flash"), n=3000, noise=0.05, seed=2)
    fit = fit_roofline(s, "llama-3.1-8b", "a100-80gb")
    # The efficiencies of the large terms come back within 2 %, prefill attention (a
    # smaller share of fewer steps) within 8 %; the two small fixed times are the loosest.
    for key in ("gemm_efficiency", "weight_read_efficiency", "flash_decode_efficiency"):
        assert rel(fit.fields[key], TRUE[key]) < 0.02, key
    assert rel(fit.fields["attention_efficiency"], TRUE["attention_efficiency"]) < 0.08
    assert rel(fit.fields["layer_overhead_s"], TRUE["layer_overhead_s"]) < 0.2
    assert rel(fit.fields["cpu_seq_s"], TRUE_SEQ_S) < 0.2
    assert 0.015 < fit.error_p50 < 0.035 and fit.error_max < 0.06
    assert fit.warnings == []


def test_small_decode_steps_alone_name_what_they_cannot_determine() -> None:
    # Decode steps alone cannot tell the CPU time per sequence from the GEMMs' time per
    # token: it keeps the preset's, which these steps were timed with.
    preset_seq = SERVING_ENGINES["vllm"].cpu_seq_s
    s = synthetic(true_roofline("llama-3.1-8b", 1, "flash", seq_s=preset_seq))
    small = (s.prefill_tokens == 0) & (s.decode_tokens < 60)  # all memory-bound
    cols = (s.prefill_tokens, s.decode_tokens, s.attention_pairs, s.decode_context_tokens)
    only = Steps(*(c[small] for c in cols), s.duration_s[small],
                 prefill_chunk_sq=s.chunk_sq[small], prefill_chunks=s.chunks[small])  # fmt: skip
    fit = fit_roofline(only, "llama-3.1-8b", "a100-80gb")
    preset = GPUS["a100-80gb"]
    assert fit.unidentified == (
        ("gemm_efficiency", "no compute-bound steps"),
        ("attention_efficiency", "no prefill steps"),
        (
            "overhead_s",
            "no compute-bound steps: a dense model's weight reads take the same time every"
            " step, so they and the fixed time cannot be told apart",
        ),
        (
            "cpu_seq_s",
            "no prefill steps: a decode step's sequences are its tokens, so the CPU time per"
            " sequence and the GEMMs' time per token cannot be told apart",
        ),
    )
    assert fit.fields["cpu_seq_s"] == preset_seq
    assert fit.regimes == {"compute": 0, "memory": int(small.sum()), "launch": 0}
    for key in ("gemm_efficiency", "attention_efficiency", "layer_overhead_s"):
        assert fit.fields[key] == getattr(preset, key), key
    # The weight reads take up the overhead's difference (32 layers x 4 us on ~11 ms).
    assert rel(fit.fields["weight_read_efficiency"], TRUE["weight_read_efficiency"]) < 0.02
    assert rel(fit.fields["flash_decode_efficiency"], TRUE["flash_decode_efficiency"]) < 0.01
    assert fit.error_max < 1e-9
    assert fit.warnings == [f"not identified: {t} ({w})" for t, w in fit.unidentified]


def test_an_efficiency_above_1_is_kept_at_1_with_a_warning() -> None:
    gpu = replace(GPUS["a100-80gb"], flash_decode_efficiency=1.0)
    fast, _ = engine_for("llama-3.1-8b", gpu, 1)
    fast = replace(fast, kv_token_s=fast.kv_token_s / 1.25)  # the KV reads at 125 %
    fit = fit_roofline(synthetic(fast), "llama-3.1-8b", "a100-80gb")
    assert fit.fields["flash_decode_efficiency"] == 1.0
    assert fit.clamped == (
        "flash_decode_efficiency: the steps ask for 1.25, above 1 (faster than the datasheet"
        " allows): kept at 1",
    )
    assert fit.warnings[-1] == fit.clamped[0]


def _simulated_steps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    steps = tmp_path / "steps.csv"
    run = ["simulate", "--scheduler", "planner", "--model", "llama-3.1-8b", "--gpu", "h100-sxm"]
    run += ["--chunk-size", "512", "--token-budget", "1024", "--max-prefills-per-step", "2"]
    assert main([*run, "--requests", "40", "--steps-csv", str(steps), "--quiet", "--json"]) == 0
    capsys.readouterr()
    return steps


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_profile_round_trip_keeps_the_models_kv_memory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str
) -> None:
    steps = _simulated_steps(tmp_path, capsys)
    profile = tmp_path / f"fitted{suffix}"
    fit = ["fit", str(steps), "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--json"]
    assert main([*fit, "--out", str(profile)]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert err == "" and doc["warnings"] == [] and doc["relative_error"]["max"] < 1e-9
    assert doc["kind"] == "roofline" and doc["regimes"]["compute"] > 0
    run = ["simulate", "--requests", "10", "--quiet", "--json", "--profile", str(profile)]
    assert main([*run, "--chunk-size", "256", "--token-budget", "2048"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    _, memory = engine_for("llama-3.1-8b", "h100-sxm", 1)
    assert result["num_blocks"] == memory.num_blocks(16, 0.9) != PRESET_BLOCKS
    assert result["engine"]["model"] == "llama-3.1-8b"
    assert rel(result["engine"]["pair_s"], engine_for("llama-3.1-8b", "h100-sxm")[0].pair_s) < 1e-9
    # search --profile: the one engine, on the profile's TP, with the same memory.
    (spec,) = engine_specs(build_parser().parse_args(["search", "--profile", str(profile)]))
    assert spec.memory.num_blocks(16, 0.9) == memory.num_blocks(16, 0.9)
    assert spec.gpus == 1 and spec.flags == ()


def test_profile_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    steps = _simulated_steps(tmp_path, capsys)
    profile = tmp_path / "p.toml"
    argv = ["fit", str(steps), "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tp", "1"]
    assert main([*argv, "--serving-engine", "sglang", "--out", str(profile)]) == 0
    capsys.readouterr()
    lines = profile.read_text().splitlines()
    assert lines[:6] == [
        'kind = "roofline"',
        'model = "llama-3.1-8b"',
        'gpu = "h100-sxm"',
        "tp = 1",
        'serving_engine = "sglang"',
        'attention_backend = "flash"',
    ]
    keys = [line.split(" = ")[0] for line in lines[6:]]
    assert keys == ["gemm_efficiency", "weight_read_efficiency", "attention_efficiency",
                    "chunk_attention_efficiency", "flash_decode_efficiency", "layer_overhead_s",
                    "moe_layer_s", "step_overhead_s", "cpu_seq_s"]  # fmt: skip


def test_poor_fit_warns_and_max_error_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(0)
    n = 200
    d = rng.integers(1, 100, n)
    path = tmp_path / "noisy.csv"
    path.write_text(
        "prefill_tokens,decode_tokens,attention_pairs,decode_context_tokens,duration_s\n"
        + "".join(f"0,{k},0,{k * 500},{rng.uniform(0.01, 0.05)!r}\n" for k in d)
    )
    assert main(["fit", str(path), "--json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    e = doc["relative_error"]
    poor = (
        f"the fit is poor: per-step relative error p50 {100 * e['p50']:.1f} %, p90"
        f" {100 * e['p90']:.1f} % (a good fit: p50 at most 10 %, p90 at most 25 %); likely"
        " causes: noisy timings (a shared or throttled machine), a cost the model does not"
        " have, or steps of different engines or settings mixed in one file"
    )
    assert e["p50"] > 0.1
    assert doc["warnings"][0] == poor
    assert "not identified: c_attn_s (no prefill steps)" in doc["warnings"]
    assert err.splitlines()[0] == f"chunked-prefill fit: warning: {poor}"
    out_path = tmp_path / "p.json"
    argv = ["fit", str(path), "--max-error", "10", "--out", str(out_path)]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (
        f"chunked-prefill fit: error: the median per-step error is above --max-error 10 %;"
        f" {out_path} not written"
    )
    assert not out_path.exists()
    assert main(["fit", str(path), "--max-error", "90", "--out", str(out_path)]) == 0
    assert out_path.exists()


def _error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    prefix = f"chunked-prefill {argv[0]}: error: "
    assert err.startswith(prefix), err
    return err[len(prefix) : -1]


def test_fit_flag_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    steps = str(tmp_path / "s.csv")
    assert _error(capsys, "fit", steps, "--gpu", "h100-sxm") == "argument --gpu: needs --model"
    assert _error(capsys, "fit", steps, "--model", "llama-3.1-8b") == (
        "argument --model: needs --gpu (one of a100-80gb, a100-40gb, h100-sxm, h100-pcie,"
        " h100-nvl, h200, h20, b200, l40s, l4, a10g, mi300x, or a file)"
    )
    assert _error(capsys, "fit", steps, "--model", "llama-3.1-8b", "--gpu", "h100-sxm",
                  "--name", "x") == (
        "argument --name: not with --model (a roofline is named by its model and GPU)"
    )  # fmt: skip


@pytest.mark.parametrize(
    ("text", "flags", "message"),
    [
        ('kind = "roofline"\nmodel = "llama-3.1-8b"\ngpu = "h100-sxm"\n', ["--model", "x"],
         "argument --model: not with --profile {p}, a roofline profile (it names the model, GPU,"
         " TP and software)"),
        ('kind = "roofline"\nmodel = "llama-3.1-8b"\ngpu = "h100-sxm"\n', ["--gpu", "l40s"],
         "argument --gpu: not with --profile {p}, a roofline profile (it names the model, GPU,"
         " TP and software)"),
        ('kind = "roofline"\nmodel = "llama-3.1-8b"\ngpu = "h100-sxm"\n', ["--quantization", "fp8"],
         "argument --quantization: not with --profile {p}, a roofline profile (it keeps no"
         " dtypes: the model's own are used)"),
        ('kind = "roofline"\nmodel = "llama-3.1-8b"\ngpu = "h100-sxm"\n', ["--c0", "0.001"],
         "argument --c0: not with --profile {p}, a roofline profile (it names the model, GPU,"
         " TP and software)"),
        ('kind = "linear"\n', [],
         "argument --profile: {p}: key 'kind': expected \"roofline\" (a linear profile has no"
         " kind), got 'linear'"),
        ('kind = "roofline"\ngpu = "h100-sxm"\n', [],
         "argument --profile: {p}: key 'model': missing"),
        ('kind = "roofline"\nmodel = "llama-3.1-8b"\ngpu = "h100-sxm"\ntp = 0\n', [],
         "argument --profile: {p}: key 'tp': expected a whole number of GPUs in [1, 1024],"
         " got 0"),
        ('kind = "roofline"\nmodel = "llama-3.1-8b"\ngpu = "h100-sxm"\nhbm_efficiency = "x"\n',
         [], "argument --profile: {p}: key 'hbm_efficiency': expected a number, got 'x'"),
        ('kind = "roofline"\nmodel = "llama-3.1-8b"\ngpu = "h100-sxm"\nhbm_efficiency = 1.5\n',
         [], "argument --profile: {p}: GPU h100-sxm (p.toml): hbm_efficiency must be in"
         " (0, 1], got 1.5"),
        ('kind = "roofline"\nmodel = "llama-3.1-8b"\ngpu = "h100-sxm"\nc0_s = 1\n', [],
         "argument --profile: {p}: unknown key 'c0_s'; known keys: kind, model, gpu, tp,"
         " serving_engine, attention_backend, cpu_seq_s, activation_reserve_bytes,"
         " allreduce_latency_s, attention_efficiency, chunk_attention_efficiency,"
         " expert_half_tokens, flash_decode_efficiency, flash_decode_half_heads,"
         " fp8_peak_flops, gemm_efficiency, gemm_half_tokens,"
         " gemv_latency_s, hbm_bandwidth,"
         " hbm_efficiency,"
         " layer_overhead_s, link_bandwidth, link_efficiency, memory_bytes, moe_layer_s,"
         " peak_flops, step_overhead_s, weight_read_efficiency"),
        ('kind = "roofline"\nmodel = "llama-3.1-8b"\ngpu = "h100-sxm"\nserving_engine = "x"\n',
         [], "argument --profile: {p}: key 'serving_engine': expected one of vllm, vllm-eager,"
         " vllm-v0, vllm-v0-sync, vllm-v0-eager, sglang, tensorrt-llm, none, got 'x'"),
        ('kind = "roofline"\nmodel = "nope.json"\ngpu = "h100-sxm"\n', [],
         "argument --profile: {p}: key 'model': nope.json: cannot be read: No such file or"
         " directory"),
    ],
)  # fmt: skip
def test_roofline_profile_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, flags: list[str], message: str
) -> None:
    profile = tmp_path / "p.toml"
    profile.write_text(text)
    line = _error(capsys, "simulate", "--requests", "3", "--profile", str(profile), *flags)
    assert line == message.format(p=profile)
