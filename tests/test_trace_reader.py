"""The Rust trace reader against the Python one: the same workload, or the same error.

``load_trace`` reads a file with the core's reader (``_core.read_trace``) and falls back on
its Python reader, the reference, whenever the core answers ``None``. These tests generate
CSV and JSON Lines traces, valid and invalid, and check that ``load_trace`` gives exactly
what the Python reader alone gives (the same values, floats bit for bit, or an exception of
the same class with the same message), and that the core does take the common forms.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import chunked_prefill._core as core
from chunked_prefill.sim import Workload, load_trace
from chunked_prefill.sim.workload import FIELD_ALIASES
from chunked_prefill.sim.workload import trace as trace_module

UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


@contextmanager
def python_reader_only() -> Iterator[None]:
    """``load_trace`` as it was before the core's reader: the Python reader alone."""
    with mock.patch.object(trace_module, "_read_fast", lambda *_: None):
        yield


def outcome(read: Callable[[], Workload]) -> tuple[Any, ...]:
    """What a read gives, comparable: the workload with its floats' exact bits, or the
    exception's class and message."""
    try:
        wl = read()
    except Exception as err:  # any exception must match too
        return ("error", type(err), str(err))
    return ("ok", wl, [x.hex() for x in wl.arrival_s])


def count_fast_path(path: Path, unit: str) -> None:
    """Record for ``--hypothesis-show-statistics`` whether the core read the file."""
    fmt = "csv" if path.suffix == ".csv" else "jsonl"
    taken = core.read_trace(path.read_bytes(), fmt, UNITS[unit]) is not None
    event(f"{fmt}: {'read by the core' if taken else 'left to Python'}")


def both(path: Path, unit: str) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """``load_trace``'s outcome, and the Python reader's alone."""
    fast = outcome(lambda: load_trace(path, time_unit=unit))
    with python_reader_only():
        reference = outcome(lambda: load_trace(path, time_unit=unit))
    return fast, reference


# ------------------------------------------------------------------------- cells

INTS = [
    "5", " 5 ", "+5", "007", "5.0", "5.", ".5e1", "1e3", "1.5e3", "1500e-3", "5.5",
    "9007199254740992.0", "9007199254740993.0", "9007199254740993", "9223372036854775807",
    "9223372036854775808", "18446744073709551615", "18446744073709551616", "-1", "-0", "0",
    "1_000", "0x10", "inf", "nan", "true", "\u0661\u0662", "\xa05", "5\u3000", "\x0b5\x1c",
    "1e1000000", "0e999999", "1e-400", "", " ", "\t",
]  # fmt: skip
TIMES = [
    "0", "0.342", "1.5e3", "0.1000000000000000055511151231257827", "123456.789012345678",
    "9007199254740991", "9007199254740992", "9007199254740992.5", "-0", "-0.0", "-1e-400",
    "1e-400", "+2", "2024-01-01T00:00:00", "2024-01-01 00:00:00.1234567Z", "inf", "",
]  # fmt: skip
NAMES = ["a", " a ", "1", "1.0", "", " ", "\u3000", "\u3000a", "é", "a\u3000", "x y", "\x1ca"]
HASHES = [
    "1 2 3", "1;2|3", "[1, 2]", '["4", 5]', "[1,", "[]", ";", "[1.5]", "[[1]]", "[null]",
    "18446744073709551615", "18446744073709551616", "1\u30002", "[1]\u3000", "-1", "",
]  # fmt: skip

CELLS = {
    "arrival_s": TIMES,
    "prompt_tokens": INTS,
    "output_tokens": INTS,
    "cached_tokens": INTS,
    "priority": INTS,
    "prefix_tokens": INTS,
    "session_id": NAMES,
    "prefix_id": NAMES,
    "hash_ids": HASHES,
}
VALID = {
    "arrival_s": st.one_of(
        st.floats(0, 1e7).map(repr),
        st.from_regex(r"[0-9]{1,6}(\.[0-9]{0,25})?([eE]-?[0-9])?", fullmatch=True),
    ),
    "prompt_tokens": st.integers(1, 2**63 - 1).map(str),
    "output_tokens": st.integers(1, 10**6).map(str),
    "cached_tokens": st.just("0"),
    "priority": st.integers(-(2**63), 2**63 - 1).map(str),
    "prefix_tokens": st.just("128"),
    "session_id": st.sampled_from(["a", "b", "7", ""]),
    "prefix_id": st.sampled_from(["system", "other", ""]),
    "hash_ids": st.lists(st.integers(0, 2**64 - 1), max_size=4).map(
        lambda h: " ".join(map(str, h))
    ),
}
WILD = st.text(st.sampled_from(list('0123456789.e-+ ,"\r\n[]|;xé\u3000\u2028')), max_size=8)


def column_name(field: str) -> st.SearchStrategy[str]:
    """One of the field's accepted names, spelled with any case and separators."""
    return st.sampled_from(FIELD_ALIASES[field]).flatmap(
        lambda alias: st.sampled_from(
            [alias, alias.upper(), alias.replace("_", " ").title(), alias.replace("_", "-")]
        )
    )


@st.composite
def cell(draw: st.DrawFn, field: str | None, wild: bool) -> str:
    """A cell of ``field`` (``None``: an ignored column): mostly valid unless ``wild``."""
    if field is None:
        return draw(st.one_of(WILD, st.just('say "hi", twice\r\n')))
    if wild and draw(st.integers(0, 3)) == 0:
        return draw(st.one_of(st.sampled_from(CELLS[field]), WILD))
    return draw(VALID[field])


@st.composite
def columns(draw: st.DrawFn, wild: bool) -> list[str | None]:
    """The fields of a trace's columns, in order (``None``: an ignored column); when
    ``wild``, now and then a required one missing or one named twice."""
    required = ["arrival_s", "prompt_tokens", "output_tokens"]
    optional = [f for f in CELLS if f not in required]
    fields: list[str | None] = list(required)
    fields += draw(st.lists(st.sampled_from(optional), max_size=4, unique=True))
    fields += [None] * draw(st.integers(0, 2))
    if wild and draw(st.integers(0, 4)) == 0:
        fields.pop(draw(st.integers(0, len(fields) - 1)))
    if wild and draw(st.integers(0, 4)) == 0:
        fields.append(draw(st.sampled_from(list(CELLS))))  # a field named twice
    return list(draw(st.permutations(fields)))


# ------------------------------------------------------------------------- CSV


def csv_cell(text: str, quote: bool) -> str:
    if quote or any(c in text for c in ',"\r\n'):
        return '"' + text.replace('"', '""') + '"'
    return text


@st.composite
def csv_trace(draw: st.DrawFn) -> str:
    """A CSV trace: a header naming the fields, rows, blank lines, any line ends."""
    wild = draw(st.integers(0, 2)) == 0
    fields = draw(columns(wild))
    names = [
        draw(column_name(f)) if f else draw(st.sampled_from(["text", "x", ""])) for f in fields
    ]
    end = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    lines = [",".join(csv_cell(n, draw(st.booleans())) for n in names)]
    for _ in range(draw(st.integers(0 if wild else 1, 6))):
        cells = [draw(cell(f, wild)) for f in fields]
        if wild and draw(st.integers(0, 9)) == 0:  # ragged, or raw quotes and line ends
            line = ",".join(cells[: draw(st.integers(0, len(cells)))])
        else:
            line = ",".join(csv_cell(c, draw(st.integers(0, 4)) == 0) for c in cells)
        lines.append(line)
        if draw(st.integers(0, 7)) == 0:
            lines.append(draw(st.sampled_from(["", " ", ",,", " , "])))
    text = end.join(lines) + draw(st.sampled_from([end, "", end + end]))
    return draw(st.sampled_from(["", "\ufeff"])) + text


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(csv_trace(), st.sampled_from(sorted(UNITS)))
def test_csv_reads_as_the_python_reader(text: str, unit: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.csv"
        path.write_bytes(text.encode("utf-8", "surrogatepass"))
        count_fast_path(path, unit)
        fast, reference = both(path, unit)
    assert fast == reference


# ------------------------------------------------------------------------- JSON Lines

JSON_VALUES = [
    "null", "true", "NaN", "Infinity", "-Infinity", "01", "1.", "+1", ".5", "1e", "-",
    '"a\\u005f"', '"\\ud800"', '"\\x"', '"a\tb"', '"\u2028"', "[1, 2]", "[1,]", '{"a": 1}',
    '{"a": 1, "a": 2}', "[[[[]]]]", "{}", "'a'",
]  # fmt: skip


@st.composite
def json_value(draw: st.DrawFn, field: str | None, wild: bool) -> str:
    """The JSON text of a value of ``field`` (``None``: an ignored key)."""
    if wild and draw(st.integers(0, 4)) == 0:
        return draw(st.sampled_from(JSON_VALUES))
    text = draw(cell(field, wild))
    if field == "hash_ids" and draw(st.booleans()):
        items = draw(VALID["hash_ids"]).split()
        return "[" + ", ".join(draw(st.sampled_from([i, json.dumps(i)])) for i in items) + "]"
    if field in ("session_id", "prefix_id", None) or not draw(st.booleans()):
        return json.dumps(text, ensure_ascii=draw(st.booleans()))
    try:
        json.loads(text)  # a bare JSON number where the text is one
    except ValueError:
        return json.dumps(text)
    return text


@st.composite
def jsonl_trace(draw: st.DrawFn) -> str:
    """A JSON Lines trace: objects naming the fields (per line), blank lines, CRLF."""
    wild = draw(st.integers(0, 2)) == 0
    lines = []
    for _ in range(draw(st.integers(1, 6))):
        fields = draw(columns(wild))
        keys = [draw(column_name(f)) if f else f"x{k}" for k, f in enumerate(fields)]
        if wild and draw(st.integers(0, 9)) == 0 and keys:
            keys.append(keys[0])  # a key named twice
            fields.append(fields[0])
        members = [f"{json.dumps(k)}: {draw(json_value(f, wild))}" for k, f in zip(keys, fields)]
        lines.append(draw(st.sampled_from(["", " ", "\t"])) + "{" + ", ".join(members) + "}")
        if draw(st.integers(0, 5)) == 0:
            blank = ["", " \t"] + ["\r", "[1]", "{", "{}"] * wild
            lines.append(draw(st.sampled_from(blank)))
    end = draw(st.sampled_from(["\n", "\r\n"]))
    return draw(st.sampled_from(["", "\ufeff"])) + end.join(lines) + end


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(jsonl_trace(), st.sampled_from(sorted(UNITS)))
def test_jsonl_reads_as_the_python_reader(text: str, unit: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.jsonl"
        path.write_bytes(text.encode("utf-8", "surrogatepass"))
        count_fast_path(path, unit)
        fast, reference = both(path, unit)
    assert fast == reference


# ------------------------------------------------------------------------- the fast path


def core_columns(text: str, fmt: str) -> tuple[Any, ...] | None:
    return core.read_trace(text.encode("utf-8"), fmt, 1.0)


@pytest.mark.parametrize("field", sorted(FIELD_ALIASES))
def test_core_knows_every_column_name(tmp_path: Path, field: str) -> None:
    # The core keeps its own table of names: each one must read as the Python table says.
    values = {
        "arrival_s": "1.5",
        "prompt_tokens": "7",
        "output_tokens": "3",
        "cached_tokens": "2",
        "priority": "-4",
        "hash_ids": "5 6",
        "session_id": "s",
        "prefix_id": "p",
        "prefix_tokens": "2",
    }
    for alias in FIELD_ALIASES[field]:
        names = {
            f: a for f, a in zip(FIELD_ALIASES, ["arrival_s", "prompt_tokens", "output_tokens"])
        }
        names[field] = alias
        text = ",".join(names.values()) + "\n" + ",".join(values[f] for f in names) + "\n"
        assert core_columns(text, "csv") is not None, alias
        path = tmp_path / "t.csv"
        path.write_text(text, encoding="utf-8")
        fast, reference = both(path, "s")
        assert fast == reference and fast[0] == "ok", alias


@pytest.mark.parametrize(
    "text",
    [
        "arrival_s,prompt_tokens,output_tokens\n0.5,10,2\n",
        "\ufeffTimestamp,Request tokens,Response tokens\r\n1,10,2\r\n\r\n2,11,3\r\n",
        'ts,input_len,output_len,text\n1,2,3,"a ""b"", c\nd"\n',
        'arrival_s,prompt_tokens,output_tokens,hash_ids,session_id\n1,2,3,"[1, 2]",s\n',
    ],
)
def test_core_reads_common_csv(text: str) -> None:
    assert core_columns(text, "csv") is not None


@pytest.mark.parametrize(
    "line",
    [
        '{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [0, 1]}',
        '{"arrival_s": 0.5, "prompt_tokens": "10", "output_tokens": 2, "meta": {"a": [null]}}',
        '{"arrival_s": 1, "prompt_tokens": 1, "output_tokens": 1, "text": "a\\nb\u2028"}',
    ],
)
def test_core_reads_common_jsonl(line: str) -> None:
    assert core_columns(line + "\r\n", "jsonl") is not None


def test_example_trace_takes_the_fast_path() -> None:
    root = Path(__file__).resolve().parents[1]
    data = (root / "examples" / "trace.csv").read_bytes()
    assert core.read_trace(data, "csv", 1.0) is not None
    fast, reference = both(root / "examples" / "trace.csv", "ms")
    assert fast == reference


def test_core_refuses_an_unknown_format() -> None:
    with pytest.raises(ValueError, match="format must be 'csv' or 'jsonl'"):
        core.read_trace(b"", "tsv", 1.0)


def test_core_workload_is_built_unchecked_and_equals_the_checked_one() -> None:
    # The core's columns skip the constructor's whole-column checks (it checked every value
    # while reading), yet give the workload the checked constructor builds from them.
    root = Path(__file__).resolve().parents[1]
    wl = load_trace(root / "examples" / "trace.csv", time_unit="ms")
    checked = Workload(**{name: getattr(wl, name) for name in wl.__dataclass_fields__})
    assert wl == checked
    with mock.patch.object(Workload, "__post_init__", side_effect=AssertionError("checked")):
        assert load_trace(root / "examples" / "trace.csv", time_unit="ms") == wl
        with pytest.raises(TypeError, match=r"not a Workload field: \['rows'\]"):
            Workload._of_checked(arrival_s=(0.0,), rows=1)
