"""The memory-true simulator: the Rust loop against the pure reference loop, and
hand-computed runs of the memory model."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from chunked_prefill.sim import EngineModel, Workload, default_workload
from chunked_prefill.sim.catalog import MODELS
from chunked_prefill.sim.report import results_to_json
from chunked_prefill.sim.serving import ServingSimConfig, expand_serving_configs, simulate_serving

pytest.importorskip("chunked_prefill._core")

ONE_SECOND = EngineModel(name="1s", t_min_s=1.0, c0_s=0.0, c_tok_s=0.0, c_attn_s=0.0, c_kv_s=0.0)


def _shared(n: int, seed: int, *, groups: int, prefix: int, sessions: int) -> Workload:
    """A default workload whose requests fall into prefix groups and sessions."""
    base = default_workload(n, rate=12.0, seed=seed)
    rng = np.random.default_rng(seed)
    return Workload(
        base.arrival_s,
        base.prompt_tokens,
        base.output_tokens,
        source="shared",
        group=tuple(int(g) for g in rng.integers(-1, groups, n)),
        session=tuple(int(s) for s in rng.integers(0, sessions, n)) if sessions else (),
        prefix_tokens=prefix,
    )


WORKLOADS = {
    "pressure": (default_workload(150, rate=30.0, seed=3), 700),
    "prefixes": (_shared(150, 4, groups=3, prefix=200, sessions=0), 900),
    "turns": (_shared(150, 5, groups=2, prefix=64, sessions=40), 900),
    "synthetic sessions": (
        default_workload(120, rate=8.0, seed=6, prefix_tokens=100, prefix_groups=2, turns=3).scaled(
            0.5, 0.5
        ),
        900,
    ),
    "priorities": (
        Workload(
            (0.0, 0.0, 0.5, 0.5, 1.0),
            (40, 300, 17, 90, 64),
            (30, 3, 60, 1, 8),
            priority=(3, -1, 0, 0, -5),
        ),
        24,
    ),
}
CONFIGS = [
    *expand_serving_configs(
        chunk_sizes=[64, 512, None], token_budgets=[300], max_prefills_per_step=[1, 4]
    ),
    ServingSimConfig(chunk_size=128, token_budget=256, max_running=8, watermark=0.1),
    ServingSimConfig(chunk_size=256, prefix_caching=False, block_size=32),
]


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_rust_and_pure_loops_give_identical_json(name: str) -> None:
    workload, blocks = WORKLOADS[name]
    kwargs = {"num_blocks": blocks, "slo_ttft_s": 2.0, "slo_tpot_s": 0.05, "slo_tbt_s": 0.2}
    rust = simulate_serving(workload, CONFIGS, backend="rust", **kwargs)  # type: ignore[arg-type]
    pure = simulate_serving(workload, CONFIGS, backend="pure", **kwargs)  # type: ignore[arg-type]
    assert results_to_json(rust) == results_to_json(pure)
    for r, p in zip(rust, pure):
        assert r.serving is not None and p.serving is not None
        assert np.array_equal(r.serving.kv_series_t, p.serving.kv_series_t)
        assert np.array_equal(r.tbt_gaps, p.tbt_gaps)


ROOFLINES = {
    "dense": ("llama-3.1-8b", "a100-80gb", 1),
    "moe, tp": ("mixtral-8x7b", "h100-sxm", 2),
    "tp 8, pcie": ("qwen2.5-32b", "l40s", 8),
    # A window the default workload's prompts and outputs straddle.
    "sliding window": (replace(MODELS["gemma-2-9b"], sliding_window=256), "a100-80gb", 1),
}


@pytest.mark.parametrize("name", sorted(ROOFLINES))
def test_rust_and_pure_loops_agree_on_the_roofline(name: str) -> None:
    from chunked_prefill.sim.catalog import engine_for

    engine, _ = engine_for(*ROOFLINES[name])
    for workload, blocks in (WORKLOADS["pressure"], WORKLOADS["prefixes"]):
        kwargs: dict[str, Any] = {"num_blocks": blocks, "engine": engine, "slo_tbt_s": 0.05}
        rust = simulate_serving(workload, CONFIGS, backend="rust", **kwargs)
        pure = simulate_serving(workload, CONFIGS, backend="pure", **kwargs)
        assert results_to_json(rust) == results_to_json(pure)
        assert json.loads(results_to_json(rust))[0]["engine"]["kind"] == "roofline"


@pytest.mark.parametrize("block_size", [4099, 8192])
def test_blocks_longer_than_the_fill_wheel_agree(block_size: int) -> None:
    # The decode group's wheel has 4 096 buckets: a 4 099-token block's next fill moves to
    # another bucket, an 8 192-token block's waits a turn in its own; under preemption.
    workload = Workload(
        (0.0, 0.0, 0.1, 0.2, 0.3),
        (3000, 5000, 100, 9000, 4100),
        (9000, 6000, 12000, 5000, 8200),
    )
    config = ServingSimConfig(block_size=block_size, chunk_size=2048, token_budget=4096)
    blocks = 12 if block_size < 8192 else 6
    rust, pure = (
        simulate_serving(workload, config, num_blocks=blocks, backend=b, engine=ONE_SECOND)[0]
        for b in ("rust", "pure")
    )
    assert results_to_json([rust]) == results_to_json([pure])
    assert np.array_equal(rust.tbt_gaps, pure.tbt_gaps)
    assert rust.serving is not None and rust.serving.preemptions > 0


def test_pressure_preempts_and_prefixes_hit() -> None:
    # The identity test must see the memory model at work, not a trivial run.
    (pressure,) = simulate_serving(WORKLOADS["pressure"][0], ServingSimConfig(), num_blocks=700)
    assert pressure.serving is not None and pressure.serving.preemptions > 0
    assert pressure.serving.kv_usage_peak == 1.0
    (shared,) = simulate_serving(WORKLOADS["turns"][0], ServingSimConfig(), num_blocks=900)
    assert shared.serving is not None and shared.serving.prefix_hit_rate > 0.1


def test_a_pool_too_small_preempts_at_a_known_step() -> None:
    # As the Rust test: two requests of 4 + 5 tokens in 3 blocks of 4. B preempts itself in
    # step 1, waits for A (done after step 4), recomputes 5 tokens in step 5, ends in step 8.
    wl = Workload((0.0, 0.0), (4, 4), (5, 5))
    cfg = ServingSimConfig(chunk_size=64, token_budget=64, max_running=8, block_size=4)
    for backend in ("rust", "pure"):
        (r,) = simulate_serving(wl, cfg, engine=ONE_SECOND, num_blocks=3, backend=backend)
        assert r.serving is not None
        assert (r.steps, r.serving.preemptions, r.serving.recomputed_tokens) == (9, 1, 5)
        assert r.finish.tolist() == [5.0, 9.0]
        assert r.serving.max_gap.tolist() == [1.0, 5.0]
        assert r.serving.kv_usage_peak == pytest.approx(2 / 3)


def test_prefix_sharing_halves_the_prefill_tokens() -> None:
    wl = Workload((0.0, 2.0, 4.0), (64, 64, 64), (1, 1, 1), group=(7, 7, 7), prefix_tokens=48)
    cfg = ServingSimConfig(chunk_size=64, token_budget=64, max_running=8)
    (on,) = simulate_serving(wl, cfg, engine=ONE_SECOND, num_blocks=64)
    (off,) = simulate_serving(
        wl, ServingSimConfig(64, 64, 4, 8, prefix_caching=False), engine=ONE_SECOND, num_blocks=64
    )
    assert (on.prefill_tokens, off.prefill_tokens) == (96, 192)
    assert on.serving is not None and on.serving.prefix_hit_rate == 96 / 192


def test_a_request_that_never_fits_is_named() -> None:
    wl = Workload((0.0, 0.0), (4, 40), (1, 30))
    for backend in ("rust", "pure"):
        with pytest.raises(ValueError, match=r"^request 1 \(prompt 40 tokens, output 30\)"):
            simulate_serving(wl, ServingSimConfig(block_size=4), num_blocks=4, backend=backend)


def test_json_keys() -> None:
    (r,) = simulate_serving(
        WORKLOADS["pressure"][0], ServingSimConfig(), num_blocks=700, slo_ttft_s=1.0
    )
    d = json.loads(results_to_json([r]))[0]
    for key in (
        "queue_s",
        "preemptions",
        "recomputed_tokens",
        "prefix_hit_rate",
        "kv_usage",
        "num_blocks",
        "input_throughput_tok_s",
        "slo_attainment",
        "goodput_rps",
    ):
        assert key in d
    assert d["config"]["scheduler"] == "serving"
    assert 0 <= d["slo_attainment"] <= 1


def test_cli_json_is_the_same_on_both_loops(capsys: pytest.CaptureFixture[str]) -> None:
    from chunked_prefill.sim import cli

    args = ["--json", "--requests", "120", "--rate", "25", "--num-blocks", "900"]
    args += ["--chunk-size", "256,none", "--slo-ttft", "2", "--slo-tbt", "0.2"]
    assert cli.main([*args, "--backend", "pure"]) == 0
    pure = capsys.readouterr().out
    assert cli.main([*args, "--backend", "rust"]) == 0
    assert capsys.readouterr().out == pure
    data = json.loads(pure)
    assert data[0]["preemptions"] > 0 and data[0]["num_blocks"] == 900


def test_high_load_preempts_and_chunking_still_cuts_the_tbt_tail() -> None:
    # The default workload at 20 req/s on the A100 preset's own pool (7353 blocks): the
    # memory-true run preempts (the planner has no memory to run out of), and 256-token
    # chunks keep the TBT tail far below whole prompts'.
    wl = default_workload(1000, rate=20.0, seed=0)
    chunked, whole = simulate_serving(wl, expand_serving_configs(chunk_sizes=[256, None]))
    assert chunked.serving is not None and whole.serving is not None
    assert chunked.serving.num_blocks == 7353
    assert chunked.serving.preemptions > 0 and whole.serving.preemptions > 0
    assert chunked.tbt_s.p99 is not None and whole.tbt_s.p99 is not None
    assert chunked.tbt_s.p99 < whole.tbt_s.p99 / 2


def test_synthetic_prefixes_and_turns_share_exactly_what_they_say() -> None:
    # One group, a 256-token prefix, single turns spaced far apart: every request after the
    # first finds the prefix's 16 blocks cached, and nothing else.
    wl = default_workload(20, rate=0.01, seed=2, prefix_tokens=256)
    assert wl.group == (0,) * 20 and wl.prompt_tokens[0] > 256
    (r,) = simulate_serving(wl, ServingSimConfig())
    assert r.serving is not None
    assert r.serving.preemptions == 0
    assert r.serving.prefix_hit_rate == 19 * 256 / sum(wl.prompt_tokens)
    # Sessions of 2 turns at a low rate: turn 2 extends turn 1, so it finds turn 1's full
    # blocks (prompt and output, the last sampled token excepted) in the cache.
    wl = default_workload(2, rate=0.001, seed=3, turns=2)
    assert wl.session == (0, 0)
    p1, p2 = wl.prompt_tokens
    o1 = wl.output_tokens[0]
    assert p2 > p1 + o1
    (r,) = simulate_serving(wl, ServingSimConfig())
    assert r.serving is not None
    assert r.serving.prefix_hit_rate == ((p1 + o1 - 1) // 16 * 16) / (p1 + p2)
    # A prefix alone changes only the prompts: the plain workload's lengths and arrivals.
    plain = default_workload(20, rate=0.01, seed=2)
    shared = default_workload(20, rate=0.01, seed=2, prefix_tokens=256)
    assert [p - 256 for p in shared.prompt_tokens] == list(plain.prompt_tokens)
    assert shared.arrival_s == plain.arrival_s
    assert shared.output_tokens == plain.output_tokens


MOONCAKE = """\
{"timestamp": 0, "input_length": 1000, "output_length": 10, "hash_ids": [1, 2]}
{"timestamp": 5000, "input_length": 1100, "output_length": 10, "hash_ids": [1, 2, 3]}
{"timestamp": 9000, "input_length": 600, "output_length": 10, "hash_ids": [1, 4]}
"""
SESSIONS = """\
arrival_s,prompt_tokens,output_tokens,session_id,prefix_id
0,300,20,a,sys
10,400,20,a,sys
11,350,5,,sys
"""


def test_mooncake_hash_ids_share_equal_blocks(tmp_path: Any) -> None:
    from chunked_prefill.sim import load_trace

    path = tmp_path / "mooncake.jsonl"
    path.write_text(MOONCAKE, encoding="utf-8")
    wl = load_trace(path, time_unit="ms")
    assert wl.hash_ids == ((1, 2), (1, 2, 3), (1, 4)) and wl.hash_block == 512
    # Request 1 shares hashes 1 and 2 with request 0, whose prompt ends at 1000: 62 full
    # blocks of 16 (block 62 holds request 0's output). Request 2 shares hash 1: 32 blocks.
    results = {b: simulate_serving(wl, ServingSimConfig(), backend=b)[0] for b in ("rust", "pure")}
    assert results["rust"].serving is not None
    assert results["rust"].serving.prefix_hit_rate == (62 * 16 + 32 * 16) / 2700
    assert results_to_json([results["rust"]]) == results_to_json([results["pure"]])


def test_session_and_prefix_columns(tmp_path: Any) -> None:
    from chunked_prefill.sim import load_trace

    path = tmp_path / "sessions.csv"
    path.write_text(SESSIONS, encoding="utf-8")
    wl = load_trace(path, prefix_tokens=128)
    assert wl.session == (0, 0, 1) and wl.group == (0, 0, 0) and wl.prefix_tokens == 128
    # Turn 2 of session a finds turn 1's 319 held tokens as 19 full blocks; the third row
    # (its own session) finds the 128-token prefix.
    (r,) = simulate_serving(wl, ServingSimConfig())
    assert r.serving is not None and r.serving.prefix_hit_rate == (304 + 128) / 1050


def test_trace_sharing_errors(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from chunked_prefill.sim import cli

    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1, -2]}\n',
        encoding="utf-8",
    )
    assert cli.main(["--trace", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:1: field 'hash_ids[1]'" in err and err.rstrip().endswith("got -2")
    plain = tmp_path / "plain.csv"
    plain.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,2\n", encoding="utf-8")
    assert cli.main(["--trace", str(plain), "--prefix-tokens", "8"]) == 2
    assert "no prefix_id column" in capsys.readouterr().err
    assert cli.main(["--hash-block", "16"]) == 2
    assert "argument --hash-block: " in capsys.readouterr().err
    assert cli.main(["--trace", str(plain), "--num-blocks", "1", "--block-size", "4"]) == 2
    assert f"{plain}: data row 1: request 0" in capsys.readouterr().err


def test_slo_attainment_and_goodput_by_hand() -> None:
    # The preemption case above: A has TTFT 1 s and TPOT (5 - 1) / 4 = 1 s, every gap 1 s;
    # B has TTFT 1 s, TPOT (9 - 1) / 4 = 2 s and one 5 s gap. The run spans 9 s.
    wl = Workload((0.0, 0.0), (4, 4), (5, 5))
    cfg = ServingSimConfig(chunk_size=64, token_budget=64, max_running=8, block_size=4)

    def run(**slo: float) -> tuple[float | None, float | None]:
        (r,) = simulate_serving(wl, cfg, engine=ONE_SECOND, num_blocks=3, **slo)  # type: ignore[arg-type]
        assert r.serving is not None
        return r.serving.slo_attainment, r.serving.goodput_rps

    assert run(slo_ttft_s=1.0) == (1.0, 2 / 9)
    assert run(slo_ttft_s=1.0, slo_tpot_s=1.5) == (0.5, 1 / 9)
    assert run(slo_tpot_s=2.0) == (1.0, 2 / 9)
    assert run(slo_tpot_s=2.0, slo_tbt_s=4.0) == (0.5, 1 / 9)
    assert run(slo_tbt_s=0.5) == (0.0, 0.0)
    assert run() == (None, None)


def test_table_fits_80_columns_by_dropping_figures(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three differing options with SLOs would take 98 columns: the table drops TTFT p50,
    TBT p50 and queue p99 (in that order), says so in its caption, and keeps every other
    figure."""
    from chunked_prefill.sim import cli

    monkeypatch.setenv("COLUMNS", "80")
    grid = ["--chunk-size", "256,512", "--token-budget", "1024,2048", "--max-running", "128,256"]
    args = ["--requests", "40", *grid, "--slo-ttft", "2", "--slo-tbt", "0.1"]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    # The setup lines are not wrapped (the terminal wraps them, mid-phrase never): the table
    # and the lines under it are what must fit.
    setup = ("workload:", "engine:", "KV cache:")
    table = [line for line in out.splitlines() if not line.startswith(setup)]
    assert max(len(line) for line in table) <= 80
    assert "not shown for width (in --json): TTFT p50, TBT p50, queue p99" in " ".join(out.split())
    heads = " ".join(line for line in out.splitlines() if "chunk" in line and "budget" in line)
    expected = "chunk budget running p99 p99 max tok/s req/s empt % % req/s"
    assert heads.split() == expected.split()


def test_table_keeps_every_figure_when_wide(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from chunked_prefill.sim import cli

    monkeypatch.setenv("COLUMNS", "200")
    grid = ["--chunk-size", "256,512", "--token-budget", "1024,2048", "--max-running", "128,256"]
    assert cli.main(["--requests", "40", *grid, "--slo-ttft", "2"]) == 0
    out = capsys.readouterr().out
    assert "not shown" not in out
    assert " ".join(out.split()).count("p50") == 2
