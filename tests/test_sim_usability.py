"""Issue 24's usability points: the Python API's default scheduler, prefix identity in
traces, the serving run's progress bar, ``simulate``'s lists of ``--tp``/``--gpu``, and the
synthetic workload's mean lengths and distributions."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

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
from cli_capture import cli

WL = default_workload(60, rate=10.0, seed=2)


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
    # Each line ends complete (then the bar is erased); a busy machine may redraw a
    # finished line once more, so each label is looked for with its " done ", not counted.
    for label in ("chunk=512 budget=2048", "chunk=none prefills=4"):
        assert re.search(re.escape(label) + r"[^\r\n]* done ", drawn), label
    code, out, drawn = on_terminal(*argv, "--quiet")
    assert code == 0 and json.loads(out)[0]["requests"] == 200
    assert drawn == ""


def test_serving_run_is_silent_off_a_terminal() -> None:
    argv = ["simulate", "--requests", "200", "--chunk-size", "512", "--json"]
    proc = subprocess.run(
        [sys.executable, "-m", "chunked_prefill", *argv], capture_output=True, text=True, check=True
    )
    assert proc.stderr == ""


# ------------------------------------------------------------ simulate's engine lists

TP_ARGS = ["simulate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--requests", "50"]


def test_simulate_runs_every_tp_of_a_list(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, *TP_ARGS, "--tp", "1,2", "--chunk-size", "512,2048", "--json")
    assert code == 0
    rows = json.loads(out)
    assert [(r["engine"]["tp"], r["config"]["chunk_size"]) for r in rows] == [
        (1, 512), (1, 2048), (2, 512), (2, 2048),
    ]  # fmt: skip
    assert {r["engine"]["gpu"] for r in rows} == {"h100-sxm"}
    assert [r["engine"]["name"] for r in rows[::2]] == [
        "llama-3.1-8b on h100-sxm",
        "llama-3.1-8b on h100-sxm x TP 2",
    ]
    for tp, pair in ((1, rows[:2]), (2, rows[2:])):
        code, out, _ = cli(capsys, *TP_ARGS, "--tp", str(tp), "--chunk-size", "512,2048", "--json")
        assert code == 0 and json.loads(out) == pair  # each row is its single-TP run
    assert rows[0]["num_blocks"] == 28181 and rows[2]["num_blocks"] == 64021


def test_simulate_table_names_the_tp_and_gpu_that_differ(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = cli(capsys, *TP_ARGS, "--tp", "1,2", "--chunk-size", "512")
    assert code == 0
    head = next(line for line in out.splitlines() if "chunk" in line and "p99" in line)
    assert head.split()[:2] == ["TP", "chunk"]
    assert "engine: llama-3.1-8b on h100-sxm (roofline; 28181 KV blocks" in out
    assert "engine: llama-3.1-8b on h100-sxm x TP 2 (roofline; 64021 KV blocks" in out
    assert "TP=2 chunk=512" in out  # the reading line's labels
    argv = [*TP_ARGS[:4], "h100-sxm,a100", "--requests", "20", "--chunk-size", "512"]
    code, out, _ = cli(capsys, *argv, "--scheduler", "planner")
    assert code == 0
    head = next(line for line in out.splitlines() if "chunk" in line and "p99" in line)
    assert head.split()[:2] == ["GPU", "chunk"]
    assert "a100-80gb" in out and "TP" not in head


def test_simulate_leaves_out_a_tp_that_does_not_fit(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--model", "llama-3.1-70b", "--gpu", "a100-80gb", "--tp", "1,2"]
    code, out, _ = cli(capsys, *argv, "--requests", "20", "--chunk-size", "512")
    assert code == 0
    assert "note: left out, does not fit: llama-3.1-70b does not fit a100-80gb at TP 1" in out
    code, out, _ = cli(capsys, *argv, "--requests", "20", "--chunk-size", "512", "--json")
    assert [r["engine"]["tp"] for r in json.loads(out)] == [2]


def test_simulate_runs_every_engine_preset_of_a_list(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--engine", "llama2-7b-a100,llama2-7b-h100", "--requests", "20"]
    code, out, _ = cli(capsys, *argv, "--chunk-size", "512", "--json")
    assert code == 0
    assert [r["engine"]["name"] for r in json.loads(out)] == ["llama2-7b-a100", "llama2-7b-h100"]
    from chunked_prefill.sim.engine import ENGINE_PRESETS
    from chunked_prefill.sim.report import short_labels

    results = [
        simulate_serving(WL, ServingSimConfig(chunk_size=512), engine=ENGINE_PRESETS[name])[0]
        for name in ("llama2-7b-a100", "llama2-7b-h100")
    ]
    assert short_labels(results) == [
        "engine=llama2-7b-a100 chunk=512",
        "engine=llama2-7b-h100 chunk=512",
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--model", "llama-3.1-70b", "--gpu", "a100-80gb,l40s", "--tp", "1"],
            "arguments --model/--gpu/--tp: no combination fits (llama-3.1-70b does not fit"
            " a100-80gb at TP 1",
        ),
        ([*TP_ARGS[1:4], "h100-sxm,b300"], "argument --gpu: unknown GPU 'b300'"),
        ([*TP_ARGS[1:5], "--tp", "1,0"], "argument --tp: in the list"),
        (["--tp", "1,2"], "argument --tp: needs --model"),
        (["--engine", "llama2-7b-a100,gpt"], "argument --engine: in the list"),
        (
            ["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tp", "1,2", "--scheduler",
             "planner", "--chunk-size", "512", "--steps-csv", "steps.csv"],
            "argument --steps-csv: records one engine, got 2",
        ),
    ],
)  # fmt: skip
def test_simulate_engine_list_errors(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert one_error(capsys, ["simulate", *argv]).startswith(message)


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
