"""``chunked_prefill.sim.fit`` and ``chunked-prefill fit``: the fit recovers a known model,
survives noise, round-trips through a simulated run, and refuses bad steps files."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from chunked_prefill.cli import main
from chunked_prefill.sim import EngineModel, SimConfig, default_workload, load_profile, simulate
from chunked_prefill.sim.fit import Steps, fit_steps, read_steps_csv, write_steps_csv

PARAMS = ("t_min_s", "c0_s", "c_tok_s", "c_attn_s", "c_kv_s", "c_chunk_sq_s")
TRUE = EngineModel(name="true", t_min_s=9.5e-3, c0_s=2.2e-3, c_tok_s=65e-6, c_attn_s=2.5e-9,
                   c_kv_s=0.3e-6, c_chunk_sq_s=6.5e-9)  # fmt: skip


def synthetic(model: EngineModel, n: int = 400, noise: float = 0.0, seed: int = 0) -> Steps:
    """Half small decode-only steps (under the floor), half prefill steps (above it)."""
    rng = np.random.default_rng(seed)
    half = n // 2
    decode = rng.integers(1, 100, n).astype(float)
    prefill = np.concatenate([np.zeros(half), rng.integers(64, 2048, n - half)]).astype(float)
    start = rng.integers(0, 4096, n).astype(float)
    pairs = np.where(prefill > 0, prefill * start + prefill * (prefill + 1) / 2, 0.0)
    context = decode * rng.integers(100, 3000, n)
    sq = prefill * prefill  # one chunk per step
    t = np.array(
        [model.step_time(int(p), int(d), int(a), int(k), int(q))
         for p, d, a, k, q in zip(prefill, decode, pairs, context, sq)]
    )  # fmt: skip
    t *= 1 + rng.uniform(-noise, noise, n)
    return Steps(prefill, decode, pairs, context.astype(float), t, prefill_chunk_sq=sq)


def subset(s: Steps, rows: np.ndarray) -> Steps:
    """The steps ``rows`` selects (a boolean mask or a slice)."""
    sq = None if s.prefill_chunk_sq is None else s.prefill_chunk_sq[rows]
    cols = (s.prefill_tokens, s.decode_tokens, s.attention_pairs, s.decode_context_tokens)
    return Steps(*(c[rows] for c in cols), s.duration_s[rows], prefill_chunk_sq=sq)


def rel(a: float, b: float) -> float:
    return abs(a - b) / b


def test_fit_recovers_a_known_model_within_1_percent() -> None:
    fit = fit_steps(synthetic(TRUE))
    for p in PARAMS:
        assert rel(getattr(fit.engine, p), getattr(TRUE, p)) < 0.01, p
    assert 0 < fit.floor_steps < fit.steps
    assert fit.unidentified == ()
    assert fit.error_max < 1e-9


def test_fit_with_5_percent_noise() -> None:
    fit = fit_steps(synthetic(TRUE, n=2000, noise=0.05, seed=1))
    # c0_s is an intercept under steps a hundred times longer, and c_chunk_sq_s a term that
    # moves with c_attn_s (one chunk per step): the loosest coefficients.
    for p in PARAMS:
        loose = p in ("c0_s", "c_chunk_sq_s")
        assert rel(getattr(fit.engine, p), getattr(TRUE, p)) < (0.1 if loose else 0.02), p
    # Uniform noise in +-5 %: the median error is about 2.5 %, none much above 5 %.
    assert 0.015 < fit.error_p50 < 0.035
    assert 0.04 < fit.error_p90 < 0.055
    assert fit.error_max < 0.06


def test_only_small_decode_steps_identify_the_floor_and_c_kv_alone() -> None:
    s = synthetic(TRUE)
    decode_only = s.prefill_tokens == 0  # all under the floor: c0, c_tok and c_attn unseen
    fit = fit_steps(subset(s, decode_only))
    assert fit.unidentified == ("c0_s", "c_tok_s", "c_attn_s", "c_chunk_sq_s")
    assert fit.engine.c0_s == fit.engine.c_tok_s == fit.engine.c_attn_s == 0
    assert fit.engine.c_chunk_sq_s == 0
    assert rel(fit.engine.t_min_s, TRUE.t_min_s) < 0.01
    assert rel(fit.engine.c_kv_s, TRUE.c_kv_s) < 0.01
    assert fit.error_max < 1e-9


def test_too_few_steps_or_one_batch_size_is_an_error() -> None:
    s = synthetic(TRUE)
    with pytest.raises(ValueError, match="at least 5 steps"):
        fit_steps(subset(s, np.arange(3)))
    same = np.full(10, 50.0)
    with pytest.raises(ValueError, match="two batch sizes"):
        fit_steps(Steps(same, same * 0, same * 10, same * 0, same / 1000))


def test_round_trip_simulate_csv_fit_profile_simulate(tmp_path: Path) -> None:
    workload = default_workload(40)
    cfg = SimConfig(chunk_size=512)
    (first,) = simulate(workload, cfg, engine=TRUE, backend="pure", record_steps=True)
    assert first.step_log is not None
    csv_path = tmp_path / "steps.csv"
    assert write_steps_csv(first.step_log, csv_path) == first.steps
    out = tmp_path / "fitted.toml"
    assert main(["fit", str(csv_path), "--out", str(out), "--json"]) == 0
    for profile in (out, tmp_path / "fitted.json"):
        if profile.suffix == ".json":
            assert main(["fit", str(csv_path), "--out", str(profile)]) == 0
        engine = load_profile(profile)
        for p in PARAMS:
            assert rel(getattr(engine, p), getattr(TRUE, p)) < 0.01, (profile, p)
        (again,) = simulate(workload, cfg, engine=engine, backend="pure")
        for metric in ("ttft_s", "tbt_s"):
            for q in ("p50", "p99"):
                want = getattr(getattr(first, metric), q)
                assert rel(getattr(getattr(again, metric), q), want) < 0.01, (metric, q)


def test_cli_json_and_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A steps file of the five original columns: c_chunk_sq_s is not fitted and stays 0.
    old = replace(TRUE, c_chunk_sq_s=0.0)
    s = synthetic(old)
    path = tmp_path / "s.csv"
    rows = zip(s.prefill_tokens, s.decode_tokens, s.attention_pairs, s.decode_context_tokens,
               s.duration_s)  # fmt: skip
    path.write_text(
        "prefill_tokens,decode_tokens,attention_pairs,decode_context_tokens,duration_s\n"
        + "".join(f"{int(p)},{int(d)},{int(a)},{int(k)},{float(t)!r}\n" for p, d, a, k, t in rows)
    )
    assert main(["fit", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["steps"] == 400 and doc["unidentified"] == []
    assert set(doc["relative_error"]) == {"p50", "p90", "p99", "max"}
    assert rel(doc["engine"]["c_tok_s"], old.c_tok_s) < 0.01
    assert doc["engine"]["c_chunk_sq_s"] == 0
    assert main(["fit", str(path)]) == 0
    out = capsys.readouterr().out
    assert "c_attn_s" in out and "error p99" in out


HEADER = "prefill_tokens,decode_tokens,attention_pairs,decode_context_tokens,duration_s\n"
GOOD = "512,10,131328,5000,0.05\n"


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (HEADER + GOOD + "512,10,131328,5000,nan\n", ":3: field 'duration_s': expected"),
        (HEADER + GOOD + "512,10,131328,5000,-0.1\n", ":3: field 'duration_s': expected"),
        (HEADER + GOOD + "512,10,131328,5000,0\n", ":3: field 'duration_s': expected"),
        (HEADER + GOOD + "512,-1,131328,5000,0.1\n", ":3: field 'decode_tokens': expected"),
        (HEADER + GOOD + "1.5,1,131328,5000,0.1\n", ":3: field 'prefill_tokens': expected"),
        (HEADER + "\n" + GOOD + "512,1,,5000,0.1\n", ":4: field 'attention_pairs': expected"),
        (HEADER + GOOD + "512,1,inf,5000,0.1\n", ":3: field 'attention_pairs': expected"),
        (HEADER + GOOD + "512,1,5000,0.1\n", ":3: row has 4 cells"),
        (HEADER.replace(",duration_s", ""), ":1: field 'duration_s': is missing"),
        (HEADER.replace("\n", ",duration_s\n"), ":1: field 'duration_s': appears twice"),
        ("", ": is empty"),
        (b"\xff\xfe", ":1: not UTF-8 text"),
        (HEADER + GOOD, ": fitting needs at least 5 steps, got 1"),
    ],
)
def test_bad_steps_file_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str | bytes, where: str
) -> None:
    path = tmp_path / "bad.csv"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    assert main(["fit", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"chunked-prefill fit: error: {path}{where}"), err


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", str(tmp_path / "none.csv")]) == 2
    err = capsys.readouterr().err
    want = f"{tmp_path}/none.csv: cannot be read: No such file or directory"
    assert err == f"chunked-prefill fit: error: {want}\n"


def test_read_steps_csv_reads_what_write_steps_csv_wrote(tmp_path: Path) -> None:
    cfg = SimConfig(chunk_size=256, token_budget=512, max_prefills_per_step=4)
    (r,) = simulate(default_workload(5), cfg, backend="pure", record_steps=True)
    assert r.step_log is not None
    path = tmp_path / "s.csv"
    write_steps_csv(r.step_log, path)
    s = read_steps_csv(path)
    assert list(s.duration_s) == [x.duration_s for x in r.step_log]
    assert list(s.attention_pairs) == [x.attention_pairs for x in r.step_log]
    assert list(s.prefill_tokens) == [x.prefill_tokens for x in r.step_log]
    assert s.prefill_chunks is not None
    assert list(s.prefill_chunks) == [len(x.chunks) for x in r.step_log]
    assert max(s.prefill_chunks) > 1  # steps of several chunks, not one per prefill step


def test_cli_round_trip_with_steps_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    steps, profile = tmp_path / "steps.csv", tmp_path / "fitted.json"
    run = ["simulate", "--scheduler", "planner", "--chunk-size", "512", "--requests", "20"]
    assert main([*run, "--steps-csv", str(steps), "--json", "--quiet"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(["fit", str(steps), "--out", str(profile)]) == 0
    capsys.readouterr()
    assert main([*run, "--profile", str(profile), "--json", "--quiet"]) == 0
    again = json.loads(capsys.readouterr().out)
    for metric in ("ttft_s", "tbt_s"):
        assert again[0][metric] == pytest.approx(first[0][metric], rel=1e-6)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--steps-csv", "s.csv"], "argument --steps-csv: needs --scheduler planner"),
        (
            ["--scheduler", "planner", "--steps-csv", "s.csv"],
            "argument --steps-csv: records one configuration, got 4",
        ),
        (
            ["--scheduler", "planner", "--chunk-size", "512", "--steps-csv", "/nonexistent/s.csv"],
            "argument --steps-csv: cannot write /nonexistent/s.csv",
        ),
    ],
)
def test_steps_csv_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", "--requests", "3", "--quiet", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"chunked-prefill simulate: error: {message}"), err
    assert err.count("\n") == 1


def test_noisy_timings_fit_the_mean_step_not_the_fast_ones() -> None:
    """On a shared machine some steps wait for the CPU: here a random third of them take
    twice as long, so a step takes 4/3 of the model on average. The fit divides each row by
    the modelled time, not by the noisy measured one, so it predicts that mean, for decode
    steps and for prefill steps alike; dividing by the measured time followed the fast steps
    (about 0.83 x the mean)."""
    s = synthetic(TRUE, n=3000)
    slow = np.random.default_rng(3).random(len(s)) < 1 / 3
    t = s.duration_s * np.where(slow, 2.0, 1.0)
    noisy = Steps(s.prefill_tokens, s.decode_tokens, s.attention_pairs,
                  s.decode_context_tokens, t, prefill_chunk_sq=s.prefill_chunk_sq)  # fmt: skip
    engine = fit_steps(noisy).engine
    assert s.prefill_chunk_sq is not None
    predicted = np.array(
        [engine.step_time(int(p), int(d), int(a), int(k), int(q))
         for p, d, a, k, q in zip(s.prefill_tokens, s.decode_tokens, s.attention_pairs,
                                  s.decode_context_tokens, s.prefill_chunk_sq)]
    )  # fmt: skip
    decode = s.prefill_tokens == 0
    for part in (decode, ~decode):
        assert rel(predicted[part].mean(), t[part].mean()) < 0.01
    # The floor and the decode coefficient are each seen alone (by the decode steps); the
    # prefill ones share their steps, so this much noise trades them against each other.
    mean = t.mean() / s.duration_s.mean()
    for p in ("t_min_s", "c_kv_s"):
        assert rel(getattr(engine, p), mean * getattr(TRUE, p)) < 0.03, p
