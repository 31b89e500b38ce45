"""Every bad input to the command line is one ``PROG: error:`` line and exit status 2.

The message names the flag, argument or ``FILE:LINE: field``, the value and the rule, and
it comes before anything is simulated. The library checks the CLI relies on are tested
here too: engine profiles, the step limit, the JSON report.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

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
