"""Trace files as workloads (:func:`load_trace`): CSV or JSON Lines, their column
aliases and the exact reading rules of every field (errors at ``FILE:LINE: field``).

Every rule of reading a row lives here. The Rust core's reader (``_core.read_trace``,
``rust/core/src/trace``) reads the common forms fast and leaves to this module's reader,
the reference, every file it cannot prove it reads the same way, errors included: see
:func:`_read_fast`."""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

from .._check import path as check_path
from .._check import show
from .._files import FileProblem, read_bytes
from .._json import FLOAT_EXACT, DuplicateKey, Number, exact, whole
from .._json import loads as json_loads
from .types import I64_MAX, I64_MIN, MAX_TOKENS, U64_MAX, Workload


class TraceError(ValueError):
    """A trace file that cannot be read as a workload.

    ``path``, ``line`` (1-based, 0 when the problem is the file as a whole) and ``field``
    (the column, or ``None``) say where; the message says the same in words.
    """

    def __init__(self, path: str, line: int, field: str | None, problem: str) -> None:
        self.path = path
        self.line = line
        self.field = field
        self.problem = problem
        where = f"{path}:{line}" if line else path
        what = f" field {field!r}:" if field else ""
        super().__init__(f"{where}:{what} {problem}")


FIELD_ALIASES: Mapping[str, tuple[str, ...]] = {
    "arrival_s": (
        "arrival_s",
        "arrival",
        "arrival_time",
        "arrival_time_s",
        "arrived_at",
        "timestamp",
        "time",
        "time_s",
        "ts",
    ),
    "prompt_tokens": (
        "prompt_tokens",
        "prompt_len",
        "prompt_length",
        "input_tokens",
        "input_len",
        "input_length",
        "num_prefill_tokens",
        "num_input_tokens",
        "num_prompt_tokens",
        "context_tokens",
        "request_tokens",
    ),
    "output_tokens": (
        "output_tokens",
        "output_len",
        "output_length",
        "num_decode_tokens",
        "num_output_tokens",
        "generated_tokens",
        "completion_tokens",
        "response_tokens",
        "decode_tokens",
    ),
    "cached_tokens": ("cached_tokens", "num_cached_tokens", "prefix_cached_tokens"),
    "priority": ("priority",),
    "hash_ids": ("hash_ids", "block_hashes", "prefix_hashes"),
    "session_id": ("session_id", "session", "conversation_id", "conv_id", "chat_id"),
    "prefix_id": ("prefix_id", "prefix_group", "system_prompt_id"),
    "prefix_tokens": ("prefix_tokens", "prefix_len", "prefix_length", "system_prompt_tokens"),
}
"""Column names accepted for each field. Matching ignores case, ``_``, ``-`` and spaces, so
``ContextTokens`` (Azure LLM inference traces), ``Request tokens`` (BurstGPT) and
``num_prefill_tokens`` (Vidur) all name ``prompt_tokens``."""


_REQUIRED = ("arrival_s", "prompt_tokens", "output_tokens")


_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


def read_text(name: str) -> str:
    """The UTF-8 text of the trace or steps file ``name`` (a leading BOM dropped), or a
    :class:`TraceError` saying why not (see :mod:`._files`)."""
    return _decode(name, _read_file(name))


def _read_file(name: str) -> bytes:
    try:
        return read_bytes(name)
    except FileProblem as err:
        raise TraceError(name, err.line, None, err.problem) from None


def _decode(name: str, data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise TraceError(
            name, line, None, f"not UTF-8 text: {err.reason} at byte {err.start}"
        ) from None


def _norm(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


_ALIAS_INDEX: dict[str, str] = {
    _norm(alias): canon for canon, aliases in FIELD_ALIASES.items() for alias in aliases
}


def _map_columns(path: str, line: int, names: Sequence[str]) -> dict[str, str]:
    """Canonical field -> the column name that holds it; errors on missing or doubled."""
    found: dict[str, str] = {}
    for name in names:
        canon = _ALIAS_INDEX.get(_norm(name))
        if canon is None:
            continue
        if canon in found:
            raise TraceError(
                path,
                line,
                name,
                f"names the same field as column {found[canon]!r} ({canon}); keep one of them",
            )
        found[canon] = name
    for canon in _REQUIRED:
        if canon not in found:
            raise TraceError(
                path,
                line,
                canon,
                "is missing; accepted column names: " + ", ".join(FIELD_ALIASES[canon]),
            )
    return found


class _Columns:
    def __init__(self) -> None:
        self.arrival: list[float] = []
        self.prompt: list[int] = []
        self.output: list[int] = []
        self.cached: list[int] = []
        self.priority: list[int] = []
        self.hash_ids: list[tuple[int, ...]] = []
        self.session: list[str | None] = []
        self.prefix: list[str | None] = []
        self.prefix_tokens: tuple[int, int] | None = None  # (line, value) of the first row
        self.time_kind: str | None = None  # "number" or "datetime", fixed by the first row


def _show(raw: object) -> str:
    """``raw`` for a message: as written for a number or text (shortened when long)."""
    if isinstance(raw, (list, dict)):
        return _json_kind(raw)
    text = raw if isinstance(raw, str) else json.dumps(raw) if isinstance(raw, bool) else None
    if text is None:
        return repr(raw)
    shown = text if isinstance(raw, Number) else repr(text)
    if len(shown) > 60:
        shown = f"{shown[:30]}...{shown[-10:]} ({len(text)} characters)"
    return shown


def _json_kind(value: object) -> str:
    if isinstance(value, dict):
        return "a JSON object"
    if isinstance(value, list):
        return "a JSON array"
    if isinstance(value, Number):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "null" if value is None else json.dumps(value)


def _number(raw: object) -> tuple[Decimal, bool] | None:
    """The exact value of a JSON number or a text cell, and whether it was an integer."""
    if isinstance(raw, str):  # Number (a JSON number) is a str too
        return exact(raw)
    return None


def _parse_int(
    path: str, line: int, col: str, raw: object, *, low: int, high: int, what: str
) -> int:
    parsed = _number(raw)
    if parsed is None:
        raise TraceError(path, line, col, f"expected {what}, got {_show(raw)}")
    value, written_as_integer = parsed
    if not low <= value <= high:
        raise TraceError(path, line, col, f"expected {what}, got {_show(raw)}")
    count = whole(value, written_as_integer)
    if count is None:
        if written_as_integer or abs(value) <= FLOAT_EXACT:
            raise TraceError(path, line, col, f"expected {what}, got {_show(raw)}")
        raise TraceError(
            path,
            line,
            col,
            f"expected {what}, got {_show(raw)}: a number with a fraction or an exponent"
            f" above 2**53 ({FLOAT_EXACT}) may be a rounded float; write it as a whole"
            " number",
        )
    return count


def _parse_time(path: str, line: int, col: str, raw: object, unit: float, cols: _Columns) -> float:
    kind = "number"
    parsed = _number(raw)
    seconds: float | None = None
    if parsed is not None:
        value, _ = parsed
        if not 0 <= value <= FLOAT_EXACT:
            raise TraceError(
                path,
                line,
                col,
                f"expected a time in [0, {FLOAT_EXACT}] (2**53, up to which a float holds"
                f" every whole number), got {_show(raw)}",
            )
        seconds = float(value) * unit
    elif isinstance(raw, str) and not isinstance(raw, Number):
        seconds = _parse_datetime(raw.strip())
        kind = "datetime"
    if seconds is None:
        raise TraceError(
            path, line, col, f"expected seconds (a number) or an ISO date-time, got {_show(raw)}"
        )
    if cols.time_kind is None:
        cols.time_kind = kind
    elif cols.time_kind != kind:
        raise TraceError(
            path, line, col, f"is a {kind} but earlier rows hold {cols.time_kind}s: {_show(raw)}"
        )
    return seconds


def _parse_datetime(text: str) -> float | None:
    """Seconds since the epoch of an ISO-8601 date-time (naive ones read as UTC)."""
    candidate = text.replace("Z", "+00:00")
    # Python < 3.11 accepts only 3 or 6 fraction digits; traces often carry 7.
    dot = candidate.find(".")
    if dot != -1:
        end = dot + 1
        while end < len(candidate) and candidate[end].isdigit():
            end += 1
        frac = candidate[dot + 1 : end]
        candidate = candidate[: dot + 1] + (frac + "000000")[:6] + candidate[end:]
    try:
        stamp = datetime.fromisoformat(candidate)
    except ValueError:
        return None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    return stamp.timestamp()


def _add_row(
    path: str,
    line: int,
    row: Mapping[str, object],
    mapping: Mapping[str, str],
    unit: float,
    cols: _Columns,
) -> None:
    """Read one row (a CSV row or a JSON object, column -> value) into ``cols``."""
    values = _present(path, line, row, mapping)
    arrival = _parse_time(path, line, mapping["arrival_s"], values["arrival_s"], unit, cols)
    prompt, output, cached, priority = _counts(path, line, values, mapping)
    if "prefix_tokens" in values:
        _shared_prefix(path, line, values, mapping, cols)
    hashes: tuple[int, ...] = ()
    if "hash_ids" in values:
        hashes = _parse_hashes(path, line, mapping["hash_ids"], values["hash_ids"])
    cols.arrival.append(arrival)
    cols.prompt.append(prompt)
    cols.output.append(output)
    cols.cached.append(cached)
    cols.priority.append(priority)
    cols.hash_ids.append(hashes)
    for canon, column in (("session_id", cols.session), ("prefix_id", cols.prefix)):
        column.append(_key(path, line, values, mapping, canon))


def _present(
    path: str, line: int, row: Mapping[str, object], mapping: Mapping[str, str]
) -> dict[str, object]:
    """The row's values by canonical name, those missing or empty left out (an error for
    a required column)."""
    values: dict[str, object] = {}
    for canon, col in mapping.items():
        raw = row.get(col)
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            if canon in _REQUIRED:
                raise TraceError(path, line, col, "is missing or empty")
            continue
        values[canon] = raw
    return values


def _counts(
    path: str, line: int, values: Mapping[str, object], mapping: Mapping[str, str]
) -> tuple[int, int, int, int]:
    """The row's prompt, output and cached tokens and its priority (0 when not given)."""

    def whole(canon: str, low: int, high: int, what: str) -> int:
        return _parse_int(path, line, mapping[canon], values[canon], low=low, high=high, what=what)

    tokens = f"a whole number of tokens in [1, {MAX_TOKENS}]"
    prompt = whole("prompt_tokens", 1, MAX_TOKENS, tokens)
    output = whole("output_tokens", 1, MAX_TOKENS, tokens)
    cached = 0
    if "cached_tokens" in values:
        what = f"a whole number of tokens in [0, prompt_tokens={prompt}]"
        cached = whole("cached_tokens", 0, prompt, what)
    priority = 0
    if "priority" in values:
        what = f"a whole number in [{I64_MIN}, {I64_MAX}]"
        priority = whole("priority", I64_MIN, I64_MAX, what)
    return prompt, output, cached, priority


def _shared_prefix(
    path: str, line: int, values: Mapping[str, object], mapping: Mapping[str, str], cols: _Columns
) -> None:
    """Record the row's ``prefix_tokens``: every row that gives it gives the same."""
    col = mapping["prefix_tokens"]
    what = f"a whole number of tokens in [0, {MAX_TOKENS}]"
    shared = _parse_int(path, line, col, values["prefix_tokens"], low=0, high=MAX_TOKENS, what=what)
    if cols.prefix_tokens is None:
        cols.prefix_tokens = (line, shared)
    elif shared != cols.prefix_tokens[1]:
        first_line, first = cols.prefix_tokens
        raise TraceError(
            path,
            line,
            col,
            f"is {shared}, but line {first_line} gave {first}: every row shares the same"
            " prefix length",
        )


def _key(
    path: str, line: int, values: Mapping[str, object], mapping: Mapping[str, str], canon: str
) -> str | None:
    """The row's ``session_id`` or ``prefix_id`` (``canon``) as a name, ``None`` when absent."""
    if canon not in values:
        return None
    raw = values[canon]
    if not isinstance(raw, (str, int)) or isinstance(raw, bool):
        raise TraceError(path, line, mapping[canon], f"expected a name or number, got {_show(raw)}")
    return str(raw).strip()


def _parse_hashes(path: str, line: int, col: str, raw: object) -> tuple[int, ...]:
    """Block hashes: a JSON array of whole numbers, or (in CSV) such an array or numbers
    separated by spaces, ``;`` or ``|``."""
    items: list[object]
    if isinstance(raw, list):
        items = list(raw)
    elif isinstance(raw, str) and not isinstance(raw, Number):
        text = raw.strip()
        if text.startswith("["):
            try:
                parsed = json_loads(text)
            except ValueError:
                raise TraceError(path, line, col, f"not a JSON array: {_show(raw)}") from None
            if not isinstance(parsed, list):
                raise TraceError(path, line, col, f"not a JSON array: {_show(raw)}")
            items = list(parsed)
        else:
            items = [t for t in text.replace(";", " ").replace("|", " ").split() if t]
    else:
        raise TraceError(path, line, col, f"expected a list of block hashes, got {_show(raw)}")
    return tuple(
        _parse_int(
            path,
            line,
            f"{col}[{k}]",
            item,
            low=0,
            high=U64_MAX,
            what="a block hash, a whole number in [0, 2**64 - 1]",
        )
        for k, item in enumerate(items)
    )


def _read_csv(path: str, text: str, unit: float, cols: _Columns) -> None:
    reader = csv.reader(io.StringIO(text, newline=""))
    header: list[str] | None = None
    mapping: dict[str, str] = {}
    header_line = 0
    # csv refuses a field above 128 KiB, but an ignored column (a prompt's text) may be far
    # longer; no field can be longer than the file, which is already in memory.
    limit = csv.field_size_limit()
    raised = len(text) >= limit  # the limit is process-wide: touch it only when it matters
    if raised:
        csv.field_size_limit(len(text) + 1)
    try:
        for cells in reader:
            line = reader.line_num
            if not cells or all(not c.strip() for c in cells):
                continue
            if header is None:
                header = [c.strip() for c in cells]
                header_line = line
                mapping = _map_columns(path, line, header)
                continue
            if len(cells) != len(header):
                raise TraceError(
                    path,
                    line,
                    None,
                    f"row has {len(cells)} cells but the header (line {header_line})"
                    f" has {len(header)}",
                )
            _add_row(path, line, dict(zip(header, cells)), mapping, unit, cols)
    except csv.Error as err:
        raise TraceError(path, reader.line_num, None, f"malformed CSV: {err}") from None
    finally:
        if raised:
            csv.field_size_limit(limit)
    if header is None:
        raise TraceError(path, 0, None, "is empty: expected a header row and requests")


def _read_jsonl(path: str, text: str, unit: float, cols: _Columns) -> None:
    # JSON Lines ends a record at "\n" (or "\r\n") only: str.splitlines() would also
    # split inside a string holding U+2028, U+2029 or U+0085, which are valid there (and
    # json.dumps(ensure_ascii=False) writes them), and shift every later line number.
    for line, raw_line in enumerate(text.split("\n"), start=1):
        if raw_line.endswith("\r"):
            raw_line = raw_line[:-1]
        if not raw_line.strip(" \t"):
            continue
        try:
            obj = json_loads(raw_line)
        except json.JSONDecodeError as err:
            raise TraceError(
                path, line, None, f"is not valid JSON: {err.msg} (column {err.colno})"
            ) from None
        except DuplicateKey as err:
            raise TraceError(path, line, err.key, "appears twice in the object") from None
        if not isinstance(obj, dict):
            raise TraceError(path, line, None, f"expected a JSON object, got {_json_kind(obj)}")
        mapping = _map_columns(path, line, list(obj))
        _add_row(path, line, obj, mapping, unit, cols)


def load_trace(
    path: str | os.PathLike[str],
    *,
    time_unit: str = "s",
    format: str | None = None,
    hash_block: int = 512,
    prefix_tokens: int = 0,
) -> Workload:
    """Read a request trace from a CSV or JSON Lines file.

    Columns (CSV header or JSON keys): ``arrival_s``, ``prompt_tokens`` and
    ``output_tokens``, required; ``cached_tokens`` and ``priority``, optional; any other
    column is ignored. The names in :data:`FIELD_ALIASES` are accepted too. Arrival times
    are numbers >= 0 in ``time_unit`` (``"s"``, ``"ms"`` or ``"us"``), or ISO-8601 date-times
    in every row (then counted from the earliest; naive ones are read as UTC). The format
    is ``format`` (``"csv"`` or ``"jsonl"``), or else the file suffix (``.csv``,
    ``.jsonl``/``.ndjson``/``.json``), or else sniffed.

    Rows are kept in file order (request ``i`` is the ``i``-th row); the simulator admits
    them in arrival order. A malformed row raises :class:`TraceError` naming the file, line
    and field; no row is dropped, clamped or repaired.

    Numbers are read exactly from their text: token counts are whole numbers in
    ``[1, 2**63 - 1]`` (cached tokens up to the prompt; a priority is any signed 64-bit
    integer), and a count written with a fraction or an exponent (``1.5e3``) is trusted
    only up to 2**53, where a float still holds every whole number; arrival times are at
    most 2**53 in ``time_unit``. JSON Lines records end at ``\\n`` (or ``\\r\\n``) only, and
    an object that names a key twice is an error. A CSV column that is not read may be of
    any length.

    Sharing, for the serving scheduler's prefix cache: ``hash_ids`` (Mooncake's block
    hashes of the prompt, ``hash_block`` tokens each: equal hashes are equal blocks),
    ``session_id`` (rows of one session are turns of one token stream, each prompt
    extending the last) and ``prefix_id`` (rows with one id share their first
    ``prefix_tokens`` prompt tokens), all optional. A ``prefix_tokens`` column gives that
    length in the file (the same on every row that has it); the argument, when not 0,
    overrides it.
    """
    name = _checked(path, time_unit, format, hash_block, prefix_tokens)
    data = _read_file(name)
    fmt = _format_of(name, format)
    text = None
    if fmt is None:  # sniffed: JSON Lines when the text opens an object
        text = _decode(name, data)
        fmt = "jsonl" if text.lstrip().startswith("{") else "csv"
    unit = _TIME_UNITS[time_unit]
    fast = _read_fast(data, fmt, unit)
    if fast is not None:
        return _fast_workload(name, fast, hash_block, prefix_tokens)
    cols = _rows(name, _decode(name, data) if text is None else text, fmt, unit)
    return _workload_of(name, cols, hash_block, prefix_tokens)


def _checked(
    path: object, time_unit: object, format: object, hash_block: object, prefix_tokens: object
) -> str:
    """:func:`load_trace`'s arguments checked; the path as a string."""
    name = check_path("path", path)
    if not isinstance(time_unit, str) or time_unit not in _TIME_UNITS:
        raise ValueError(f"time_unit must be one of {sorted(_TIME_UNITS)}, got {show(time_unit)}")
    if format is not None and (not isinstance(format, str) or format not in ("csv", "jsonl")):
        raise ValueError(f"format must be None, 'csv' or 'jsonl', got {show(format)}")
    for what, value, low in (("hash_block", hash_block, 1), ("prefix_tokens", prefix_tokens, 0)):
        if type(value) is not int or not low <= value <= MAX_TOKENS:
            raise ValueError(f"{what} must be an int in [{low}, {MAX_TOKENS}], got {value!r}")
    return name


def _format_of(name: str, format: str | None) -> str | None:
    """``format``, else the suffix's, else ``None`` (to be sniffed from the text)."""
    if format is not None:
        return format
    suffix = os.path.splitext(name)[1].lower()
    if suffix == ".csv":
        return "csv"
    if suffix in (".jsonl", ".ndjson", ".json"):
        return "jsonl"
    return None


def _read_fast(data: bytes, fmt: str, unit: float) -> tuple[Any, ...] | None:
    """The columns of the trace ``data`` as the Rust core reads them, or ``None`` when it
    leaves the file to the reader of this module: any file this reader refuses, and the
    forms the core does not read (see ``rust/core/src/trace``). This reader is the
    reference, so its errors are the only ones raised."""
    try:
        from ..._core import read_trace
    except ImportError:  # a source tree without the compiled core
        return None
    return read_trace(data, fmt, unit)


def _fast_workload(
    name: str, columns: tuple[Any, ...], hash_block: int, prefix_tokens: int
) -> Workload:
    """The workload of the columns :func:`_read_fast` returned, as :func:`_workload_of`
    builds it from the same file (the core checked every value as it read it)."""
    arrival, prompt, output, cached, priority, group, session, hash_ids, shared = columns
    if prefix_tokens == 0 and shared is not None:
        prefix_tokens = shared
    return Workload._of_checked(
        arrival_s=arrival,
        prompt_tokens=prompt,
        output_tokens=output,
        cached_tokens=cached,
        priority=priority,
        source=f"trace {name} ({len(arrival)} requests)",
        group=group,
        session=session,
        hash_ids=hash_ids,
        prefix_tokens=prefix_tokens if group else 0,
        hash_block=hash_block,
    )


def _rows(name: str, text: str, fmt: str, unit: float) -> _Columns:
    """Every row of the file, read into columns; date-time arrivals counted from the first."""
    cols = _Columns()
    if fmt == "csv":
        _read_csv(name, text, unit, cols)
    elif fmt == "jsonl":
        _read_jsonl(name, text, unit, cols)
    else:  # pragma: no cover - format was checked above
        raise AssertionError(fmt)
    if not cols.arrival:
        raise TraceError(name, 0, None, "holds no requests")
    if cols.time_kind == "datetime":
        first = min(cols.arrival)
        cols.arrival = [a - first for a in cols.arrival]
    return cols


def _dense(keys: list[str | None], none: int) -> tuple[int, ...]:
    """Names as dense ids in order of first appearance; ``none`` where there is none."""
    index: dict[str, int] = {}
    out = []
    for k in keys:
        out.append(none if k is None else index.setdefault(k, len(index)))
    return tuple(out)


def _workload_of(name: str, cols: _Columns, hash_block: int, prefix_tokens: int) -> Workload:
    """The workload of the rows read; rows without a session are sessions of their own."""
    has_session = any(k is not None for k in cols.session)
    has_prefix = any(k is not None for k in cols.prefix)
    if prefix_tokens == 0 and cols.prefix_tokens is not None:
        prefix_tokens = cols.prefix_tokens[1]
    if has_session:
        cols.session = [f"\0{i}" if k is None else k for i, k in enumerate(cols.session)]
    return Workload(
        arrival_s=tuple(cols.arrival),
        prompt_tokens=tuple(cols.prompt),
        output_tokens=tuple(cols.output),
        cached_tokens=tuple(cols.cached),
        priority=tuple(cols.priority),
        source=f"trace {name} ({len(cols.arrival)} requests)",
        group=_dense(cols.prefix, -1) if has_prefix else (),
        session=_dense(cols.session, -1) if has_session else (),
        hash_ids=tuple(cols.hash_ids) if any(cols.hash_ids) else (),
        prefix_tokens=prefix_tokens if has_prefix else 0,
        hash_block=hash_block,
    )
