"""Issue 24's usability points: the Python API's default scheduler, prefix identity in
traces, the serving run's progress bar, ``simulate``'s lists of ``--tp``/``--gpu``, and the
synthetic workload's mean lengths and distributions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chunked_prefill.cli import main
from chunked_prefill.sim import (
    SimConfig,
    TraceError,
    default_workload,
    expand_configs,
    expand_serving_configs,
    load_trace,
    simulate,
    simulate_serving,
)
from chunked_prefill.sim.serving import ServingSimConfig

WL = default_workload(60, rate=10.0, seed=2)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def one_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """The one error line of ``argv`` (exit status 2), without the program's prefix."""
    code, out, err = cli(capsys, *argv)
    assert code == 2, (out, err)
    (line,) = err.splitlines()
    prefix = f"chunked-prefill {argv[0]}: error: "
    assert line.startswith(prefix), line
    return line[len(prefix) :]


# ------------------------------------------------------------ simulate()'s scheduler


def test_simulate_defaults_to_the_serving_scheduler_as_the_cli() -> None:
    results = simulate(WL)
    assert [r.config for r in results] == expand_serving_configs()
    assert all(r.serving is not None for r in results)
    assert [r.to_dict() for r in results] == [
        r.to_dict() for r in simulate_serving(WL, results[0].config)
    ] + [r.to_dict() for r in simulate_serving(WL, [r.config for r in results[1:]])]


def test_simulate_keeps_the_planner_for_planner_configs() -> None:
    (planner,) = simulate(WL, SimConfig(chunk_size=512))
    assert planner.serving is None
    assert [r.serving for r in simulate(WL, scheduler="planner")] == [None] * 4
    assert [r.config for r in simulate(WL, scheduler="planner")] == expand_configs()
    (serving,) = simulate(WL, [ServingSimConfig(chunk_size=512)])
    assert serving.serving is not None


def test_simulate_scheduler_errors() -> None:
    with pytest.raises(
        ValueError, match=r"^scheduler must be 'serving', 'planner' or None, got 'x'$"
    ):
        simulate(WL, scheduler="x")
    with pytest.raises(
        ValueError,
        match=r"^record_steps needs scheduler='planner' \(the serving loop records no steps\)$",
    ):
        simulate(WL, record_steps=True)
    with pytest.raises(TypeError, match=r"^configs\[0\] must be a SimConfig"):
        simulate(WL, [ServingSimConfig()], scheduler="planner")


def test_simulate_serving_reports_progress_per_configuration() -> None:
    calls: list[tuple[int, int, int]] = []
    simulate_serving(
        WL,
        [ServingSimConfig(chunk_size=c) for c in (256, 512)],
        on_progress=lambda *a: calls.append(a),
    )
    assert calls == [(0, 0, 60), (0, 60, 60), (1, 0, 60), (1, 60, 60)]


# ------------------------------------------------------------ prefix identity in traces


def test_trace_prefix_tokens_column(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(
        "arrival_s,prompt_tokens,output_tokens,prefix_id,prefix_len\n0,200,5,a,64\n1,300,5,a,64\n2,50,5,,\n"
    )
    trace = load_trace(path)
    assert (trace.prefix_tokens, trace.group) == (64, (0, 0, -1))
    assert load_trace(path, prefix_tokens=32).prefix_tokens == 32
    (r,) = simulate_serving(trace, ServingSimConfig(chunk_size=512))
    assert r.serving is not None and r.serving.prefix_hit_rate == 64 / 550
    path.write_text(
        "arrival_s,prompt_tokens,output_tokens,prefix_id,prefix_tokens\n0,200,5,a,64\n1,300,5,a,65\n"
    )
    with pytest.raises(TraceError) as info:
        load_trace(path)
    assert str(info.value) == (
        f"{path}:3: field 'prefix_tokens': is 65, but line 2 gave 64: every row shares the same"
        " prefix length"
    )


# ------------------------------------------------------------ the serving run's progress bar


def on_terminal(*argv: str) -> tuple[int, str, str]:
    """Run ``chunked-prefill ARGV`` with stderr on a pseudo-terminal: its exit status,
    stdout and everything drawn on stderr."""
    pty = pytest.importorskip("pty")
    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "160"}
    for name in ("NO_COLOR", "TTY_COMPATIBLE", "FORCE_TERMINAL"):
        env.pop(name, None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "chunked_prefill", *argv],
        stdout=subprocess.PIPE,
        stderr=slave,
        env=env,
    )
    os.close(slave)
    drawn = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed its side
            break
        if not chunk:
            break
        drawn += chunk
    out, _ = proc.communicate()
    os.close(master)
    return proc.returncode, out.decode(), drawn.decode(errors="replace")


def test_serving_run_draws_a_progress_bar_on_a_terminal() -> None:
    argv = ["simulate", "--requests", "200", "--chunk-size", "512,none", "--json"]
    code, out, drawn = on_terminal(*argv)
    assert code == 0 and json.loads(out)[0]["requests"] == 200
    assert "chunk=512 budget=2048 prefills=4 running<=256" in drawn
    assert "chunk=none prefills=4 running<=256" in drawn
    assert drawn.count(" done ") == 2  # each line ends complete (then the bar is erased)
    code, out, drawn = on_terminal(*argv, "--quiet")
    assert code == 0 and json.loads(out)[0]["requests"] == 200
    assert drawn == ""


def test_serving_run_is_silent_off_a_terminal() -> None:
    argv = ["simulate", "--requests", "200", "--chunk-size", "512", "--json"]
    proc = subprocess.run(
        [sys.executable, "-m", "chunked_prefill", *argv], capture_output=True, text=True, check=True
    )
    assert proc.stderr == ""


# ------------------------------------------------------------ synthetic lengths


@pytest.mark.parametrize(
    ("dist", "prompt_mean", "output_mean"),
    [
        ("chat", 1006.072, 101.403),
        ("fixed", 1000.0, 100.0),
        ("uniform", 1002.9375, 99.789),
        ("exponential", 992.0065, 98.2475),
    ],
)
def test_input_and_output_len(dist: str, prompt_mean: float, output_mean: float) -> None:
    wl = default_workload(2000, input_len=1000, output_len=100, length_dist=dist)
    assert (sum(wl.prompt_tokens) / 2000, sum(wl.output_tokens) / 2000) == (
        prompt_mean,
        output_mean,
    )
    assert wl.arrival_s == default_workload(2000).arrival_s


def test_uniform_follows_vllm_bounds() -> None:
    wl = default_workload(
        5000, input_len=100, output_len=10, length_dist="uniform", range_ratio=0.25
    )
    assert (min(wl.prompt_tokens), max(wl.prompt_tokens)) == (75, 125)
    assert (min(wl.output_tokens), max(wl.output_tokens)) == (7, 13)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--range-ratio", "0.2"],
            "argument --range-ratio: applies to --length-dist uniform, not chat",
        ),
        (
            ["--input-len", "5", "--prompt-scale", "2"],
            "argument --prompt-scale: not with --input-len, which sets the mean length itself",
        ),
        (
            ["--range-ratio", "1", "--length-dist", "uniform"],
            "argument --range-ratio: expected a number in [0, 1), got '1'",
        ),
        (
            ["--trace", "examples/trace.csv", "--input-len", "3"],
            "--input-len applies to the synthetic workload, not to --trace",
        ),
    ],
)
def test_length_flag_errors(
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    assert one_error(capsys, ["simulate", *argv]) == message
    assert one_error(capsys, ["search", "--slo-ttft", "2", *argv]) == message
