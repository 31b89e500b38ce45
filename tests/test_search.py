"""Capacity search: the bisection on fake simulators (a known threshold, a non-monotone
attainment), the search on the real simulator (the same result on 1 and 2 workers, the
reproducing ``simulate`` command), rescaled workloads, and the errors of ``search``."""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chunked_prefill.sim import (
    ServingSimConfig,
    SyntheticWorkload,
    default_workload,
    load_trace,
    search,
)
from chunked_prefill.sim.cli.search import drive as search_cli_module
from chunked_prefill.sim.search import runners as search_runners
from chunked_prefill.sim.search.rate import BRACKET_STEPS, RateSearch, bisection_steps
from cli_capture import cli as _cli

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "examples" / "trace.csv"
SLO = ["--slo-ttft", "2", "--slo-tbt", "0.1"]


def _run(meets: Callable[[float], bool], start: float, precision: float = 0.02) -> RateSearch:
    s = RateSearch(start, precision)
    while (rate := s.next_rate()) is not None:
        s.record(rate, meets(rate))
    return s


def _edge_holds(s: RateSearch) -> None:
    """Every probe that met is at or below the capacity, every one that failed above it,
    the lowest failing one within the precision."""
    met = [r for r, m in s.probes if m]
    failed = [r for r, m in s.probes if not m]
    assert all(r <= s.capacity for r in met)
    assert all(r > s.capacity for r in failed)
    if met and failed:
        assert s.capacity == max(met)
        assert min(failed) <= s.capacity * (1 + s.precision)


@given(
    threshold=st.floats(0.01, 1000.0),
    start=st.floats(0.1, 100.0),
    precision=st.sampled_from([0.001, 0.02, 0.1, 0.5]),
)
def test_bisection_finds_a_known_threshold_within_the_precision(
    threshold: float, start: float, precision: float
) -> None:
    s = _run(lambda rate: rate <= threshold, start, precision)
    _edge_holds(s)
    if threshold < start / 2**BRACKET_STEPS:
        assert s.capacity == 0.0
    elif threshold >= start * 2**BRACKET_STEPS:
        assert s.capped and s.capacity == start * 2**BRACKET_STEPS
    else:
        assert s.capacity <= threshold < s.capacity * (1 + precision)
        assert not s.capped


def test_bisection_probe_sequence_is_exact() -> None:
    s = _run(lambda rate: rate <= 10.0, 4.0, 0.02)
    rates = [r for r, _ in s.probes]
    assert rates[:3] == [4.0, 8.0, 16.0]
    assert rates[3] == math.sqrt(8.0 * 16.0)
    assert len(rates) == 3 + bisection_steps(8.0, 16.0, 0.02)
    assert 10.0 / 1.02 <= s.capacity <= 10.0


def test_non_monotone_attainment_gives_the_edge_the_sequence_reaches() -> None:
    # Meets below 3 req/s, fails in [3, 5], meets again in (5, 7), fails from 7.
    def meets(rate: float) -> bool:
        return rate < 3 or 5 < rate < 7

    low = _run(meets, 4.0)  # 4 fails, 2 meets: the edge at 3
    assert 3 / 1.02 <= low.capacity < 3
    _edge_holds(low)
    high = _run(meets, 6.0)  # 6 meets, 12 fails: the edge at 7
    assert 7 / 1.02 <= high.capacity < 7
    _edge_holds(high)
    # From 2.5 the doubling jumps to 5 (fails) and never sees (5, 7).
    skipped = _run(meets, 2.5)
    assert 3 / 1.02 <= skipped.capacity < 3
    _edge_holds(skipped)


def test_nothing_meets_gives_capacity_zero_and_no_run(monkeypatch: pytest.MonkeyPatch) -> None:
    s = _run(lambda rate: False, 1.0)
    assert s.capacity == 0.0 and len(s.probes) == BRACKET_STEPS + 1
    items = search(SyntheticWorkload(50), slo_ttft_s=1e-9, workers=1, precision=0.5)
    assert items[0]["capacity_rps"] == 0.0 and items[0]["at_capacity"] is None


def test_search_uses_the_fake_non_monotone_simulator(monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver feeds each point its own answers: points with different fake
    thresholds, one non-monotone, get their own capacities, ranked."""
    edges = {0: lambda r: r <= 2.0, 1: lambda r: r < 3 or 5 < r < 7, 2: lambda r: r <= 9.0}

    def fake(ctx: Any, index: int, rate: float) -> Any:
        return index, rate, edges[index](rate), {"rate": rate}

    monkeypatch.setattr(search_runners, "run_probe", fake)
    configs = [ServingSimConfig(chunk_size=c) for c in (128, 256, 512)]
    items = search(configs=configs, slo_ttft_s=1.0, workers=1, start_rate=6.0)
    assert [it["config"]["chunk_size"] for it in items] == [512, 256, 128]
    caps = [it["capacity_rps"] for it in items]
    assert 9 / 1.02 <= caps[0] <= 9 and 7 / 1.02 <= caps[1] < 7 and 2 / 1.02 <= caps[2] <= 2
    assert items[1]["at_capacity"] == {"rate": caps[1]}
    assert items[1]["probes"][:2] == [
        {"rate_rps": 6.0, "meets_slo": True},
        {"rate_rps": 12.0, "meets_slo": False},
    ]


# ------------------------------------------------------------------ the real simulator


GRID = ["--requests", "200", "--chunk-size", "256,none", "--max-running", "64,256", *SLO]


def test_same_json_on_one_and_two_workers(capsys: pytest.CaptureFixture[str]) -> None:
    code, one, err = _cli(capsys, "search", *GRID, "--workers", "1", "--json")
    assert code == 0, err
    code, two, err = _cli(capsys, "search", *GRID, "--workers", "2", "--json")
    assert code == 0, err
    assert one == two
    items = json.loads(one)
    assert len(items) == 4
    caps = [it["capacity_rps"] for it in items]
    assert caps == sorted(caps, reverse=True) and caps[0] > 0
    for it in items:
        assert set(it["config"]) >= {"chunk_size", "replicas", "router", "engine"}
        assert it["config"]["replicas"] == 1 and it["config"]["router"] == "round-robin"
        assert [set(p) for p in it["probes"]] == [{"rate_rps", "meets_slo"}] * len(it["probes"])
        assert it["at_capacity"]["slo_attainment"] >= 0.99


def _reproduce(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    """The table's command line reproduces the best run at capacity, byte for byte."""
    code, out, err = _cli(capsys, "search", *argv, "--workers", "1", "--json")
    assert code == 0, err
    best = json.loads(out)[0]
    code, table, err = _cli(capsys, "search", *argv, "--workers", "1")
    assert code == 0, err
    line = next(x for x in table.splitlines() if x.startswith("chunked-prefill simulate "))
    words = shlex.split(line)
    assert words[words.index("--rate") + 1] == repr(best["capacity_rps"])
    code, out, err = _cli(capsys, *words[1:], "--json")
    assert code == 0, err
    assert json.loads(out) == [best["at_capacity"]]


def test_best_command_reproduces_the_run_at_capacity(capsys: pytest.CaptureFixture[str]) -> None:
    _reproduce(capsys, ["--requests", "150", "--seed", "3", "--chunk-size", "256,512", *SLO])


def test_trace_command_reproduces_the_run_at_capacity(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--trace", str(TRACE), "--chunk-size", "256", "--engine", "llama2-7b-h100", *SLO]
    _reproduce(capsys, [*argv, "--slo-tpot", "0.05", "--prompt-scale", "2", "--c-kv", "2e-7"])


def test_fleet_grid_reproduces_its_best_run(capsys: pytest.CaptureFixture[str]) -> None:
    """Replicas and routers are axes of the grid; the capacity and GPUs are the fleet's,
    and the best fleet's command line carries --replicas and --router."""
    argv = ["--requests", "200", "--chunk-size", "512", "--replicas", "1,2"]
    argv += ["--router", "round-robin,least-loaded", "--rank-by", "per-gpu", *SLO]
    code, out, err = _cli(capsys, "search", *argv, "--workers", "1", "--json")
    assert code == 0, err
    items = json.loads(out)
    fleets = [(it["config"]["replicas"], it["config"]["router"]) for it in items]
    # One replica has nothing to route: searched once, with the first router.
    assert sorted(fleets) == [(1, "round-robin"), (2, "least-loaded"), (2, "round-robin")]
    per_gpu = [it["capacity_per_gpu_rps"] for it in items]
    assert per_gpu == sorted(per_gpu, reverse=True)
    for it in items:
        assert it["gpus"] == it["config"]["replicas"]
        assert it["capacity_per_gpu_rps"] == it["capacity_rps"] / it["gpus"]
        assert it["at_capacity"]["config"]["replicas"] == it["config"]["replicas"]
    two = max(it["capacity_rps"] for it in items if it["config"]["replicas"] == 2)
    one = max(it["capacity_rps"] for it in items if it["config"]["replicas"] == 1)
    assert two > one
    _reproduce(
        capsys,
        [
            "--requests",
            "200",
            "--chunk-size",
            "512",
            "--replicas",
            "2",
            *SLO,
            "--router",
            "least-loaded",
        ],
    )


def test_gpu_and_tp_lists_are_engines_of_the_grid(capsys: pytest.CaptureFixture[str]) -> None:
    """--model on each --gpu at each --tp: one roofline engine per combination that fits
    (Llama-3.1-70B's 141 GB of weights fit neither one H100 nor one H200), GPUs per
    replica = TP, and the best one's command line selects its roofline."""
    argv = ["--requests", "120", "--chunk-size", "512", "--model", "llama-3.1-70b"]
    argv += ["--gpu", "h100-sxm,h200", "--tp", "1,4", *SLO]
    code, out, err = _cli(capsys, "search", *argv, "--workers", "1", "--json")
    assert code == 0, err
    items = json.loads(out)
    engines = sorted((it["config"]["engine"], it["gpus"]) for it in items)
    assert engines == [
        ("llama-3.1-70b on h100-sxm x TP 4", 4),
        ("llama-3.1-70b on h200 x TP 4", 4),
    ]
    _reproduce(capsys, argv)


def test_dtype_flags_travel_to_the_engines_and_the_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--quantization fp8 halves Llama-3.1-70B's weights: they fit one H100 (141 GB in
    bf16 do not), not one L40S; the engines are named by their dtypes, and the best command
    line keeps the flags."""
    argv = ["--requests", "80", "--chunk-size", "512", "--model", "llama-3.1-70b"]
    argv += ["--gpu", "h100-sxm,l40s", "--kv-cache-dtype", "fp8", "--quantization", "fp8"]
    argv += ["--slo-ttft", "5", "--slo-tbt", "0.5"]
    code, out, err = _cli(capsys, "search", *argv, "--workers", "1", "--json")
    assert code == 0, err
    engines = sorted(it["config"]["engine"] for it in json.loads(out))
    assert engines == ["llama-3.1-70b (fp8 weights, fp8 KV) on h100-sxm"]
    _reproduce(capsys, argv)
    code, _, err = _cli(capsys, "search", "--requests", "80", "--kv-cache-dtype", "fp8", *SLO)
    assert code == 2
    assert err == "chunked-prefill search: error: argument --kv-cache-dtype: needs --model\n"


def test_table_ranks_and_names_the_best(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--requests", "100", "--chunk-size", "256,none", "--gpu-cost", "2", *SLO]
    code, out, err = _cli(capsys, "search", *argv, "--workers", "1")
    assert code == 0, err
    assert "capacity" in out and "req per" in out and "best: " in out
    assert "2 configuration(s)" in out and "1 worker(s)" in out


def test_plot_draws_the_search(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    path = tmp_path / "search.png"
    argv = ["--requests", "100", "--chunk-size", "256,512", *SLO, "--workers", "1"]
    code, out, err = _cli(capsys, "search", *argv, "--plot", str(path), "--json")
    assert code == 0, err
    assert path.stat().st_size > 10_000
    assert all("run" not in p for it in json.loads(out) for p in it["probes"])


def test_python_api_returns_plain_data() -> None:
    items = search(
        SyntheticWorkload(100),
        [ServingSimConfig(chunk_size=256)],
        engines=["llama2-7b-h100"],
        slo_ttft_s=2.0,
        slo_tbt_s=0.1,
        workers=1,
        gpu_cost=2.0,
    )
    (item,) = items
    assert json.loads(json.dumps(item)) == item
    assert item["config"]["engine"] == "llama2-7b-h100" and item["gpus"] == 1
    assert item["requests_per_dollar"] == item["capacity_rps"] * 3600 / 2.0


# ------------------------------------------------------------------ rescaled workloads


def test_synthetic_workload_at_a_rate_is_simulate_s() -> None:
    assert SyntheticWorkload(300, seed=4).at_rate(7.5) == default_workload(300, rate=7.5, seed=4)


def test_trace_at_a_rate_keeps_order_and_gaps() -> None:
    trace = load_trace(TRACE)
    fast = trace.at_rate(trace.mean_rate * 2)
    assert math.isclose(fast.mean_rate, trace.mean_rate * 2, rel_tol=1e-12)
    assert fast.prompt_tokens == trace.prompt_tokens
    first = min(trace.arrival_s)
    for a, b in zip(trace.arrival_s, fast.arrival_s):
        assert math.isclose(b - first, (a - first) / 2, rel_tol=1e-12, abs_tol=1e-12)
    with pytest.raises(ValueError, match="rate must be"):
        trace.at_rate(0.0)
    with pytest.raises(ValueError, match="span no time"):
        trace.head(1).at_rate(1.0)


# ------------------------------------------------------------------ errors


@pytest.fixture
def no_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if anything is simulated: every error must come first."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("searched before refusing the input")

    monkeypatch.setattr(search_cli_module, "search", refuse)


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        ([], ["give at least one SLO", "--slo-ttft"]),
        ([*SLO, "--attainment", "0"], ["argument --attainment: ", "'0'", "(0, 1]"]),
        ([*SLO, "--attainment", "1.5"], ["argument --attainment: ", "'1.5'"]),
        ([*SLO, "--precision", "0"], ["argument --precision: ", "'0'"]),
        ([*SLO, "--precision", "nan"], ["argument --precision: ", "'nan'"]),
        ([*SLO, "--workers", "0"], ["argument --workers: ", "'0'"]),
        ([*SLO, "--replicas", "2,0"], ["argument --replicas: ", "'0'", "[1, 4096]"]),
        ([*SLO, "--router", "random"], ["argument --router: ", "'random'", "least-loaded"]),
        ([*SLO, "--engine", "llama2-7b-a100,gpt"], ["argument --engine: ", "'gpt'"]),
        ([*SLO, "--gpu-cost", "-1"], ["argument --gpu-cost: ", "'-1'"]),
        ([*SLO, "--rank-by", "luck"], ["argument --rank-by: ", "'luck'"]),
        ([*SLO, "--rate", "0"], ["argument --rate: ", "'0'"]),
        ([*SLO, "--num-blocks", "8"], ["--num-blocks 8", "never run"]),
        ([*SLO, "--token-budget", "64"], ["--token-budget 64", "token_budget"]),
        ([*SLO, "--prefix-groups", "4"], ["argument --prefix-groups: ", "--prefix-tokens"]),
        ([*SLO, "--trace", "missing.csv"], ["missing.csv", "cannot be read"]),
        ([*SLO, "--trace", str(TRACE), "--seed", "3"], ["--seed", "--trace"]),
        ([*SLO, "--plot", "x.xyz"], ["argument --plot: ", "'.xyz'"]),
        ([*SLO, "--max-steps", "100"], ["argument --max-steps: ", "needs at least"]),
        ([*SLO, "--gpu", "h100-sxm"], ["argument --gpu: needs --model"]),
        ([*SLO, "--tp", "1,2"], ["argument --tp: needs --model"]),
        ([*SLO, "--model", "llama-3.1-8b"], ["argument --model: needs --gpu"]),
        (
            [*SLO, "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "llama2-7b-a100"],
            ["argument --engine: not with --model"],
        ),
        (
            [*SLO, "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tp", "0"],
            ["argument --tp: ", "'0'"],
        ),
        ([*SLO, "--model", "gpt-9", "--gpu", "h100-sxm"], ["argument --model/--gpu: ", "gpt-9"]),
        (
            [*SLO, "--model", "llama-3.1-70b", "--gpu", "l40s", "--tp", "1,2"],
            ["no combination fits", "l40s at TP 1"],
        ),
    ],
)
def test_search_flag_errors(
    capsys: pytest.CaptureFixture[str], no_search: None, argv: list[str], needles: list[str]
) -> None:
    code, out, err = _cli(capsys, "search", *argv)
    assert code == 2, (argv, out, err)
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("chunked-prefill search: error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert out == ""


def test_trace_whose_arrivals_span_no_time_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_search: None
) -> None:
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,3\n0,20,2\n")
    code, _, err = _cli(capsys, "search", *SLO, "--trace", str(path))
    assert code == 2 and err.startswith("chunked-prefill search: error: argument --trace: ")
    assert "span no time" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "give at least one SLO"),
        ({"slo_ttft_s": 1.0, "attainment": 0.0}, "attainment must be a fraction in (0, 1]"),
        ({"slo_ttft_s": 1.0, "precision": 2.0}, "precision must be a fraction in (0, 1]"),
        ({"slo_ttft_s": 1.0, "replicas": [0]}, "replicas must be between 1 and 4096, got 0"),
        ({"slo_ttft_s": 1.0, "routers": ["x"]}, "router must be one of"),
        ({"slo_ttft_s": 1.0, "engines": ["gpt"]}, "unknown engine preset 'gpt'"),
        ({"slo_ttft_s": 1.0, "rank_by": "x"}, "rank_by must be one of"),
        ({"slo_ttft_s": 1.0, "start_rate": -1.0}, "start_rate must be"),
        ({"slo_ttft_s": 1.0, "workers": 0}, "workers must be an int >= 1"),
        ({"slo_tbt_s": math.nan}, "slo_tbt_s must be a finite number"),
    ],
)
def test_python_api_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as info:
        search(SyntheticWorkload(10), **kwargs)
    assert message in str(info.value)


def _stat(pid: int) -> tuple[str, int] | None:
    """Process ``pid``'s state letter and parent pid, from /proc (None once it is gone)."""
    try:
        state, ppid = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[:2]
    except OSError:
        return None
    return state, int(ppid)


def _alive(pids: set[int]) -> set[int]:
    """Those of ``pids`` still running (zombies count as gone)."""
    return {pid for pid in pids if (stat := _stat(pid)) is not None and stat[0] != "Z"}


def _children(pid: int) -> set[int]:
    """Live processes whose parent is ``pid``."""
    pids = {int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()}
    return {p for p in _alive(pids) if (stat := _stat(p)) is not None and stat[1] == pid}


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
def test_sigterm_stops_the_search_and_its_workers() -> None:
    """SIGTERM ends `search` with status 143 and takes its worker processes with it (the
    default action left them running)."""
    import signal
    import subprocess
    import sys
    import time

    argv = "search --requests 20000 --chunk-size 256,512,1024,2048 --slo-ttft 2 --workers 2"
    cmd = [sys.executable, "-m", "chunked_prefill.cli", *argv.split()]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while len(workers := _children(proc.pid)) < 2 and time.monotonic() < deadline:
            assert proc.poll() is None, "the search ended before its workers started"
            time.sleep(0.1)
        assert len(workers) >= 2
        time.sleep(0.5)  # let them start probing
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 10
        while _alive(workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _alive(workers) == set()
    finally:
        proc.kill()
        for pid in _alive(_children(proc.pid)):
            subprocess.run(["kill", "-9", str(pid)], check=False)


class _RecordingRunner:
    """A runner whose probes meet the SLOs below rate 10; it records how it was closed."""

    def __init__(self) -> None:
        self.queue: list[tuple[int, float]] = []
        self.closed: list[bool] = []

    def submit(self, index: int, rate: float) -> None:
        self.queue.append((index, rate))

    def wait(self) -> list[tuple[int, float, bool, dict[str, Any]]]:
        index, rate = self.queue.pop(0)
        return [(index, rate, rate < 10, {})]

    def close(self, *, abandon: bool = False) -> None:
        self.closed.append(abandon)


def test_an_interrupted_search_abandons_its_runner() -> None:
    """An exception out of a search (Ctrl-C's `KeyboardInterrupt`, here raised by the
    progress callback) closes the runner with `abandon`: its workers are stopped, not
    awaited; a search that ends closes it the usual way."""
    from chunked_prefill.sim.search.capacity import _drive

    def interrupt(done: int, total: int) -> None:
        raise KeyboardInterrupt

    runner = _RecordingRunner()
    with pytest.raises(KeyboardInterrupt):
        _drive(runner, [RateSearch(6.0, 0.1)], interrupt)
    assert runner.closed == [True]
    runner = _RecordingRunner()
    (found,) = _drive(runner, [RateSearch(6.0, 0.1)], None)
    assert runner.closed == [False] and min(found) == 6.0
