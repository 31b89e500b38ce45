"""Every bad input to the command line is one ``PROG: error:`` line and exit status 2.

The message names the flag, argument or ``FILE:LINE: field``, the value and the rule, and
it comes before anything is simulated. The library checks the CLI relies on are tested
here too: engine profiles, the step limit, the JSON report.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import chunked_prefill
from chunked_prefill.cli import build_parser, main
from chunked_prefill.sim import (
    EngineModel,
    ProfileError,
    SimConfig,
    StepLimitError,
    Workload,
    default_workload,
    load_profile,
    min_steps,
    simulate,
)
from chunked_prefill.sim.cli.simulate import planner as planner_cli
from chunked_prefill.sim.cli.simulate import serving as serving_cli
from chunked_prefill.sim.engine import MAX_COEFFICIENT_S
from chunked_prefill.sim.report import results_to_json


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# ------------------------------------------------------------------ engine profiles


@pytest.mark.parametrize(
    ("name", "text", "key"),
    [
        ("a.json", '{"preset": ["x"]}', "preset"),
        ("b.json", '{"preset": 3}', "preset"),
        ("c.json", '{"c0_s": ' + "9" * 400 + "}", "c0_s"),
        ("d.json", '{"c0_s": ' + "9" * 5000 + "}", "c0_s"),
        ("e.toml", "c_kv_s = " + "9" * 400 + "\n", "c_kv_s"),
        ("f.json", '{"c_attn_s": "fast"}', "c_attn_s"),
        ("g.json", '{"c_tok_s": true}', "c_tok_s"),
        ("h.json", '{"c_tok_s": 1e300}', "c_tok_s"),
        ("i.json", '{"t_min_s": NaN}', "t_min_s"),
        ("j.json", '{"name": {"x": 1}}', "name"),
        ("k.json", '{"c0_s": 0.001, "c0_s": 0.002}', "c0_s"),
        ("l.toml", "[engine]\npreset = 1.5\n", "preset"),
    ],
)
def test_profile_values_of_the_wrong_type_or_size_name_the_key(
    tmp_path: Path, name: str, text: str, key: str
) -> None:
    path = _write(tmp_path, name, text)
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    message = str(info.value)
    assert message.startswith(f"{path}: key {key!r}: ")
    assert len(message) < 300


def test_profile_rule_across_keys_names_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "zero.json", '{"t_min_s": 0, "c0_s": 0, "c_tok_s": 0}')
    with pytest.raises(ProfileError, match=f"^{path}: .*no duration"):
        load_profile(path)


def test_engine_coefficients_are_bounded() -> None:
    EngineModel(c_attn_s=MAX_COEFFICIENT_S)
    for bad in (MAX_COEFFICIENT_S * 2, math.inf, math.nan, -1.0, 10**400):
        with pytest.raises(ValueError, match="c_attn_s must be in"):
            EngineModel(c_attn_s=bad)


def test_largest_coefficients_keep_every_figure_finite() -> None:
    # Huge prompts under the largest coefficients: the table and --json agree.
    wl = Workload((0.0, 1.0), (2**40, 3), (2, 3))
    m = MAX_COEFFICIENT_S
    engine = EngineModel("huge", t_min_s=m, c0_s=m, c_tok_s=m, c_attn_s=m, c_kv_s=m)
    results = simulate(wl, SimConfig(None), engine=engine, backend="pure")
    results_to_json(results)
    assert math.isfinite(results[0].e2e_s.max or math.nan)


def test_json_writes_non_finite_figures_as_null() -> None:
    # A run whose span rounds to zero (one short step after an arrival at 2**53 s) has an
    # infinite throughput: the table prints inf, --json writes null.
    wl = Workload((float(2**53),), (1,), (1,))
    engine = EngineModel(t_min_s=1e-9, c0_s=0.0, c_tok_s=0.0, c_attn_s=0.0, c_kv_s=0.0)
    (result,) = simulate(wl, SimConfig(8), engine=engine, backend="pure")
    assert math.isinf(result.throughput_tok_s)
    assert '"throughput_tok_s": null' in results_to_json([result])


# ------------------------------------------------------------------ the step limit


def test_step_limit_refuses_before_running() -> None:
    wl = Workload((0.0, 0.5), (10**9, 100), (1, 2))
    cfg = SimConfig(256)
    steps, reason = min_steps(wl, cfg)
    assert steps == -(-(10**9) // 256) + 1 and "prefill chunks" in reason
    ran: list[int] = []
    with pytest.raises(StepLimitError) as info:
        simulate(wl, [SimConfig(None), cfg], max_steps=10_000, on_progress=lambda *a: ran.append(1))
    assert not ran  # nothing ran, not even the configuration that fits
    err = info.value
    assert (err.config, err.steps, err.limit, err.estimated) == (cfg, steps, 10_000, True)
    assert "needs at least" in str(err) and "10000 steps" in str(err)


def test_step_limit_stops_a_run_that_exceeds_it() -> None:
    # Arrivals spread over time: the bound from the workload is loose, the run is stopped.
    wl = default_workload(100)
    cfg = SimConfig(512)
    (result,) = simulate(wl, cfg, backend="pure")
    bound = min_steps(wl, cfg)[0]
    assert bound < result.steps - 1
    limit = result.steps - 1
    with pytest.raises(StepLimitError, match=f"reached the limit of {limit} steps") as info:
        simulate(wl, cfg, max_steps=limit, backend="pure")
    assert not info.value.estimated
    assert simulate(wl, cfg, max_steps=result.steps, backend="pure")[0].steps == result.steps


def test_every_configuration_is_checked_before_any_runs() -> None:
    wl = Workload((0.0,), (100,), (2,))
    ran: list[int] = []
    bad = SimConfig(512, token_budget=64, max_decode_tokens=128)
    with pytest.raises(ValueError, match=r"configuration chunk=512 budget=64 .*token_budget"):
        simulate(wl, [SimConfig(512), bad], on_progress=lambda *a: ran.append(1))
    assert not ran
    with pytest.raises(ValueError, match="chunk_size must be an int in"):
        SimConfig(2**64)


# ------------------------------------------------------------------ the command line

U64_OVER = str(2**64)


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exit_:  # argparse: --help, --version and its own errors
        code = exit_.code if isinstance(exit_.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def _one_error(
    capsys: pytest.CaptureFixture[str], argv: list[str], *needles: str
) -> tuple[str, str]:
    code, out, err = _cli(capsys, *argv)
    assert code == 2, (argv, out, err)
    lines = err.splitlines()
    assert len(lines) == 1, err
    prog = f"chunked-prefill {argv[0]}: error: " if argv[0] in ("plan", "simulate") else ""
    assert lines[0].startswith(prog or "chunked-prefill: error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert "Traceback" not in err
    return lines[0], out


@pytest.fixture
def no_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if anything is simulated: every error must come first."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("simulated before refusing the input")

    monkeypatch.setattr(planner_cli, "simulate", refuse)
    monkeypatch.setattr(serving_cli, "simulate_serving", refuse)


@pytest.mark.parametrize(
    "flag", ["--max-decode-tokens", "--chunk-size", "--token-budget", "--max-prefills-per-step"]
)
@pytest.mark.parametrize("command", ["simulate", "plan"])
def test_count_flags_above_u64(
    capsys: pytest.CaptureFixture[str], no_simulation: None, command: str, flag: str
) -> None:
    argv = [command, flag, U64_OVER] + (["100"] if command == "plan" else [])
    _one_error(capsys, argv, f"argument {flag}: ", repr(U64_OVER), "18446744073709551615")


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (["--seed", "-1"], ["argument --seed: ", "'-1'", "[0, "]),
        (["--seed", "x"], ["argument --seed: ", "'x'"]),
        (["--requests", "0"], ["argument --requests: ", "'0'", "[1, 10000000]"]),
        (["--requests", "9" * 5000], ["argument --requests: ", "5000 characters"]),
        (["--rate", "0"], ["argument --rate: ", "'0'"]),
        (["--rate", "nan"], ["argument --rate: ", "'nan'"]),
        (["--prompt-scale", "0"], ["argument --prompt-scale: ", "'0'"]),
        (["--prompt-scale", "1e20"], ["argument --prompt-scale: ", "1e+20", "2**63 - 1"]),
        (["--output-scale", "1e300"], ["argument --output-scale: ", "1e+300"]),
        (
            ["--prompt-scale", "1e6", "--scheduler", "planner"],
            ["argument --max-steps: ", "needs at least", "10000000"],
        ),
        (
            ["--prompt-scale", "1e6"],
            ["--chunk-size 512 --token-budget 512", "request ", "never run", "--num-blocks"],
        ),
        (["--c-attn", "1e300"], ["argument --c-attn: ", "'1e300'", "[0, 3600]"]),
        (["--t-min", "-1"], ["argument --t-min: ", "'-1'"]),
        (["--stall-threshold", "inf"], ["argument --stall-threshold: ", "'inf'"]),
        (["--chunk-size", "512,zero"], ["argument --chunk-size: ", "'zero'", "'512,zero'"]),
        (["--chunk-size", "512,,none"], ["argument --chunk-size: ", "empty item"]),
        (["--max-running", "0"], ["argument --max-running: ", "'0'"]),
        (["--max-steps", "0"], ["argument --max-steps: ", "'0'"]),
        (
            ["--token-budget", "64", "--scheduler", "planner"],
            ["--token-budget 64 --max-decode-tokens 128", "greater"],
        ),
        (["--token-budget", "64"], ["--token-budget 64", "max_running", "token_budget"]),
        (["--max-decode-tokens", "64"], ["argument --max-decode-tokens: ", "planner"]),
        (["--scheduler", "planner", "--num-blocks", "64"], ["argument --num-blocks: ", "serving"]),
        (["--scheduler", "planner", "--slo-ttft", "1"], ["argument --slo-ttft: ", "serving"]),
        (["--num-blocks", "0"], ["argument --num-blocks: ", "'0'"]),
        (["--num-blocks", "8"], ["--num-blocks 8", "request ", "never run"]),
        (["--watermark", "1"], ["argument --watermark: ", "'1'", "[0, 1)"]),
        (["--prefix-caching", "maybe"], ["argument --prefix-caching: ", "'maybe'"]),
        (["--gpu-memory-utilization", "0"], ["argument --gpu-memory-utilization: ", "'0'"]),
        (["--gpu-memory-utilization", "0.1"], ["no KV-cache block fits", "--num-blocks"]),
        (["--slo-ttft", "0"], ["argument --slo-ttft: ", "'0'"]),
        (["--slo-tbt", "nan"], ["argument --slo-tbt: ", "'nan'"]),
        (["--scheduler", "fifo"], ["argument --scheduler: ", "'fifo'"]),
        (["--turns", "0"], ["argument --turns: ", "'0'"]),
        (["--max-steps", "1000"], ["argument --max-steps: ", "needs at least", "decode steps"]),
        (["--prefix-tokens", "-1"], ["argument --prefix-tokens: ", "'-1'"]),
        (["--prefix-groups", "4"], ["argument --prefix-groups: ", "--prefix-tokens"]),
        (["--scheduler", "planner", "--turns", "2"], ["argument --turns: ", "serving"]),
        (["--trace", "missing.csv", "--turns", "3"], ["--turns", "--trace"]),
        (["--t-min", "0", "--c0", "0", "--c-tok", "0"], ["--t-min", "no duration"]),
        (["--trace", "missing.csv", "--seed", "3"], ["--seed", "--trace"]),
        (["--backend", "java"], ["argument --backend: ", "'java'"]),
    ],
)
def test_simulate_flag_errors(
    capsys: pytest.CaptureFixture[str], no_simulation: None, argv: list[str], needles: list[str]
) -> None:
    _one_error(capsys, ["simulate", *argv], *needles)


def test_unknown_flag_is_one_line_from_the_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _cli(capsys, "simulate", "--no-such-flag")
    assert code == 2
    assert err.splitlines() == [
        "chunked-prefill simulate: error: unrecognized arguments: --no-such-flag"
    ]


def test_plot_path_is_checked_before_simulating(
    capsys: pytest.CaptureFixture[str], no_simulation: None, tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")
    missing = tmp_path / "no" / "such" / "folder" / "cdf.png"
    _one_error(capsys, ["simulate", "--plot", str(missing)], "argument --plot: ", "does not exist")
    _one_error(capsys, ["simulate", "--plot", str(tmp_path / "cdf.xyz")], "'.xyz'", ".png")
    bare = tmp_path / "cdf"
    _one_error(capsys, ["simulate", "--plot", str(bare)], "no suffix", str(bare))
    folder = tmp_path / "d.png"
    folder.mkdir()
    _one_error(capsys, ["simulate", "--plot", str(folder)], "is a folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.png"]


def test_plot_without_matplotlib_names_the_extra(
    capsys: pytest.CaptureFixture[str], no_simulation: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    _one_error(
        capsys,
        ["simulate", "--plot", "x.png"],
        "install the plot extra: pip install '.[plot]' from a checkout, or"
        " pip install 'chunked-prefill[plot]'",
    )


def test_bad_trace_and_profile_rows_are_one_error_line(
    capsys: pytest.CaptureFixture[str], no_simulation: None, tmp_path: Path
) -> None:
    trace = _write(
        tmp_path, "t.csv", "arrival_s,prompt_tokens,output_tokens\n0,5,1\n0,9223372036854775808,1\n"
    )
    _one_error(capsys, ["simulate", "--trace", str(trace)], f"{trace}:3: field 'prompt_tokens'")
    profile = _write(tmp_path, "p.json", '{"preset": ["x"]}')
    _one_error(capsys, ["simulate", "--profile", str(profile)], f"{profile}: key 'preset'")


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (["--token-budget", "xyz", "10"], ["argument --token-budget: ", "'xyz'", "'none'"]),
        (["--chunk-size", "0", "10"], ["argument --chunk-size: ", "'0'"]),
        (["0"], ["argument TOKENS: ", "'0'"]),
        (["10", "--decode", "-3"], ["argument --decode: ", "'-3'"]),
        (["10", "--token-budget", "64"], ["--token-budget 64", "token_budget must be greater"]),
        (["10", "--max-prefills-per-step", "2"], ["max_prefills_per_step above 1"]),
        ([], ["the following arguments are required: TOKENS"]),
    ],
)
def test_plan_errors(
    capsys: pytest.CaptureFixture[str], argv: list[str], needles: list[str]
) -> None:
    _one_error(capsys, ["plan", *argv], *needles)


# ------------------------------------------------------------------ a newcomer's first hour


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, "--version")
    assert code == 0
    assert out.startswith(f"chunked-prefill {chunked_prefill.__version__}")


def test_python_dash_m_runs_the_cli() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "chunked_prefill", "plan", "10", "--token-budget", "xyz"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2
    assert run.stderr.splitlines() == [
        "chunked-prefill plan: error: argument --token-budget: expected a whole number in"
        " [1, 18446744073709551615] or 'none', got 'xyz'"
    ]
    ok = subprocess.run(
        [sys.executable, "-m", "chunked_prefill", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0 and ok.stdout.startswith("chunked-prefill ")


def test_plan_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, "plan", "700", "300", "--chunk-size", "512", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["config"]["chunk_size"] == 512
    assert [(r["request"], r["start"], r["tokens"], r["last_chunk"]) for r in doc["rows"]] == [
        (0, 0, 512, False),
        (0, 512, 188, True),
        (1, 0, 300, True),
    ]


def test_plan_streams_a_huge_plan() -> None:
    # 10**12 one-token chunks: the first rows come out at once, and closing the pipe
    # ends the run quietly.
    proc = subprocess.Popen(
        [sys.executable, "-m", "chunked_prefill", "plan", str(10**12), "--chunk-size", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        head = [proc.stdout.readline() for _ in range(6)]
        assert head[0].startswith("Config(chunk_size=1,")
        assert head[3].split() == ["0", "0", "0", "1", "0"]
        proc.stdout.close()
        assert proc.wait(timeout=60) == 0
        assert proc.stderr.read() == ""
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("command", ["plan", "simulate"])
def test_help_shows_every_option_with_its_default(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    code, out, _ = _cli(capsys, command, "--help")
    assert code == 0
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[
        command
    ]
    for action in sub._actions:
        for flag in action.option_strings:
            assert flag in out
        if action.default not in (None, False, argparse.SUPPRESS) and action.option_strings:
            assert action.help and "default" in action.help, action.option_strings
    text = " ".join(out.split())
    if command == "simulate":
        assert "ITL" in text
        assert "only when stderr is a terminal" in text


def test_setup_lines_come_before_the_run(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    real = planner_cli.simulate
    real_serving = serving_cli.simulate_serving

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(capsys.readouterr().out)
        return real(*args, **kwargs)

    def spy_serving(*args: Any, **kwargs: Any) -> Any:
        seen.append(capsys.readouterr().out)
        return real_serving(*args, **kwargs)

    monkeypatch.setattr(planner_cli, "simulate", spy)
    monkeypatch.setattr(serving_cli, "simulate_serving", spy_serving)
    argv = ["simulate", "--requests", "50", "--chunk-size", "512"]
    code, out, _ = _cli(capsys, *argv, "--scheduler", "planner")
    assert code == 0
    assert "workload:" in seen[0] and "engine:" in seen[0]
    assert "TTFT" in out and "vLLM's ITL" in " ".join(out.split())
    code, out, _ = _cli(capsys, *argv)
    assert code == 0
    assert "workload:" in seen[1] and "engine:" in seen[1] and "KV cache:" in seen[1]
    assert "7353 blocks of 16 tokens" in " ".join(seen[1].split()) and "TTFT" in out


def test_flag_parsers_are_reusable() -> None:
    # The helpers later flags (--num-blocks, --watermark, ...) are meant to use.
    from chunked_prefill._args import float_flag, int_flag, list_of

    blocks = list_of(int_flag(1, 2**64 - 1))
    assert blocks("16, 32") == [16, 32]
    watermark = list_of(float_flag(0.0, 1.0, high_open=True, what="a fraction"))
    assert watermark("0,0.01") == [0.0, 0.01]
    for parse, text, rule in [
        (blocks, "16,0", "[1, 18446744073709551615]"),
        (blocks, "9" * 5000, "5000 characters"),
        (watermark, "1", "a fraction in [0, 1)"),
        (watermark, "nan", "a fraction in [0, 1)"),
    ]:
        with pytest.raises(argparse.ArgumentTypeError, match=re.escape(rule)):
            parse(text)


@pytest.mark.parametrize("command", ["simulate", "search", "plan", "fit", "engines"])
def test_a_subcommands_parser_alone_parses_as_the_whole_parser(command: str) -> None:
    """``main`` builds only the named subcommand's parser: it has that subcommand alone,
    with the same options, defaults and help as in the whole parser."""
    alone = build_parser(command)
    whole = build_parser()
    (only,) = alone._subparsers._group_actions  # type: ignore[union-attr]
    (every,) = whole._subparsers._group_actions  # type: ignore[union-attr]
    assert list(only.choices) == [command]
    assert list(every.choices) == ["simulate", "search", "plan", "fit", "engines"]
    assert only.choices[command].format_help() == every.choices[command].format_help()
    argv = {"fit": [command, "x.csv"], "plan": [command, "5"]}.get(command, [command])
    assert vars(alone.parse_args(argv)) == vars(whole.parse_args(argv))


def test_a_subcommand_imports_no_other_subcommands_module() -> None:
    code = (
        "import sys; from chunked_prefill.cli import main; main(['plan', '5']);"
        " print(sorted(m for m in sys.modules if m.startswith('chunked_prefill.sim.cli.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.splitlines()[-1] == "[]"
