"""Adversarial command lines (issue 21, items 11-15 and 17): every one is either a run (exit
0) or one line ``chunked-prefill COMMAND: error: ...`` naming the flag, key or file, and exit
status 2; never a traceback, a warning or an overflow from a figure derived from the flags."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunked_prefill.cli import build_parser, main
from chunked_prefill.sim import Workload
from chunked_prefill.sim.catalog import EngineRangeError, engine_for
from chunked_prefill.sim.cli.flags import scheduler as scheduler_flags
from chunked_prefill.sim.cli.simulate import planner as planner_cli
from chunked_prefill.sim.cli.simulate import serving as serving_cli
from chunked_prefill.sim.runs import planner as runs_planner
from chunked_prefill.sim.runs import serving as runs_serving
from chunked_prefill.sim.runs.serving_loop import SimLoopError, check_fits

U64_MAX = 2**64 - 1

CONFIG = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
}
"""The keys of Llama-3.1-8B's config.json that the roofline reads."""


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exit_:  # argparse's own errors
        code = exit_.code if isinstance(exit_.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def _error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The one error line of ``argv``, checked: exit 2, the command's prog, nothing else."""
    code, out, err = _cli(capsys, *argv)
    assert code == 2, (argv, out, err)
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    prefix = f"chunked-prefill {argv[0]}: error: "
    assert lines[0].startswith(prefix), lines[0]
    return lines[0][len(prefix) :]


@pytest.fixture
def no_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if anything is simulated: every error must come first."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("simulated before refusing the input")

    monkeypatch.setattr(planner_cli, "simulate", refuse)
    monkeypatch.setattr(serving_cli, "simulate_serving", refuse)
    from chunked_prefill.sim.cli.search import drive as search_cli

    monkeypatch.setattr(search_cli, "search", refuse)


# ------------------------------------------------------------------ 17: argparse errors


@pytest.mark.parametrize(
    "argv",
    [
        ["simulate"],
        ["search"],
        ["engines"],
        ["plan", "100"],
        ["fit", "steps.csv"],
    ],
)
def test_an_unknown_flag_is_the_subcommands_error(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    message = _error(capsys, *argv, "--no-such-flag", "x")
    assert message == "unrecognized arguments: --no-such-flag x"


def test_a_word_before_the_command_is_the_top_programs_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = _cli(capsys, "--no-such-flag", "engines")
    assert code == 2
    assert err.splitlines() == ["chunked-prefill: error: unrecognized arguments: --no-such-flag"]


# ------------------------------------------------------------------ 11: config.json


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"hidden_size": 16},
            "key 'num_attention_heads': 32 does not divide hidden_size (16), and there is no"
            " head_dim to give the head size",
        ),
        (
            {"hidden_size": 4001},
            "key 'num_attention_heads': 32 does not divide hidden_size (4001), and there is no"
            " head_dim to give the head size",
        ),
        ({"num_key_value_heads": 64}, "key 'num_key_value_heads': 64 is above num_attention_heads"),
        ({"head_dim": 0}, "key 'head_dim': expected a positive whole number, got 0"),
        ({"head_dim": -128}, "key 'head_dim': expected a positive whole number, got -128"),
        ({"head_dim": True}, "key 'head_dim': expected a positive whole number, got true"),
        ({"vocab_size": 1e400}, "key 'vocab_size': expected a positive whole number, got 1e400"),
        (
            {"num_hidden_layers": 10**13},
            "key 'num_hidden_layers': expected a positive whole number up to 10**12, got"
            " 10000000000000",
        ),
        (
            {"intermediate_size": 10**40},
            "key 'intermediate_size': expected a positive whole number, got a 41-character number",
        ),
        ({"num_attention_heads": None}, "key 'num_attention_heads': expected a positive whole"),
        (
            {"num_local_experts": 2, "num_experts_per_tok": 4},
            "key 'num_experts_per_tok': 4 is above num_local_experts (2)",
        ),
        ({"num_experts_per_tok": 2}, "key 'num_local_experts': missing"),
        ({"num_local_experts": 0, "num_experts_per_tok": 0}, "key 'num_local_experts': expected"),
        (
            {"num_experts": 60, "num_experts_per_tok": 4},
            "key 'moe_intermediate_size': missing (a positive whole number)",
        ),
        (
            {"shared_expert_intermediate_size": 5632},
            "key 'shared_expert_intermediate_size': an expert size without experts",
        ),
        (
            {"model_type": "dbrx", "n_layers": 4, "d_model": 64, "n_heads": 4},
            "key 'attn_config': expected an object (DBRX's kv_n_heads is in it), got null",
        ),
        ({"n_routed_experts": 256}, "key 'num_experts_per_tok': missing"),
        ({"kv_lora_rank": 512}, "key 'qk_nope_head_dim': missing (a positive whole number)"),
        ({"n_shared_experts": 2}, "key 'n_shared_experts': shared experts without routed ones"),
    ],
)
@pytest.mark.parametrize("command", ["simulate", "search"])
def test_a_config_json_that_disagrees_with_itself_names_file_and_key(
    capsys: pytest.CaptureFixture[str],
    no_simulation: None,
    tmp_path: Path,
    command: str,
    change: dict[str, Any],
    message: str,
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIG | change).replace("Infinity", "1e400"))
    argv = [command, "--model", str(path), "--gpu", "h100-sxm", "--requests", "3"]
    if command == "search":
        argv += ["--slo-ttft", "1"]
    line = _error(capsys, *argv)
    flag = "argument --model: " if command == "simulate" else "argument --model/--gpu: "
    assert line.startswith(f"{flag}{path}: {message}"), line


_MODEL_NAME = "a preset, a Hugging Face id or a config.json"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate", "--trace", ""], "argument --trace: expected a file name"),
        (["search", "--trace", "", "--slo-ttft", "1"], "argument --trace: expected a file name"),
        (["simulate", "--profile", ""], "argument --profile: expected a file name"),
        (
            ["search", "--profile", "", "--slo-ttft", "1"],
            "argument --profile: expected a file name",
        ),
        (["simulate", "--model", "", "--gpu", "h100"], f"argument --model: expected {_MODEL_NAME}"),
        (
            ["search", "--model", "", "--gpu", "h100", "--slo-ttft", "1"],
            f"argument --model: expected {_MODEL_NAME}",
        ),
        (["fit", ""], "argument STEPS.csv: expected a file name"),
        (["fit", "s.csv", "--model", ""], f"argument --model: expected {_MODEL_NAME}"),
        (
            ["fit", "s.csv", "--model", "x", "--gpu", ""],
            "argument --gpu: expected a preset or a profile file",
        ),
    ],
)
def test_an_empty_name_is_one_error_line(
    capsys: pytest.CaptureFixture[str], no_simulation: None, argv: list[str], message: str
) -> None:
    # Once a traceback of the readers' own type check (hypothesis found `--trace ''`).
    assert _error(capsys, *argv) == f"{message}, got '' (the name is empty)"


def test_a_config_json_with_head_dim_needs_no_divisible_hidden_size(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIG | {"hidden_size": 16, "head_dim": 128}))
    engine, memory = engine_for(path, "h100-sxm")
    assert memory.head_dim == 128 and engine.pair_s > 0


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--gpu-tflops", "1e-300"],
            "the roofline's token_s is 2.07e+298 s, above 3600 s: peak_flops (--gpu-tflops) x"
            " gemm_efficiency is too low for this model",
        ),
        (
            ["--gpu-hbm-tbs", "1e-20"],
            "the roofline's dense_read_s is 1.67e+18 s, above 3600 s: hbm_bandwidth"
            " (--gpu-hbm-tbs) x weight_read_efficiency is too low for this model",
        ),
        (
            ["--tp", "2", "--gpu-link-gbs", "1e-20"],
            "the roofline's allreduce_token_s is 8.59e+16 s, above 3600 s: link_bandwidth"
            " (--gpu-link-gbs) x link_efficiency is too low for this model",
        ),
    ],
)
def test_a_gpu_too_slow_for_finite_times_is_refused(
    capsys: pytest.CaptureFixture[str], no_simulation: None, flags: list[str], message: str
) -> None:
    line = _error(capsys, "simulate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", *flags)
    assert line.startswith("arguments --model/--gpu/--tp: llama-3.1-8b on h100-sxm"), line
    assert line.endswith(message), line


def test_a_gpu_profile_with_an_hour_long_step_is_refused(tmp_path: Path) -> None:
    profile = tmp_path / "slow.toml"
    profile.write_text('preset = "h100-sxm"\nstep_overhead_s = 1e29\n')
    with pytest.raises(EngineRangeError) as info:
        engine_for("llama-3.1-8b", profile)
    assert str(info.value) == (
        "llama-3.1-8b on h100-sxm (slow.toml): the roofline's overhead_s is 1e+29 s, above"
        " 3600 s: lower the GPU's step_overhead_s, layer_overhead_s or moe_layer_s"
    )


# ------------------------------------------------------------------ 12: derived counts


def test_a_kv_pool_past_u64_names_the_flags(
    capsys: pytest.CaptureFixture[str], no_simulation: None
) -> None:
    line = _error(
        capsys, "simulate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpu-memory-gib",
        "1e20", "--chunk-size", "512",
    )  # fmt: skip
    assert line.startswith(
        "the configuration --chunk-size 512 --token-budget 2048 --max-prefills-per-step 4"
        " --max-running 256 --block-size 16: the GPU memory leaves 46079999999999999991317"
        " KV-cache blocks, above 2**64 - 1 (h100-sxm (overridden): 1e+20 GiB x 0.9"
    ), line
    assert line.endswith(
        "; lower --gpu-memory-gib (or the --gpu profile's memory_bytes), raise --block-size or"
        " give --num-blocks"
    )


@pytest.mark.parametrize("chunk", [["--chunk-size", "none"], ["--token-budget", "none"]])
def test_a_stretched_token_budget_past_u64_names_the_flags(
    capsys: pytest.CaptureFixture[str], no_simulation: None, chunk: list[str]
) -> None:
    line = _error(capsys, "simulate", "--requests", "3", "--max-running", str(U64_MAX), *chunk)
    assert re.fullmatch(
        r"the configuration --chunk-size \S+ --max-prefills-per-step 4 --max-running"
        r" 18446744073709551615 --block-size 16: 'none' stretches the token budget to the"
        r" longest request plus --max-running \+ 1 = \d+, above 2\*\*64 - 1; give"
        r" --token-budget or lower --max-running",
        line,
    ), line


# ------------------------------------------------------------------ 13: numpy int64


@pytest.mark.parametrize(
    "flags",
    [
        ["--block-size", str(U64_MAX), "--num-blocks", "4"],
        ["--block-size", str(U64_MAX), "--num-blocks", str(U64_MAX)],
        ["--block-size", "1", "--num-blocks", str(U64_MAX)],
        ["--block-size", str(2**63), "--num-blocks", str(2**63), "--watermark", "0.5"],
    ],
)
def test_counts_past_int64_run(capsys: pytest.CaptureFixture[str], flags: list[str]) -> None:
    code, out, err = _cli(
        capsys, "simulate", "--backend", "rust", "--requests", "3", "--json", "--chunk-size",
        "64", *flags,
    )  # fmt: skip
    assert (code, err) == (0, "")
    (result,) = json.loads(out)
    assert result["config"]["block_size"] == int(flags[1])
    assert result["requests"] == 3


def test_check_fits_is_exact_past_int64() -> None:
    wl = Workload((0.0, 1.0), (2**62, 5), (2**62, 1))
    check_fits(wl, {"block_size": U64_MAX, "num_blocks": 1, "watermark": 0.0})
    check_fits(wl, {"block_size": 2**63, "num_blocks": U64_MAX, "watermark": 0.0})
    with pytest.raises(SimLoopError, match=r"^request 0 \(prompt 4611686018427387904 tokens"):
        check_fits(wl, {"block_size": 2**61, "num_blocks": 3, "watermark": 0.0})


@given(
    st.lists(st.tuples(st.integers(1, 300), st.integers(1, 300)), min_size=1, max_size=8),
    st.integers(1, 64),
    st.integers(1, 40),
)
def test_check_fits_names_the_first_request_that_never_fits(
    requests: list[tuple[int, int]], block_size: int, num_blocks: int
) -> None:
    # The longest prompt and the longest output may be different requests' (the bound
    # check_fits tries first): then only the exact sum tells.
    wl = Workload(
        tuple(float(i) for i in range(len(requests))),
        tuple(p for p, _ in requests),
        tuple(o for _, o in requests),
    )
    config = {"block_size": block_size, "num_blocks": num_blocks, "watermark": 0.0}
    needed = [-(-(p + o - 1) // block_size) for p, o in requests]
    offenders = [i for i, n in enumerate(needed) if n > num_blocks]
    if not offenders:
        check_fits(wl, config)
        return
    i = offenders[0]
    with pytest.raises(SimLoopError, match=rf"^request {i} \(prompt {requests[i][0]} tokens"):
        check_fits(wl, config)


@pytest.mark.parametrize("rate", ["inf", "1e301"])
def test_search_starts_at_a_finite_rate(
    capsys: pytest.CaptureFixture[str], no_simulation: None, rate: str
) -> None:
    line = _error(capsys, "search", "--slo-ttft", "1", "--rate", rate)
    assert line == f"argument --rate: expected requests/s in [1e-06, 1e+300], got {rate!r}"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--prefix-tokens", str(2**63 - 1)],
            "argument --prefix-tokens: the synthetic workload: request 0: prompt_tokens must be",
        ),
        (
            ["--prefix-tokens", str(2**63 - 1), "--turns", "3"],
            "arguments --prefix-tokens, --turns: the synthetic workload: request ",
        ),
    ],
)
@pytest.mark.parametrize("command", ["simulate", "search"])
def test_a_synthetic_workload_past_the_token_range_names_its_flags(
    capsys: pytest.CaptureFixture[str],
    no_simulation: None,
    command: str,
    flags: list[str],
    message: str,
) -> None:
    slo = ["--slo-ttft", "1"] if command == "search" else []
    assert _error(capsys, command, "--requests", "50", *slo, *flags).startswith(message)


# ------------------------------------------------------------------ 14: the grid


def test_a_grid_over_the_limit_is_refused_before_expanding(
    capsys: pytest.CaptureFixture[str], no_simulation: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("expanded the grid")

    monkeypatch.setattr(runs_serving, "expand_serving_configs", refuse)
    monkeypatch.setattr(runs_planner, "expand_configs", refuse)
    values = ",".join(str(v) for v in range(1, 1001))
    budgets = ",".join(str(v) for v in range(2000, 3000))
    for scheduler in ("serving", "planner"):
        line = _error(
            capsys, "simulate", "--scheduler", scheduler, "--chunk-size", values,
            "--token-budget", budgets, "--max-running", values,
        )  # fmt: skip
        assert line == (
            "arguments --chunk-size, --token-budget, --max-running: their comma lists make"
            " 1000000000 configurations (1000 x 1000 x 1000 distinct values), above the limit"
            " of 10000; give fewer values"
        )
    line = _error(
        capsys, "search", "--slo-ttft", "1", "--chunk-size", values, "--replicas", "1,2,3",
        "--router", "round-robin,least-loaded", "--engine", "llama2-7b-a100,llama2-7b-h100",
    )  # fmt: skip
    assert line == (
        "arguments --chunk-size, --engine, --replicas, --router: their comma lists make 12000"
        " configurations (1000 x 2 x 3 x 2 distinct values), above the limit of 10000; give"
        " fewer values"
    )


def test_a_grid_at_the_limit_and_duplicates_are_accepted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Duplicates count once: 100 values, written 3 times each, x 100 = 10 000.
    values = ",".join(str(v) for v in range(1, 101))
    args = build_parser().parse_args(
        ["simulate", "--chunk-size", ",".join([values] * 3), "--max-running", values]
    )
    scheduler_flags.check_grid(args)
    code, _, err = _cli(
        capsys, "simulate", "--requests", "2", "--quiet", "--chunk-size", "64,64,64,none"
    )
    assert (code, err) == (0, "")


# ------------------------------------------------------------------ 15: fit


HEADER = "prefill_tokens,decode_tokens,attention_pairs,decode_context_tokens,duration_s\n"
ROWS = ["10,0,55,0", "20,1,210,30", "40,2,820,60", "5,3,15,90", "7,3,28,90"]


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize(
    ("durations", "message"),  # the message as a pattern
    [
        (
            ["1e-300"] * 5,
            re.escape(
                ":2: field 'duration_s': expected a duration in seconds, a number from 1e-9"
                " to 1e9, got '1e-300'"
            ),
        ),
        (
            # Equal durations fit the floor or the fixed cost alike: which one the least
            # squares put them on depends on the LAPACK build, so either is named.
            ["1e9"] * 5,
            ": engine coefficient (t_min_s|c0_s) must be in \\[0, 3600\\] seconds, got"
            " 1000000000.0",
        ),
    ],
)
def test_fit_warns_nothing_before_its_error_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, durations: list[str], message: str
) -> None:
    path = tmp_path / "steps.csv"
    path.write_text(HEADER + "".join(f"{r},{d}\n" for r, d in zip(ROWS, durations)))
    assert re.fullmatch(re.escape(str(path)) + message, _error(capsys, "fit", str(path)))


@pytest.mark.filterwarnings("error")
def test_fit_of_steps_far_apart_in_scale_warns_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "steps.csv"
    rows = [f"{r},1e-9" for r in ROWS[:4]] + [f"{2**63 - 1},3,{2**63 - 1},90,1e9"]
    path.write_text(HEADER + "\n".join(rows) + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code, out, err = _cli(capsys, "fit", str(path), "--json")
    # No Python warning (numpy's overflow): only fit's own, one line each, listed in --json.
    doc = json.loads(out)
    assert code == 0 and doc["steps"] == 5
    assert err == "".join(f"chunked-prefill fit: warning: {w}\n" for w in doc["warnings"]), err


# ------------------------------------------------------------------ the class, by property

_VALUES = [
    "nan", "inf", "-inf", "-0", "0", "1", "2", "16", "0.5", "1e308", "1e-300", "-1",
    str(2**63 - 1), str(2**63), str(U64_MAX), str(2**64), "9" * 50, "", ",", "1,1,1",
    "none", "é", "\u2028", "1_000", "0x10", " 3 ",
]  # fmt: skip


def _flags(command: str) -> list[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]  # type: ignore[union-attr]
    skip = {"--help", "--steps-csv", "--plot", "--out", "--ray", "--workers"}
    return [
        a.option_strings[-1]
        for a in sub._actions
        if a.option_strings and a.nargs != 0 and a.option_strings[-1] not in skip
    ]


_BASE = {
    "simulate": ["simulate", "--requests", "3", "--quiet", "--json"],
    "search": ["search", "--requests", "3", "--quiet", "--json", "--slo-ttft", "30"],
    "plan": ["plan", "100", "--json"],
    "engines": ["engines", "--json"],
}


@st.composite
def _command_lines(draw: st.DrawFn) -> list[str]:
    command = draw(st.sampled_from(sorted(_BASE)))
    argv = list(_BASE[command])
    if command in ("simulate", "search") and draw(st.booleans()):
        argv += ["--model", "llama-3.1-8b", "--gpu", "h100-sxm"]
    if command == "simulate" and draw(st.booleans()):
        argv += ["--scheduler", "planner"]
    flags = draw(st.lists(st.sampled_from(_flags(command)), min_size=1, max_size=3, unique=True))
    for flag in flags:
        argv += [flag, draw(st.sampled_from(_VALUES))]
    return argv


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(argv=_command_lines())
@pytest.mark.filterwarnings("error")
def test_every_flag_value_runs_or_is_one_error_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    if argv[0] == "search":  # probes in this process: the property is about the flags
        argv += ["--workers", "1", "--precision", "0.5"]
    code, _, err = _cli(capsys, *argv)
    if code == 0:
        assert err == ""
        return
    lines = err.splitlines()
    assert code == 2 and len(lines) == 1, (argv, err)
    assert lines[0].startswith(f"chunked-prefill {argv[0]}: error: "), (argv, lines[0])
    assert re.search(r"argument|--[a-z]", lines[0]), (argv, lines[0])
