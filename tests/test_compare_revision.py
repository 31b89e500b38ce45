"""scripts/compare_revision.py judges issue 25's goals on the measured values, whatever unit
the table prints them in."""

from __future__ import annotations

import pytest

from script_module import load_script

compare = load_script("compare_revision")


def _table(capsys: pytest.CaptureFixture[str], old_s: float, new_s: float) -> str:
    """The last cell of the one row of a step table with these per-step seconds."""
    sides = [compare.Side("old", {}), compare.Side("new", {})]
    goal, met = compare.STEP_GOALS[(256, "best")]
    samples = {"old": [old_s], "new": [new_s]}
    row = compare.Row("step, 256 decodes, best", "µs", goal, True, samples, 1e6, met)
    compare.print_table([row], sides)
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("step"))
    return line.split()[-1]


def test_step_goal_is_read_in_seconds_while_printed_in_microseconds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _table(capsys, 15.6e-6, 9.27e-6) == "yes"
    assert _table(capsys, 15.6e-6, 10.5e-6) == "no"


def test_gain_goal_compares_the_two_medians(capsys: pytest.CaptureFixture[str]) -> None:
    sides = [compare.Side("old", {}), compare.Side("new", {})]
    for new, verdict in ((0.29, "yes"), (0.31, "no")):
        row = compare.Row(
            "x", "s", ">=3x", True, {"old": [0.9], "new": [new]}, 1.0, compare._at_least_gain(3)
        )
        compare.print_table([row], sides)
        line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("x "))
        assert line.split()[-1] == verdict
