"""The roofline against published measurements: docs/engines.md's table is what
scripts/published_check.py prints, and the error targets it reports hold where met."""

from __future__ import annotations

import json
import statistics

import pytest

from chunked_prefill.cli import main
from script_module import ROOT, load_script

check = load_script("published_check")
ROWS = check.read_rows(check.DEFAULT_CSV)


def _errors(rows: list[object]) -> list[float]:
    return [abs(check.predict(r) / r.published - 1) for r in rows]


def test_the_docs_table_is_what_the_script_prints(capsys: pytest.CaptureFixture[str]) -> None:
    assert check.main(["--markdown"]) == 0
    out = capsys.readouterr().out
    table, _, summaries = out.partition("\n\nall:")
    docs = (ROOT / "docs" / "engines.md").read_text(encoding="utf-8")
    assert table.strip() in docs
    assert "all:" + summaries.rstrip() in docs


WEIGHT_ONLY = ROOT / "examples" / "published" / "weight_only.csv"


def test_the_weight_only_table_is_what_the_script_prints(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert check.main(["--csv", str(WEIGHT_ONLY), "--markdown"]) == 0
    out = capsys.readouterr().out
    table, _, summaries = out.partition("\n\nall:")
    docs = (ROOT / "docs" / "engines.md").read_text(encoding="utf-8")
    assert table.strip() in docs
    assert "all:" + summaries.rstrip() in docs
    rows = check.read_rows(WEIGHT_ONLY)
    assert len(rows) == 110
    assert {r.weight_dtype for r in rows} == {"int4", "int8"}


def test_the_issues_points_median_within_8_percent() -> None:
    issue = [r for r in ROWS if r.split == "issue"]
    assert len(issue) == 8
    assert statistics.median(_errors(issue)) <= 0.08


def test_vllm_rows_median_within_8_percent() -> None:
    vllm = [r for r in ROWS if r.engine == "vllm"]
    assert len(vllm) == 103
    assert statistics.median(_errors(vllm)) <= 0.08


def test_minference_rows_prefill_whole_on_the_release_of_their_date() -> None:
    rows = [r for r in ROWS if r.source.startswith("MInference")]
    assert [r.input_len for r in rows] == [1000, 10000, 50000, 100000, 128000]
    for row in rows:
        assert check.vllm_release(row) == "0.5.2"
        assert check.serving_engine(row) == "vllm-v0-eager"
        assert check.sim_config(row).chunk_size is None  # 0.5.4 would chunk at 512


def test_v1_before_its_default_runs_v1_at_the_early_budget() -> None:
    rows = [r for r in ROWS if r.source.startswith("vLLM PR #11938")]
    assert [(r.metric, r.unit) for r in rows] == [
        ("throughput", "req/s"),
        ("throughput", "tokens/s"),
    ]
    for row in rows:
        assert check.serving_engine(row) == "vllm"  # V1, by VLLM_USE_V1=1
        config = check.sim_config(row)
        assert config.chunk_size == config.token_budget == 8192  # not Hopper's later 16 384
    # Requests a second and output tokens a second of the same run: 1 024 tokens apart.
    llama = rows[0]
    tokens = check.Row(**{**llama.__dict__, "unit": "tokens/s"})
    assert check.predict(tokens) == pytest.approx(1024 * check.predict(llama), rel=1e-12)


def test_vllm_on_a100_and_h200_median_within_5_percent() -> None:
    rows = [r for r in ROWS if r.engine == "vllm" and r.gpu in ("a100-80gb", "h200")]
    assert statistics.median(_errors(rows)) <= 0.05


def test_each_engine_has_its_serving_engine_and_rule() -> None:
    by_id = {r.id: r for r in ROWS}
    eager = by_id["issue-qwen25-32b-tp1-eager-in1"]
    assert check.serving_engine(eager) == "vllm-v0-eager"
    assert check.sim_config(eager).chunk_size is None  # V0 prefills each prompt whole
    sglang = by_id["q3-8b-bf16-tp1-in1"]
    assert check.serving_engine(sglang) == "sglang"
    assert check.sim_config(sglang).chunk_size == check.SGLANG_CHUNK
    # vLLM 0.6 chunks at 512 tokens once max_model_len is over 32 768 (PR #6666).
    assert check.sim_config(by_id["q25-7b-tp1-in30720"]).chunk_size is None  # 32 768 in all
    long = check.sim_config(by_id["q25-7b-tp1-in63488"])
    assert (long.chunk_size, long.token_budget) == (512, 512)
    nim = by_id["nim-llama33-70b-fp8-tp2-h100-in500-ttft"]
    assert check.serving_engine(nim) == "tensorrt-llm"
    assert check.model_and_quantization(by_id["q3-8b-fp8-tp1-in1"]) == ("Qwen/Qwen3-8B", "fp8")
    # Red Hat's FP8 checkpoint of Meta's model, measured on vLLM's main of June 2025 (V1).
    v1 = by_id["pr20155-llama31-70b-fp8-tp4-h100-in8192"]
    assert check.model_and_quantization(v1) == ("meta-llama/Meta-Llama-3.1-70B-Instruct", "fp8")
    assert (check.vllm_release(v1), check.serving_engine(v1)) == ("0.9.1", "vllm")
    # vLLM before 0.6 processed each step's outputs while the GPU waited (RFC #6913).
    assert check.serving_engine(by_id["dbrx-tp8-h100-bs64"]) == "vllm-v0-sync"


def test_vllm_before_0_4_3_decodes_through_paged_attention() -> None:
    by_id = {r.id: r for r in ROWS}
    assert check.attention_backend(by_id["q2-7b-tp1-in6144"]) == "paged"  # vLLM 0.4.2
    assert check.attention_backend(by_id["q25-7b-tp1-in6144"]) == "flash"  # vLLM 0.6.3
    assert check.attention_backend(by_id["mixtral-tp8-h100-bs1"]) == "paged"  # PR of 2024-01
    assert check.attention_backend(by_id["vllm-ci-llama8b_tp1-h200"]) == "flash"
    assert check.attention_backend(by_id["q3-8b-bf16-tp1-in1"]) == "flash"  # SGLang
    assert "vllm-v0-sync paged," in check.condition(by_id["q2-7b-tp1-in6144"])


def test_qwen3_speed_counts_the_prompt_tokens() -> None:
    # Qwen3's page: speed = (prompt + generated tokens) / time; Qwen2.5's: generated / time.
    by_id = {r.id: r for r in ROWS}
    short, long = by_id["q3-8b-bf16-tp1-in1"], by_id["q3-8b-bf16-tp1-in30720"]
    # The long prompt's speed is far above the short one's only because the prompt counts.
    assert check.predict(long) > 5 * check.predict(short)


def test_the_docs_command_line_of_a_ci_row_gives_its_prediction(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # docs/engines.md, "Predicting a benchmark yourself": benchmark_latency as simulate.
    docs = (ROOT / "docs" / "engines.md").read_text(encoding="utf-8")
    line = next(
        x
        for x in docs.splitlines()
        if x.startswith("$ chunked-prefill simulate --model meta-llama/Meta-Llama-3-8B")
    )
    assert main(line.split()[2:]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    row = next(r for r in ROWS if r.id == "vllm-ci-llama8b_tp1-h100-sxm")
    assert result["e2e_s"]["max"] * 1e3 == pytest.approx(check.predict(row), rel=1e-12)
