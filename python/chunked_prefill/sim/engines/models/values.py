"""Reading one value of a ``config.json`` exactly: a count (:func:`_count`), whether a key
is set (:func:`_present`), a flag (:func:`_flag`); every error names the file and the key."""

from __future__ import annotations

from typing import Any

from ..._json import Number, exact, whole
from ..errors import ModelConfigError
from ..names import _kind

MAX_MODEL_COUNT = 10**12
"""The largest count a ``config.json`` key may hold (layers, sizes, heads, experts): far
above any real model, low enough that every figure derived from them stays exact."""


def _count(
    path: str, table: dict[str, Any], key: str, default: int | None = None, label: str = ""
) -> int:
    """A positive whole number of ``table[key]``, at most :data:`MAX_MODEL_COUNT`
    (``default`` when absent or null); errors name the key as ``label`` when given."""
    value = table.get(key)
    name = label or key
    if value is None and default is not None:
        return default
    if value is None and key not in table:
        raise ModelConfigError(f"{path}: key {name!r}: missing (a positive whole number)")
    parsed = exact(value) if isinstance(value, Number) else None
    number = whole(*parsed) if parsed is not None and abs(parsed[0]) < 10**30 else None
    if number is None or number < 1:
        raise ModelConfigError(
            f"{path}: key {name!r}: expected a positive whole number, got {_kind(value)}"
        )
    if number > MAX_MODEL_COUNT:
        raise ModelConfigError(
            f"{path}: key {name!r}: expected a positive whole number up to 10**12, got"
            f" {_kind(value)}"
        )
    return number


def _present(table: dict[str, Any], key: str) -> bool:
    """Whether ``table[key]`` is set: not absent, null, 0, false or empty."""
    value = table.get(key)
    if isinstance(value, Number):
        parsed = exact(value)
        return parsed is None or parsed[0] != 0
    return value not in (None, False, 0) and value != [] and value != {}


def _flag(path: str, table: dict[str, Any], key: str, default: bool) -> bool:
    value = table.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ModelConfigError(f"{path}: key {key!r}: expected true or false, got {_kind(value)}")
    return value
