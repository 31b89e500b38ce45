"""Issue 24: the steady part of a run, overload, the reading under the table, and a capacity
that does not hang on the run's length or on the number of replicas."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from chunked_prefill.cli import main as top_main
from chunked_prefill.sim import (
    SyntheticWorkload,
    default_workload,
    expand_serving_configs,
    search,
    simulate_serving,
)
from chunked_prefill.sim import cli as sim_cli
from chunked_prefill.sim.report.reading import overload_lines, reading_line
from chunked_prefill.sim.runs.steady import (
    OVERLOAD_TOLERANCE,
    slo_met,
    steady_mask,
    steady_state,
    wilson_interval,
)


def _f(values: list[float]) -> Any:
    return np.asarray(values, dtype=np.float64)


# ----------------------------------------------------------------------------- the window


def test_steady_mask_cuts_first_and_last_arrivals_by_rank() -> None:
    arrival = _f([9.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])
    mask = steady_mask(arrival, 0.1, 0.2)
    # Ranks 1..7 kept: the earliest (t=0) and the two latest (t=8, 9) left out.
    assert mask.tolist() == [False, False, True, True, True, True, True, True, True, False]
    assert steady_mask(arrival, 0.0, 0.0).all()


def test_steady_mask_keeps_every_request_of_a_run_too_short_to_cut() -> None:
    assert steady_mask(_f([0.0, 1.0]), 0.4, 0.4).tolist() == [True, True]


def test_steady_state_rates_by_hand() -> None:
    # Four requests in the window [1, 4]: three more arrive in it than are admitted.
    arrival = _f([1.0, 2.0, 3.0, 4.0])
    admitted = _f([1.0, 5.0, 6.0, 7.0])
    first = admitted + 0.5
    finish = first + 1.0
    output = np.asarray([3, 3, 3, 3], dtype=np.int64)
    mask = np.ones(4, dtype=bool)
    s = steady_state(arrival, admitted, first, finish, output, mask)
    assert (s.start_s, s.end_s, s.requests) == (1.0, 4.0, 4)
    assert s.offered_rps == pytest.approx(4 / 3)
    assert s.served_rps == pytest.approx(1 / 3)  # only the first was admitted in the window
    assert s.overloaded
    # The first request's 3 tokens (1.5, 2.0, 2.5) fall inside; no other token does.
    assert s.output_tok_s == pytest.approx(3 / 3)
    assert s.lifetimes == pytest.approx(3.0 / 1.5)
    assert not s.long_enough


def test_a_served_rate_within_the_tolerance_is_not_overloaded() -> None:
    n = 100
    arrival = np.arange(n, dtype=np.float64)
    admitted = arrival.copy()
    # Five of the window's 100 arrivals are admitted after it ends: 95 % served.
    admitted[-5:] += 1000.0
    s = steady_state(arrival, admitted, admitted, admitted + 1, np.ones(n, np.int64), arrival >= 0)
    assert s.served_rps == pytest.approx(95 / 99)
    assert (s.served_rps < (1 - OVERLOAD_TOLERANCE) * s.offered_rps) == s.overloaded
    assert not s.overloaded  # 0.9596 >= 0.95 * 1.0101


def test_slo_met_per_request() -> None:
    arrival = _f([0.0, 0.0, 0.0])
    first = _f([1.0, 3.0, 1.0])
    finish = _f([3.0, 4.0, 11.0])
    output = np.asarray([3, 2, 6], dtype=np.int64)
    gap = _f([1.0, 1.0, 5.0])
    assert slo_met({"ttft_s": 2.0}, arrival, first, finish, output, gap).tolist() == [
        True,
        False,
        True,
    ]
    # TPOT: (3-1)/2 = 1, (4-3)/1 = 1, (11-1)/5 = 2.
    assert slo_met({"tpot_s": 1.0}, arrival, first, finish, output, gap).tolist() == [
        True,
        True,
        False,
    ]
    assert slo_met({"tbt_s": 4.0}, arrival, first, finish, output, gap).tolist() == [
        True,
        True,
        False,
    ]


def test_wilson_interval_known_values() -> None:
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.27754, abs=1e-5)
    lo, hi = wilson_interval(99, 100)
    assert (lo, hi) == (pytest.approx(0.94552, abs=1e-5), pytest.approx(0.99823, abs=1e-5))
    assert wilson_interval(0, 0) == (0.0, 1.0)


# ------------------------------------------------------------------------- runs and JSON


def _run(rate: float, requests: int = 400, **kw: Any) -> dict[str, Any]:
    (r,) = simulate_serving(
        default_workload(requests, rate=rate),
        expand_serving_configs(chunk_sizes=[512]),
        slo_ttft_s=2.0,
        slo_tpot_s=0.1,
        **kw,
    )
    out: dict[str, Any] = r.to_dict()
    return out


def test_overload_is_flagged_in_json_with_offered_and_served_rates() -> None:
    calm, busy = _run(2.0), _run(20.0)
    assert calm["overloaded"] is False and busy["overloaded"] is True
    assert calm["served_rps"] == pytest.approx(calm["offered_rps"], rel=OVERLOAD_TOLERANCE)
    assert busy["served_rps"] < 0.7 * busy["offered_rps"]
    assert busy["offered_rps"] == pytest.approx(20.0, rel=0.15)
    for d in (calm, busy):
        assert d["steady"]["requests"] == 400 - 2 * 40
        assert d["steady"]["offered_rps"] == d["offered_rps"]
        lo, hi = d["slo_attainment_ci"]
        assert lo <= d["slo_attainment"] <= hi
        assert set(d["slo_attainment_each"]) == {"ttft_s", "tpot_s"}
        assert d["slo_attainment"] <= min(d["slo_attainment_each"].values())


def test_attainment_counts_only_the_steady_requests() -> None:
    # Without a warm-up or drain cut every request counts: 400 against 320.
    whole = _run(20.0, warmup=0.0, drain=0.0)
    cut = _run(20.0)
    assert whole["steady"]["requests"] == 400 and cut["steady"]["requests"] == 320
    assert whole["slo_attainment"] != cut["slo_attainment"]


def test_bad_cuts_are_refused() -> None:
    with pytest.raises(ValueError, match="warmup"):
        _run(2.0, requests=10, warmup=0.5)
    with pytest.raises(ValueError, match="drain"):
        _run(2.0, requests=10, drain=-0.1)


# -------------------------------------------------------------------------- the reading


def test_reading_names_the_rows_meeting_and_missing_each_slo() -> None:
    results = simulate_serving(
        default_workload(300, rate=6.0),
        expand_serving_configs(chunk_sizes=[256, None]),
        slo_ttft_s=2.0,
        slo_tbt_s=0.1,
    )
    line = reading_line(results)
    assert line is not None
    assert line.startswith("reading: TTFT 2 s, TBT 0.1 s met by 99 % of requests in chunk=256")
    assert "missed by chunk=none budget=none (TBT " in line
    assert overload_lines(results) == []


def test_overload_line_names_offered_and_served() -> None:
    results = simulate_serving(
        default_workload(300, rate=30.0), expand_serving_configs(chunk_sizes=[512])
    )
    (line,) = overload_lines(results)
    assert line.startswith("overloaded: every row: ")
    assert "req/s offered, only " in line and " served; the queue grows" in line
    assert reading_line(results) is None  # one row, no SLO: nothing to compare


def test_default_table_compares_token_budgets_and_ends_with_a_reading(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    assert sim_cli.main(["--requests", "200", "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)
    pairs = [(d["config"]["chunk_size"], d["config"]["token_budget"]) for d in runs]
    assert pairs == [(512, 512), (2048, 2048), (8192, 8192)]
    assert sim_cli.main(["--requests", "200", "--slo-ttft", "2", "--slo-tpot", "0.1"]) == 0
    out = capsys.readouterr().out
    heads = [line.split() for line in out.splitlines() if "p50" in line]
    assert heads[0][0] == "budget" and "chunk" not in heads[0]
    assert "max_num_batched_tokens" in out
    assert "reading: TTFT 2 s, TPOT 0.1 s met by 99 % of requests in every row" in out


def test_prefix_caching_lists_print_on_and_off(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    args = ["--requests", "50", "--chunk-size", "512", "--prefix-caching", "on,off"]
    assert sim_cli.main(args) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.strip().startswith("512")]
    assert [row[1] for row in rows] == ["on", "off"]
    assert "True" not in out and "False" not in out


def test_simulate_help_names_every_term_of_the_linear_model(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        sim_cli.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for term in ("t_min", "c0", "c_tok", "c_attn", "c_kv", "c_chunk_sq", "--warmup", "--drain"):
        assert term in text


def test_search_title_is_one_line_when_piped(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--requests", "100", "--chunk-size", "512", "--slo-ttft", "2", "--workers", "1"]
    assert top_main(["search", *args]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("capacity search: synthetic chat workload, 100 requests")
    assert first.endswith("SLOs TTFT 2 s for 0.99 of requests")


# ---------------------------------------------------------------- capacity that adds up

SLO = {"slo_ttft_s": 2.0, "slo_tpot_s": 0.1}


def _capacity(requests: int, replicas: int = 1, router: str = "round-robin") -> float:
    (item,) = search(
        SyntheticWorkload(requests=requests),
        expand_serving_configs(chunk_sizes=[512]),
        replicas=[replicas],
        routers=[router],
        workers=1,
        **SLO,
    )
    capacity: float = item["capacity_rps"]
    return capacity


def test_capacity_is_the_same_at_2x_and_4x_the_requests() -> None:
    """The issue's configuration: a probe draws requests until its run is steady, so 400,
    800 and 1600 requests give one capacity (within the default precision, 2 %)."""
    base = _capacity(400)
    assert base > 0
    for requests in (800, 1600):
        assert _capacity(requests) == pytest.approx(base, rel=0.02)


@pytest.mark.parametrize("replicas", [2, 4])
def test_round_robin_replicas_never_exceed_n_times_one(replicas: int) -> None:
    """N round-robin replicas, no shared prefixes: at most N x one replica's capacity,
    plus the precision (before issue 24, two reached 3.8x one)."""
    one = _capacity(400)
    fleet = _capacity(400, replicas)
    assert fleet <= replicas * one * 1.02
    assert fleet >= replicas * one * 0.9  # and not far below: the fleet still adds up


def test_a_fleet_probe_draws_requests_per_replica() -> None:
    (item,) = search(
        SyntheticWorkload(requests=300),
        expand_serving_configs(chunk_sizes=[512]),
        replicas=[2],
        workers=1,
        **SLO,
    )
    requests = {p["run"]["requests"] for p in item["probes"] if "run" in p}
    assert not requests  # probes keep no run unless asked
    run = item["at_capacity"]
    assert run["requests"] % 600 == 0  # 2 x 300, doubled until steady
    assert run["overloaded"] is False and run["steady"]["long_enough"] is True
