"""Tests of the latency simulator (chunked_prefill.sim) on both scheduler backends."""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections import deque
from pathlib import Path
from types import ModuleType
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunked_prefill.sim import (
    DEFAULT_ENGINE,
    ENGINE_PRESETS,
    EngineModel,
    ProfileError,
    Request,
    SimConfig,
    SimResult,
    TraceError,
    Workload,
    cli,
    default_workload,
    expand_configs,
    load_profile,
    load_trace,
    simulate,
)


@pytest.fixture(params=["pure", "rust"])
def backend(request: pytest.FixtureRequest) -> ModuleType:
    """Each scheduler backend; the Rust one is skipped while it is not built."""
    if request.param == "rust":
        rust: ModuleType = pytest.importorskip("chunked_prefill._core")
        return rust
    import chunked_prefill.pure as pure

    return pure


def _wl(*reqs: tuple[float, int, int]) -> Workload:
    return Workload.from_requests(Request(a, p, o) for a, p, o in reqs)


# --------------------------------------------------------------------------- hand-computed


def test_single_request_ttft_is_the_sum_of_its_chunk_steps(backend: ModuleType) -> None:
    # Prompt 1000 tokens, chunk 512: two prefill steps, no decodes beside them.
    # step 0: chunk [0, 512): max(9.8 ms, 7.4 ms + 57.5 us * 512 = 36.84 ms) = 36.84 ms
    #         + 2.7 ns * (512 * 513 / 2 = 131 328 pairs) = 0.3545856 ms
    #         + 6.5 ns * 512**2 = 1.703936 ms -> 38.8985216 ms
    # step 1: chunk [512, 1000): 7.4 ms + 57.5 us * 488 = 35.46 ms
    #         + 2.7 ns * (488 * 512 + 488 * 489 / 2 = 369 172 pairs) = 0.9967644 ms
    #         + 6.5 ns * 488**2 = 1.547936 ms -> 38.0047004 ms
    step0 = 38.8985216e-3
    step1 = 38.0047004e-3
    # Then 2 decode steps (output 3 tokens: the first comes with the last chunk):
    # max(9.8 ms, 7.4 ms + 57.5 us) = 9.8 ms + 0.31 us * context (1001, then 1002 tokens)
    dec0 = 9.8e-3 + 0.31e-6 * 1001
    dec1 = 9.8e-3 + 0.31e-6 * 1002
    for arrival in (0.0, 2.5):
        (r,) = simulate(_wl((arrival, 1000, 3)), SimConfig(chunk_size=512), backend=backend)
        assert r.steps == 4
        assert r.ttft_s.p50 == pytest.approx(step0 + step1, rel=1e-12)
        assert r.ttft_s.max == pytest.approx(step0 + step1, rel=1e-12)
        assert sorted(r.tbt_gaps.tolist()) == pytest.approx([dec0, dec1], rel=1e-12)
        assert r.e2e_s.p50 == pytest.approx(step0 + step1 + dec0 + dec1, rel=1e-12)
        assert r.first_token[0] == pytest.approx(arrival + step0 + step1, rel=1e-12)
        assert r.prefill_tokens == 1000
        assert r.output_tokens == 3
        assert r.throughput_tok_s == pytest.approx(3 / (step0 + step1 + dec0 + dec1))


def test_whole_prompt_is_one_step(backend: ModuleType) -> None:
    # 1000 tokens at once: 7.4 ms + 57.5 ms = 64.9 ms + 2.7 ns * 500 500 = 1.35135 ms
    # + 6.5 ns * 1000**2 = 6.5 ms.
    (r,) = simulate(_wl((0.0, 1000, 1)), SimConfig(chunk_size=None), backend=backend)
    assert r.steps == 1
    assert r.ttft_s.p50 == pytest.approx(72.75135e-3, rel=1e-12)
    assert r.e2e_s.p50 == r.ttft_s.p50
    assert r.tbt_s.count == 0 and r.tbt_s.p50 is None


def test_token_budget_steps_by_hand(backend: ModuleType) -> None:
    # Budget 700, chunk 512, two prefills per step; A = 600 prompt tokens, B = 300, both
    # at t=0 with 2 output tokens. Custom engine: t = 1 ms + 1 us/token + 1 ns/pair +
    # 1 us/context token (no floor).
    eng = EngineModel(name="t", t_min_s=0.0, c0_s=1e-3, c_tok_s=1e-6, c_attn_s=1e-9, c_kv_s=1e-6)
    cfg = SimConfig(chunk_size=512, token_budget=700, max_prefills_per_step=2)
    (r,) = simulate(
        _wl((0.0, 600, 2), (0.0, 300, 2)), cfg, engine=eng, backend=backend, record_steps=True
    )
    assert r.step_log is not None
    log = r.step_log
    # step 0: A [0, 512), B [0, 188): 700 tokens; pairs 512*513/2 + 188*189/2 = 131328 + 17766
    assert log[0].chunks == ((0, 0, 512, False), (1, 0, 188, False))
    s0 = 1e-3 + 700e-6 + (131328 + 17766) * 1e-9
    # step 1: A [512, 600) and B [188, 300) finish: 88 + 112 tokens;
    # pairs 88*512 + 88*89/2 + 112*188 + 112*113/2 = 45056 + 3916 + 21056 + 6328
    assert log[1].chunks == ((0, 512, 88, True), (1, 188, 112, True))
    s1 = 1e-3 + 200e-6 + (45056 + 3916 + 21056 + 6328) * 1e-9
    # step 2: both decode their second token; contexts 601 + 301
    assert log[2].chunks == () and log[2].decode_tokens == 2 and log[2].decoded == (0, 1)
    s2 = 1e-3 + 2e-6 + (601 + 301) * 1e-6
    assert [s.duration_s for s in log] == pytest.approx([s0, s1, s2], rel=1e-12)
    assert r.ttft.tolist() == pytest.approx([s0 + s1] * 2, rel=1e-12)
    assert r.e2e.tolist() == pytest.approx([s0 + s1 + s2] * 2, rel=1e-12)


def test_stalls_count_gaps_over_the_threshold(backend: ModuleType) -> None:
    # A decodes (4 output tokens) while B's 3000-token prompt is prefilled whole: the gap
    # of A that contains B's step is ~0.22 s; A's other gaps are ~10 ms.
    wl = _wl((0.0, 10, 4), (0.011, 3000, 1))
    (r,) = simulate(wl, SimConfig(chunk_size=None), backend=backend, stall_threshold_s=0.1)
    assert r.tbt_s.count == 3
    assert r.stalls == 1
    assert r.tbt_s.max is not None and r.tbt_s.max > 0.2
    (c,) = simulate(wl, SimConfig(chunk_size=256), backend=backend, stall_threshold_s=0.1)
    assert c.stalls == 0


def test_max_running_one_serialises_requests(backend: ModuleType) -> None:
    wl = _wl((0.0, 100, 5), (0.0, 200, 3), (0.0, 50, 2))
    (r,) = simulate(wl, SimConfig(chunk_size=512, max_running=1), backend=backend)
    order = np.argsort(r.admitted)
    assert order.tolist() == [0, 1, 2]
    assert r.admitted[1] == r.finish[0]
    assert r.admitted[2] == r.finish[1]


# --------------------------------------------------------------------------- a reference


def _reference(
    wl: Workload, cfg: SimConfig, engine: EngineModel, module: ModuleType
) -> dict[str, Any]:
    """A plain per-token implementation of the documented model, for comparison."""
    n = len(wl)
    order = sorted(range(n), key=lambda i: (wl.arrival_s[i], i))
    sched = module.Scheduler(module.Config(**cfg.scheduler_options(max(wl.prompt_tokens))))
    times: list[list[float]] = [[] for _ in range(n)]
    generated = [0] * n
    decoding: deque[int] = deque()
    now, nxt, running, done, steps = 0.0, 0, 0, 0, 0
    admitted = [math.nan] * n
    prefilled = [0] * n
    while done < n:
        while nxt < n and running < cfg.max_running and wl.arrival_s[order[nxt]] <= now:
            r = order[nxt]
            sched.enqueue(
                r, wl.prompt_tokens[r], cached_tokens=wl.cached_tokens[r], priority=wl.priority[r]
            )
            admitted[r] = now
            running += 1
            nxt += 1
        if running == 0:
            now = wl.arrival_s[order[nxt]]
            continue
        step = sched.next_step(len(decoding))
        d = step.decode_tokens
        served = [decoding.popleft() for _ in range(d)]
        attn = sum(c.tokens * c.start + c.tokens * (c.tokens + 1) // 2 for c in step.chunks)
        ptok = sum(c.tokens for c in step.chunks)
        sq = sum(c.tokens * c.tokens for c in step.chunks)
        kv = sum(wl.prompt_tokens[r] + generated[r] for r in served)
        lin = max(engine.t_min_s, engine.c0_s + engine.c_tok_s * (ptok + d))
        now = now + (lin + engine.c_attn_s * attn + engine.c_kv_s * kv + engine.c_chunk_sq_s * sq)
        steps += 1
        for r in served:
            generated[r] += 1
            times[r].append(now)
            if generated[r] == wl.output_tokens[r]:
                running -= 1
                done += 1
            else:
                decoding.append(r)
        for c in step.chunks:
            prefilled[c.request_id] += c.tokens
            if c.is_last:
                r = c.request_id
                generated[r] = 1
                times[r].append(now)
                if wl.output_tokens[r] == 1:
                    running -= 1
                    done += 1
                else:
                    decoding.append(r)
        sched.drain_completed()
    arrival = np.array(wl.arrival_s)
    gaps = sorted(b - a for t in times for a, b in zip(t, t[1:]))
    return {
        "steps": steps,
        "ttft": np.array([t[0] for t in times]) - arrival,
        "e2e": np.array([t[-1] for t in times]) - arrival,
        "gaps": np.array(gaps),
        "tokens": [len(t) for t in times],
        "prefilled": prefilled,
        "admitted": np.array(admitted),
    }


def _random_workload(seed: int, n: int) -> Workload:
    rnd = random.Random(seed)
    reqs = []
    t = 0.0
    for _ in range(n):
        t += rnd.expovariate(40.0) if rnd.random() < 0.8 else 0.0
        p = rnd.choice([1, 2, 7, 50, 300, 700, 2500])
        c = rnd.choice([0, 0, 0, p // 2, p])
        reqs.append(Request(t, p, rnd.choice([1, 2, 5, 30, 120]), c, rnd.choice([0, 0, -1, 3])))
    return Workload.from_requests(reqs)


_REFERENCE_CONFIGS = [
    SimConfig(chunk_size=512),
    SimConfig(chunk_size=None),
    SimConfig(chunk_size=64, max_decode_tokens=3),  # decodes throttled: round-robin
    SimConfig(chunk_size=256, token_budget=300, max_prefills_per_step=3, max_decode_tokens=8),
    SimConfig(
        chunk_size=100,
        token_budget=130,
        max_prefills_per_step=2,
        max_decode_tokens=5,
        max_running=6,
    ),
]


@pytest.mark.parametrize("cfg", _REFERENCE_CONFIGS, ids=lambda c: c.label())
@pytest.mark.parametrize("seed", [1, 2])
def test_matches_a_per_token_reference(backend: ModuleType, cfg: SimConfig, seed: int) -> None:
    wl = _random_workload(seed, 150)
    (r,) = simulate(wl, cfg, backend=backend, record_steps=True)
    ref = _reference(wl, cfg, DEFAULT_ENGINE, backend)
    assert r.steps == ref["steps"]
    np.testing.assert_allclose(r.ttft, ref["ttft"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(r.e2e, ref["e2e"], rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(r.admitted, ref["admitted"])
    expanded = np.sort(np.repeat(r.tbt_gaps, r.tbt_weights))
    np.testing.assert_allclose(expanded, ref["gaps"], rtol=1e-9, atol=1e-12)
    # Every request got exactly its prompt (less cached tokens) and its output tokens.
    want_prefill = [p - c if c < p else 1 for p, c in zip(wl.prompt_tokens, wl.cached_tokens)]
    assert r.prefilled.tolist() == want_prefill == ref["prefilled"]
    assert ref["tokens"] == list(wl.output_tokens)
    assert r.tbt_s.count == sum(wl.output_tokens) - len(wl)


_request = st.builds(
    Request,
    arrival_s=st.sampled_from([0.0, 0.001, 0.01, 0.05, 0.2, 1.0]),
    prompt_tokens=st.integers(1, 1200),
    output_tokens=st.integers(1, 40),
)


@st.composite
def _sim_config(draw: st.DrawFn) -> SimConfig:
    decode = draw(st.integers(1, 6))
    chunk = draw(st.one_of(st.none(), st.integers(1, 700)))
    budget = None
    prefills = 1
    if chunk is not None and draw(st.booleans()):
        budget = draw(st.integers(decode + 1, decode + 800))
        prefills = draw(st.integers(1, 4))
    return SimConfig(chunk, budget, prefills, decode, draw(st.integers(1, 12)))


@settings(deadline=None)
@given(requests=st.lists(_request, min_size=1, max_size=25), cfg=_sim_config())
def test_matches_the_reference_on_random_cases(requests: list[Request], cfg: SimConfig) -> None:
    import chunked_prefill.pure as pure

    wl = Workload.from_requests(sorted(requests, key=lambda r: r.arrival_s))
    (r,) = simulate(wl, cfg, backend=pure)
    ref = _reference(wl, cfg, DEFAULT_ENGINE, pure)
    assert r.steps == ref["steps"]
    np.testing.assert_allclose(r.ttft, ref["ttft"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(r.e2e, ref["e2e"], rtol=1e-12, atol=1e-12)
    expanded = np.sort(np.repeat(r.tbt_gaps, r.tbt_weights))
    np.testing.assert_allclose(expanded, ref["gaps"], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("cfg", _REFERENCE_CONFIGS, ids=lambda c: c.label())
def test_step_log_accounts_for_every_token(backend: ModuleType, cfg: SimConfig) -> None:
    wl = _random_workload(7, 200)
    (r,) = simulate(wl, cfg, backend=backend, record_steps=True)
    assert r.step_log is not None and len(r.step_log) == r.steps
    prefill = [0] * len(wl)
    decoded = [0] * len(wl)
    budget = cfg.token_budget
    for s in r.step_log:
        assert len(set(s.decoded)) == len(s.decoded) == s.decode_tokens
        assert s.decode_tokens <= cfg.max_decode_tokens
        tokens = sum(c[2] for c in s.chunks)
        if budget is not None:
            assert tokens + s.decode_tokens <= budget
            assert len(s.chunks) <= cfg.max_prefills_per_step
        else:
            assert len(s.chunks) <= 1
        for rid, _start, n, _last in s.chunks:
            prefill[rid] += n
        for rid in s.decoded:
            decoded[rid] += 1
        assert s.end_s > s.start_s
    want = [p - c if c < p else 1 for p, c in zip(wl.prompt_tokens, wl.cached_tokens)]
    assert prefill == want
    assert decoded == [o - 1 for o in wl.output_tokens]
    # Steps are back to back or separated by idle time, never overlapping.
    for a, b in zip(r.step_log, r.step_log[1:]):
        assert b.start_s >= a.end_s


def test_round_robin_serves_the_longest_waiting(backend: ModuleType) -> None:
    # Six 1-token prompts prefilled together in step 0, 7 output tokens each, at most 2
    # decode tokens per step, every step 1 ms: decodes go (0, 1), (2, 3), (4, 5), (0, 1)...
    wl = Workload.from_requests([Request(0.0, 1, 7) for _ in range(6)])
    eng = EngineModel(name="t", t_min_s=0.0, c0_s=1e-3, c_tok_s=0.0, c_attn_s=0.0, c_kv_s=0.0)
    cfg = SimConfig(chunk_size=8, token_budget=16, max_prefills_per_step=6, max_decode_tokens=2)
    (r,) = simulate(wl, cfg, engine=eng, backend=backend, record_steps=True)
    assert r.step_log is not None
    assert len(r.step_log[0].chunks) == 6
    decode_steps = [s.decoded for s in r.step_log[1:]]
    assert decode_steps == [(0, 1), (2, 3), (4, 5)] * 6
    # First gaps: 1, 2 and 3 ms after the first token; every later gap is 3 steps.
    gaps = np.sort(np.repeat(r.tbt_gaps, r.tbt_weights))
    np.testing.assert_allclose(gaps, [1e-3] * 2 + [2e-3] * 2 + [3e-3] * 32, rtol=1e-9)
    assert r.steps == 1 + 18


# --------------------------------------------------------------------------- workload-level


def test_identical_on_both_backends() -> None:
    rust = pytest.importorskip("chunked_prefill._core")
    import chunked_prefill.pure as pure

    wl = _random_workload(11, 300)
    configs = expand_configs([128, None], [None, 512], [1, 3], [16], [64])
    a = simulate(wl, configs, backend=pure)
    b = simulate(wl, configs, backend=rust)
    assert [x.to_dict() for x in a] == [y.to_dict() for y in b]
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.first_token, y.first_token)
        np.testing.assert_array_equal(x.finish, y.finish)
        np.testing.assert_array_equal(x.tbt_gaps, y.tbt_gaps)


def test_reproducible_under_a_seed(backend: ModuleType) -> None:
    a = default_workload(300, seed=5)
    b = default_workload(300, seed=5)
    c = default_workload(300, seed=6)
    assert a == b
    assert a != c
    ra = simulate(a, SimConfig(512), backend=backend)
    rb = simulate(b, SimConfig(512), backend=backend)
    assert [r.to_dict() for r in ra] == [r.to_dict() for r in rb]


def test_chunking_cuts_the_tbt_tail(backend: ModuleType) -> None:
    chunked, whole = simulate(
        default_workload(),
        [SimConfig(chunk_size=512), SimConfig(chunk_size=None)],
        backend=backend,
    )
    assert chunked.tbt_s.p99 is not None and whole.tbt_s.p99 is not None
    assert chunked.tbt_s.max is not None and whole.tbt_s.max is not None
    assert chunked.tbt_s.p99 < whole.tbt_s.p99
    assert chunked.tbt_s.max < whole.tbt_s.max
    assert chunked.stalls < whole.stalls


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"rate": math.inf},
        {"length_dist": "fixed", "input_len": 5, "output_len": 3},
        {"length_dist": "uniform", "input_len": 300, "output_len": 40, "range_ratio": 0.9},
        {"length_dist": "exponential"},
        {"prefix_tokens": 64, "prefix_groups": 3},
        {"turns": 3},
        {"output_scale": 0.5},
    ],
)
def test_default_workload_equals_its_checked_construction(options: dict[str, Any]) -> None:
    # Drawn columns found in range on their arrays skip the constructor's checks: the same
    # workload as the checked constructor builds from them.
    wl = default_workload(500, seed=3, **options)
    checked = Workload(**{name: getattr(wl, name) for name in wl.__dataclass_fields__})
    assert wl == checked
    assert {type(a) for a in wl.arrival_s} == {float}
    assert {type(n) for n in wl.prompt_tokens + wl.output_tokens} == {int}


def test_default_workload_in_range_skips_the_constructor_checks() -> None:
    with mock.patch.object(Workload, "__post_init__", side_effect=AssertionError("checked")):
        assert len(default_workload(50, seed=3)) == 50
        with pytest.raises(AssertionError, match="checked"):
            default_workload(50, seed=3, turns=2)  # sessions: built by the constructor


def test_default_workload_out_of_range_is_checked() -> None:
    # A rate so low that arrivals pass 2**53 s goes through the checked constructor.
    with pytest.raises(ValueError, match=r"^request 0: arrival_s must be a number of seconds"):
        default_workload(3, rate=1e-300)


def test_default_workload_shape() -> None:
    wl = default_workload(20000, rate=8.0, seed=1)
    prompts = np.array(wl.prompt_tokens)
    outputs = np.array(wl.output_tokens)
    gaps = np.diff(np.array(wl.arrival_s))
    assert (gaps >= 0).all()
    assert np.mean(gaps) == pytest.approx(1 / 8.0, rel=0.05)  # Poisson at 8 req/s
    assert np.std(gaps) == pytest.approx(1 / 8.0, rel=0.05)  # exponential: std == mean
    assert (prompts >= 2000).mean() > 0.03  # some multi-thousand-token prompts
    assert 400 < prompts.mean() < 900
    assert np.median(prompts) < prompts.mean()  # right-skewed
    assert 120 < outputs.mean() < 300
    assert prompts.min() >= 1 and outputs.min() >= 1
    # Lengths do not depend on the rate; rate=inf puts everything at t=0.
    inf = default_workload(20000, rate=math.inf, seed=1)
    assert inf.prompt_tokens == wl.prompt_tokens
    assert set(inf.arrival_s) == {0.0}


def test_scales() -> None:
    wl = _wl((0.0, 10, 3), (1.0, 1, 1))
    s = wl.scaled(2.0, 0.5)
    assert s.prompt_tokens == (20, 2)
    assert s.output_tokens == (2, 1)  # round(1.5) = 2; never below 1
    assert wl.scaled(1.0, 1.0) is wl
    with pytest.raises(ValueError):
        wl.scaled(0.0, 1.0)


def test_expand_configs_is_a_cross_product_without_duplicates() -> None:
    cfgs = expand_configs([256, None], [None, 1024], [1, 4], [128], [256])
    labels = [c.label() for c in cfgs]
    assert labels == [
        "chunk=256 decode<=128 running<=256",
        "chunk=256 budget=1024 decode<=128 running<=256",
        "chunk=256 budget=1024 prefills=4 decode<=128 running<=256",
        "chunk=none decode<=128 running<=256",
    ]


def test_invalid_scheduler_config_is_an_error(backend: ModuleType) -> None:
    # With interleaved decodes the token budget must exceed max_decode_tokens.
    with pytest.raises(ValueError, match="token_budget"):
        simulate(_wl((0.0, 10, 2)), SimConfig(512, token_budget=128), backend=backend)
    with pytest.raises(ValueError):
        SimConfig(None, token_budget=1024)
    with pytest.raises(ValueError):
        SimConfig(512, max_decode_tokens=0)


# --------------------------------------------------------------------------- traces


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_trace_csv_with_aliases(tmp_path: Path, backend: ModuleType) -> None:
    path = _write(
        tmp_path,
        "azure.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,396,109\n"
        "\n"
        "2023-11-16 18:15:51.0000000,879,20\n",
    )
    wl = load_trace(path)
    assert wl.prompt_tokens == (374, 396, 879)
    assert wl.output_tokens == (44, 109, 20)
    assert wl.arrival_s[0] == 0.0
    assert wl.arrival_s[1] == pytest.approx(4.314579, abs=1e-6)
    (r,) = simulate(wl, SimConfig(512), backend=backend)
    assert r.requests == 3


def test_trace_jsonl_with_aliases_and_time_unit(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "mooncake.jsonl",
        '{"timestamp": 0, "input_length": 6955, "output_length": 52, "hash_ids": [1, 2]}\n'
        '{"timestamp": 2500, "input_length": 100, "output_length": 7, "priority": -2}\n'
        "\n"
        '{"timestamp": 3000, "input_length": 10, "output_length": 1, "cached_tokens": 10}\n',
    )
    wl = load_trace(path, time_unit="ms")
    assert wl.arrival_s == (0.0, 2.5, 3.0)
    assert wl.prompt_tokens == (6955, 100, 10)
    assert wl.priority == (0, -2, 0)
    assert wl.cached_tokens == (0, 0, 10)
    vidur = _write(
        tmp_path, "vidur.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n0.5,12,3\n"
    )
    assert load_trace(vidur).prompt_tokens == (12,)


@pytest.mark.parametrize(
    ("name", "text", "line", "field"),
    [
        ("a.csv", "arrival_s,prompt_tokens\n0,5\n", 1, "output_tokens"),
        ("b.csv", "arrival_s,prompt_tokens,output_tokens\n0,5,1\n1,-5,1\n", 3, "prompt_tokens"),
        ("c.csv", "arrival_s,prompt_tokens,output_tokens\n0,5.5,1\n", 2, "prompt_tokens"),
        ("d.csv", "arrival_s,prompt_tokens,output_tokens\n0,5,\n", 2, "output_tokens"),
        ("e.csv", "arrival_s,prompt_tokens,output_tokens\n0,5,0\n", 2, "output_tokens"),
        ("f.csv", "arrival_s,prompt_tokens,output_tokens\nsoon,5,1\n", 2, "arrival_s"),
        ("g.csv", "arrival_s,prompt_tokens,output_tokens\n-1,5,1\n", 2, "arrival_s"),
        ("h.csv", "arrival_s,prompt_tokens,output_tokens\n0,5,1,9\n", 2, None),
        ("i.csv", "time,timestamp,prompt_tokens,output_tokens\n0,0,5,1\n", 1, "timestamp"),
        (
            "j.csv",
            "arrival_s,prompt_tokens,output_tokens,cached_tokens\n0,5,1,6\n",
            2,
            "cached_tokens",
        ),
        ("k.jsonl", '{"arrival_s": 0, "prompt_tokens": 3, "output_tokens": 1}\n{oops\n', 2, None),
        (
            "l.jsonl",
            '{"arrival_s": 0, "prompt_tokens": "x", "output_tokens": 1}\n',
            1,
            "prompt_tokens",
        ),
        ("m.jsonl", "[1, 2, 3]\n", 1, None),
        ("n.jsonl", '{"arrival_s": 0, "output_tokens": 1}\n', 1, "prompt_tokens"),
        ("o.jsonl", '{"arrival_s": NaN, "prompt_tokens": 2, "output_tokens": 1}\n', 1, "arrival_s"),
        (
            "p.jsonl",
            '{"arrival_s": 0, "prompt_tokens": true, "output_tokens": 1}\n',
            1,
            "prompt_tokens",
        ),
    ],
)
def test_trace_errors_name_file_line_and_field(
    tmp_path: Path, name: str, text: str, line: int, field: str | None
) -> None:
    path = _write(tmp_path, name, text)
    with pytest.raises(TraceError) as info:
        load_trace(path)
    err = info.value
    assert err.path == str(path)
    assert err.line == line
    assert err.field == field
    assert f"{path}:{line}:" in str(err)
    if field is not None:
        assert repr(field) in str(err)


def test_trace_whole_file_errors(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="empty"):
        load_trace(_write(tmp_path, "empty.csv", ""))
    with pytest.raises(TraceError, match="no requests"):
        load_trace(_write(tmp_path, "header.csv", "arrival_s,prompt_tokens,output_tokens\n"))
    with pytest.raises(TraceError, match="cannot be read"):
        load_trace(tmp_path / "missing.csv")


# --------------------------------------------------------------------------- engine profiles


def test_profiles_toml_and_json(tmp_path: Path) -> None:
    toml = _write(tmp_path, "h.toml", '[engine]\nname = "mine"\nc_tok_s = 3e-5\n')
    eng = load_profile(toml)
    assert eng.name == "mine"
    assert eng.c_tok_s == 3e-5
    assert eng.t_min_s == DEFAULT_ENGINE.t_min_s
    js = _write(tmp_path, "h.json", '{"preset": "llama2-7b-h100", "c_kv_s": 1e-7}')
    eng2 = load_profile(js)
    assert eng2.t_min_s == 5.7e-3 and eng2.c_kv_s == 1e-7
    with pytest.raises(ProfileError, match="unknown key 'c_mlp'"):
        load_profile(_write(tmp_path, "bad.toml", "c_mlp = 1.0\n"))
    with pytest.raises(ProfileError, match="c0_s"):
        load_profile(_write(tmp_path, "neg.json", '{"c0_s": -1}'))
    with pytest.raises(ProfileError, match="not valid TOML"):
        load_profile(_write(tmp_path, "broken.toml", "c0_s = \n"))


def test_engine_step_time_every_term_in_order() -> None:
    e = EngineModel(t_min_s=0.01, c0_s=0.002, c_tok_s=1e-4, c_attn_s=1e-9, c_kv_s=1e-6,
                    c_chunk_sq_s=1e-8)  # fmt: skip
    # One chunk of 200 tokens after 100 cached ones, one decode of context 1000 (as the
    # Rust test in rust/core/src/sim/engine.rs): the same float operations in the same order.
    want = (0.002 + 1e-4 * 201) + 1e-9 * 40_100 + 1e-6 * 1000 + 1e-8 * 40_000
    assert e.step_time(200, 1, EngineModel.chunk_pairs(100, 200), 1000, 200**2) == want
    assert want == pytest.approx(0.0235401)


def test_a_profile_without_the_chunk_term_keeps_the_base_value(tmp_path: Path) -> None:
    old = _write(tmp_path, "old.toml", "t_min_s = 0.01\nc0_s = 0.002\nc_tok_s = 6e-5\n"
                 "c_attn_s = 2e-9\nc_kv_s = 3e-7\n")  # fmt: skip
    assert load_profile(old).c_chunk_sq_s == DEFAULT_ENGINE.c_chunk_sq_s == 6.5e-9
    h100 = ENGINE_PRESETS["llama2-7b-h100"]
    assert load_profile(old, base=h100).c_chunk_sq_s == h100.c_chunk_sq_s
    new = _write(tmp_path, "new.json", '{"c_chunk_sq_s": 1e-9}')
    assert load_profile(new).c_chunk_sq_s == 1e-9
    with pytest.raises(ProfileError, match="c_chunk_sq_s"):
        load_profile(_write(tmp_path, "neg.json", '{"c_chunk_sq_s": -1}'))


def test_engine_step_time_formula() -> None:
    e = DEFAULT_ENGINE
    assert e.step_time(0, 1, 0, 0) == pytest.approx(9.8e-3)
    # 7.4 ms + 57.5 us x 512 + 2.7 ns x 131 328 pairs + 6.5 ns x 512**2
    pairs = EngineModel.chunk_pairs(0, 512)
    assert e.step_time(512, 0, pairs, 0, 512**2) == pytest.approx(38.8985216e-3)
    assert e.step_time(512, 0, pairs, 0) == pytest.approx(38.8985216e-3 - 1.703936e-3)
    assert EngineModel.chunk_pairs(512, 488) == 369172
    with pytest.raises(ValueError):
        EngineModel(c0_s=-1.0)
    with pytest.raises(ValueError, match="no duration"):
        EngineModel(t_min_s=0.0, c0_s=0.0, c_tok_s=0.0)


# --------------------------------------------------------------------------- CLI


def test_cli_no_arguments(capsys: pytest.CaptureFixture[str], monkeypatch: Any) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    assert cli.main([]) == 0
    out = capsys.readouterr().out
    for text in ("TTFT", "TBT", "stalls", "budget", "512", "8192", "llama2-7b-a100", "reading: "):
        assert text in out


def test_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(
        [
            "--json",
            "--requests",
            "200",
            "--chunk-size",
            "512,none",
            "--rate",
            "inf",
            "--backend",
            "pure",
            "--c-kv",
            "0.2e-6",
        ]
    )
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert isinstance(data, list) and len(data) == 2
    assert data[0]["config"]["chunk_size"] == 512
    assert data[1]["config"]["chunk_size"] is None
    for obj in data:
        for key in ("ttft_s", "tbt_s", "e2e_s"):
            assert set(obj[key]) >= {"p50", "p90", "p99", "max"}
        assert obj["tbt_s"]["max"] >= obj["tbt_s"]["p99"] >= obj["tbt_s"]["p50"] > 0
        assert obj["throughput_tok_s"] > 0
        assert isinstance(obj["steps"], int) and isinstance(obj["stalls"], int)
        assert obj["requests"] == 200
        assert obj["engine"]["c_kv_s"] == 0.2e-6


def test_cli_json_is_the_same_on_both_backends(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("chunked_prefill._core")
    args = [
        "--json",
        "--requests",
        "300",
        "--token-budget",
        "none,1024",
        "--max-prefills-per-step",
        "1,2",
        "--max-decode-tokens",
        "16",
        "--scheduler",
        "planner",
    ]
    assert cli.main([*args, "--backend", "pure"]) == 0
    pure_out = capsys.readouterr().out
    assert cli.main([*args, "--backend", "rust"]) == 0
    assert capsys.readouterr().out == pure_out


def test_cli_trace_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = _write(tmp_path, "t.csv", "arrival_s,prompt_tokens,output_tokens\n0,100,3\n0.1,50,2\n")
    assert cli.main(["--trace", str(good), "--json", "--quiet"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data[0]["requests"] == 2
    bad = _write(tmp_path, "bad.csv", "arrival_s,prompt_tokens,output_tokens\n0,100,x\n")
    assert cli.main(["--trace", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:2:" in err and "output_tokens" in err
    at_once = _write(tmp_path, "once.csv", "arrival_s,prompt_tokens,output_tokens\n0,1,3\n0,5,2\n")
    assert cli.main(["--trace", str(at_once), "--rate", "5"]) == 2
    err = capsys.readouterr().err
    assert "argument --rate: " in err and "span no time" in err
    assert (
        cli.main(["--token-budget", "64", "--max-decode-tokens", "128", "--scheduler", "planner"])
        == 2
    )
    assert "token_budget" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["--chunk-size", "512,zero"])


def test_cli_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "cdf.png"
    assert cli.main(["--requests", "100", "--plot", str(png), "--quiet"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_plot_without_matplotlib(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails as if not installed
    png = tmp_path / "x.png"
    assert cli.main(["--requests", "100", "--plot", str(png)]) == 2
    assert "pip install '.[plot]'" in capsys.readouterr().err
    assert not png.exists()


def test_add_parser_wires_into_a_parent() -> None:
    parent = argparse.ArgumentParser(prog="chunked-prefill")
    sub = parent.add_subparsers(dest="command")
    cli.add_parser(sub)
    args = parent.parse_args(["simulate", "--chunk-size", "128,none", "--rate", "inf"])
    assert args.command == "simulate"
    assert args.chunk_size == [128, None]
    assert math.isinf(args.rate)
    assert args.func is cli.run


def test_result_is_plain_data(backend: ModuleType) -> None:
    (r,) = simulate(_wl((0.0, 10, 2)), SimConfig(512), backend=backend)
    assert isinstance(r, SimResult)
    json.dumps(r.to_dict(), allow_nan=False)


def test_cli_progress_bar_on_a_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from rich.console import Console

    calls: list[tuple[int, int, int]] = []
    real = simulate

    def spy(*args: Any, **kwargs: Any) -> list[SimResult]:
        progress = kwargs["on_progress"]

        def record(i: int, done: int, total: int) -> None:
            calls.append((i, done, total))
            progress(i, done, total)

        kwargs["on_progress"] = record
        return real(*args, **kwargs)

    monkeypatch.setattr(Console, "is_terminal", property(lambda self: True))
    from chunked_prefill.sim.cli.simulate import planner as planner_cli

    monkeypatch.setattr(planner_cli, "simulate", spy)
    assert (
        cli.main(["--requests", "300", "--chunk-size", "512,none", "--scheduler", "planner"]) == 0
    )
    assert (0, 300, 300) in calls and (1, 300, 300) in calls
    capsys.readouterr()


def test_cli_quiet_keeps_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--requests", "100", "--quiet", "--chunk-size", "512"]) == 0
    out = capsys.readouterr().out
    assert "TTFT" in out and "512" in out
    assert "workload:" not in out and "wall time" not in out
