"""Trace files: nothing dropped, clamped, repaired or misread.

Every row that cannot be read exactly is a :class:`TraceError` naming ``FILE:LINE: field``;
every row that can is read exactly, whatever else its line holds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chunked_prefill.sim import TraceError, Workload, load_trace
from chunked_prefill.sim.workload import MAX_TOKENS

HEADER = "arrival_s,prompt_tokens,output_tokens"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8"))
    return path


def _row(**fields: object) -> str:
    base: dict[str, object] = {"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 2}
    base.update(fields)
    return json.dumps(base, ensure_ascii=False)


def _error(path: Path) -> TraceError:
    with pytest.raises(TraceError) as info:
        load_trace(path)
    return info.value


# ------------------------------------------------------------------ JSON Lines records


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\u0085", "\x1c", "\x0b", "\x0c"])
def test_jsonl_splits_on_newline_only(tmp_path: Path, separator: str) -> None:
    # json.dumps(ensure_ascii=False) writes these inside strings; str.splitlines() would
    # cut the record there.
    text = "\n".join(
        [
            _row(prompt=f"a{separator}b"),
            _row(prompt_tokens=7),
        ]
    )
    wl = load_trace(_write(tmp_path, "t.jsonl", text + "\n"))
    assert wl.prompt_tokens == (5, 7)


def test_jsonl_crlf_and_blank_lines(tmp_path: Path) -> None:
    text = _row() + "\r\n\r\n" + _row(prompt_tokens=9) + "\r\n"
    assert load_trace(_write(tmp_path, "t.jsonl", text)).prompt_tokens == (5, 9)


def test_stray_control_character_keeps_line_numbers(tmp_path: Path) -> None:
    # A form feed between records is one bad line, not a line break that shifts the rest.
    text = "\n".join([_row(), "\x0c" + _row(), _row(), _row(output_tokens=0)]) + "\n"
    err = _error(_write(tmp_path, "t.jsonl", text))
    assert err.line == 2
    fixed = "\n".join([_row(), _row(), _row(), _row(output_tokens=0)]) + "\n"
    err = _error(_write(tmp_path, "u.jsonl", fixed))
    assert (err.line, err.field) == (4, "output_tokens")


def test_duplicated_key_is_an_error(tmp_path: Path) -> None:
    doubled = '{"arrival_s": 0, "prompt_tokens": 5, "prompt_tokens": 6, "output_tokens": 1}'
    text = _row() + "\n" + doubled + "\n"
    path = _write(tmp_path, "t.jsonl", text)
    err = _error(path)
    assert (err.line, err.field) == (2, "prompt_tokens")
    assert f"{path}:2: field 'prompt_tokens': appears twice" in str(err)


# ------------------------------------------------------------------ exact numbers


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("9007199254740993.0", "prompt_tokens"),  # a float has already rounded it
        ("9.007199254740993e15", "output_tokens"),
        ("9" * 400, "prompt_tokens"),
        ("9" * 5000, "output_tokens"),
        ("1" + "0" * 19, "prompt_tokens"),  # 10**19 > 2**63 - 1
        ("9223372036854775808", "prompt_tokens"),  # 2**63
        ("2.5", "prompt_tokens"),
        ("1e400", "output_tokens"),
        ("9007199254740993.0", "arrival_s"),  # a time above 2**53
        ("9" * 5000, "arrival_s"),
        ("9" * 400, "priority"),
    ],
)
@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_inexact_or_huge_numbers_are_located_errors(
    tmp_path: Path, value: str, field: str, fmt: str
) -> None:
    fields = {"arrival_s": "0", "prompt_tokens": "5", "output_tokens": "2", "priority": "0"}
    fields[field] = value
    if fmt == "csv":
        text = ",".join(fields) + "\n" + "1,3,1,0\n" + ",".join(fields.values()) + "\n"
    else:
        good = '{"arrival_s": 1, "prompt_tokens": 3, "output_tokens": 1}'
        body = ", ".join(f'"{k}": {v}' for k, v in fields.items())
        text = good + "\n{" + body + "}\n"
    path = _write(tmp_path, f"t.{fmt}", text)
    err = _error(path)
    line = 3 if fmt == "csv" else 2
    assert (err.line, err.field) == (line, field)
    message = str(err)
    assert message.startswith(f"{path}:{line}: field {field!r}: ")
    assert len(message) < 400  # a 5 000-digit value is shortened, not echoed


def test_exact_numbers_are_read_exactly(tmp_path: Path) -> None:
    text = (
        '{"arrival_s": 9007199254740992, "prompt_tokens": 9223372036854775807,'
        ' "output_tokens": 1.5e3, "priority": -9223372036854775808}\n'
        '{"arrival_s": "0.25", "prompt_tokens": "12", "output_tokens": 3.0}\n'
    )
    wl = load_trace(_write(tmp_path, "t.jsonl", text))
    assert wl.prompt_tokens == (MAX_TOKENS, 12)
    assert wl.output_tokens == (1500, 3)
    assert wl.priority == (-(2**63), 0)
    assert wl.arrival_s == (float(2**53), 0.25)
    csv_text = f"{HEADER}\n0,9007199254740993,2\n"
    assert load_trace(_write(tmp_path, "t.csv", csv_text)).prompt_tokens == (9007199254740993,)


def test_long_ignored_csv_column_is_ignored(tmp_path: Path) -> None:
    prompt = "x" * 200_000
    text = f'{HEADER},prompt\n0,5,2,"{prompt}"\n1,6,1,short\n'
    wl = load_trace(_write(tmp_path, "t.csv", text))
    assert wl.prompt_tokens == (5, 6)
    import csv

    assert csv.field_size_limit() == 131072  # the process-wide limit is left as it was


@pytest.mark.parametrize(
    ("column", "bad"),
    [
        ("group", True),
        ("group", -2),
        ("group", 2**63),
        ("group", 1.0),
        ("session", -1),
        ("session", 2**64),
        ("session", False),
    ],
)
def test_workload_refuses_a_group_or_session_out_of_range(column: str, bad: object) -> None:
    good = {"group": (-1, 2**63 - 1), "session": (0, 2**64 - 1)}[column]
    Workload((0.0, 1.0, 2.0), (1, 1, 1), (1, 1, 1), **{column: (*good, 0)})  # type: ignore[arg-type]
    rule = {"group": r"\[-1, 2\*\*63 - 1\]", "session": r"\[0, 2\*\*64 - 1\]"}[column]
    with pytest.raises(ValueError, match=f"Workload {column}s must be ints in {rule}"):
        Workload((0.0, 1.0, 2.0), (1, 1, 1), (1, 1, 1), **{column: (0, bad, 0)})  # type: ignore[arg-type]


def test_workload_refuses_counts_the_simulator_cannot_hold() -> None:
    with pytest.raises(ValueError, match="prompt_tokens must be an int in"):
        Workload((0.0,), (2**63,), (1,))
    with pytest.raises(ValueError, match="arrival_s must be a number of seconds in"):
        Workload((2.0**60,), (1,), (1,))
    wl = Workload((0.0,), (100,), (1,))
    with pytest.raises(ValueError, match=r"prompt_scale 1e\+20 makes request 0's prompt"):
        wl.scaled(1e20)
    with pytest.raises(ValueError, match="output_scale"):
        wl.scaled(1.0, 1e300)
