"""How the catalog reads what a user types: a name as its alias key, a JSON value as words
for a message, a JSON object from a file (shared by the model and the GPU readers)."""

from __future__ import annotations

from typing import Any

from .._files import read_json_object
from .._json import Number


def _lookup(text: str) -> str:
    """``text`` as an alias key: lower case, spaces and underscores read as ``-``."""
    return "-".join(text.strip().lower().replace("_", " ").split())


def _kind(value: object) -> str:
    if isinstance(value, Number):
        return value if len(value) <= 40 else f"a {len(value)}-character number"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else "a long string"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


def _read_json(path: str, error: type[ValueError]) -> dict[str, Any]:
    return read_json_object(path, error)
