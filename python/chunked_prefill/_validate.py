"""Argument checks shared by both backends.

The pure twin calls these on every argument; the Rust binding calls them only on the slow
path (an argument that is not a plain in-range ``int``), so both raise the same exception
class with the same message from one table (``_messages.json``).
"""

from __future__ import annotations

import json
import operator
from pathlib import Path
from typing import Any, NoReturn

MESSAGES: dict[str, str] = json.loads(
    (Path(__file__).with_name("_messages.json")).read_text(encoding="utf-8")
)

U64_MAX = (1 << 64) - 1
U128_MAX = (1 << 128) - 1
COUNTER_MAX = (1 << 127) - 1
I64_MIN = -(1 << 63)
I64_MAX = (1 << 63) - 1


def message(key: str, /, **fields: Any) -> str:
    """Render the message ``key`` of the table with ``fields``."""
    return MESSAGES[key].format(**fields)


def _is_bool(value: object) -> bool:
    """``value`` is a ``bool`` or a numpy bool (``np.True_``, which is no ``bool``)."""
    if isinstance(value, bool):
        return True
    cls = type(value)
    return cls.__module__ == "numpy" and cls.__name__ in ("bool", "bool_")


def _not_int(name: str, value: object) -> NoReturn:
    if _is_bool(value):
        raise TypeError(message("bool_not_int", name=name, value=bool(value)))
    raise TypeError(
        message("not_int", name=name, type_name=type(value).__name__, value_repr=repr(value))
    )


def _index(name: str, value: object) -> int:
    """``operator.index(value)``, refusing ``bool`` (a flag is not a count)."""
    if _is_bool(value):
        _not_int(name, value)
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        _not_int(name, value)


def _unsigned(name: str, value: object, limit: int, key: str) -> int:
    """``value`` as an int in ``0..=limit``; above it, the ``OverflowError`` of ``key``."""
    v = _index(name, value)
    if v < 0:
        raise ValueError(message("negative", name=name, value=v))
    if v > limit:
        raise OverflowError(message(key, name=name, value=v))
    return v


def as_u64(name: str, value: object) -> int:
    """Return ``value`` as an int in ``0..=2**64-1`` or raise naming ``name``."""
    if type(value) is int and 0 <= value <= U64_MAX:
        return value
    return _unsigned(name, value, U64_MAX, "above_u64")


def as_u128(name: str, value: object) -> int:
    """Return ``value`` as an int in ``0..=2**128-1`` (a counter) or raise naming ``name``."""
    return _unsigned(name, value, U128_MAX, "above_u128")


def as_counter(name: str, value: object) -> int:
    """Return ``value`` as a restorable counter: ``0..=2**127-1``, so that even a run of
    2**63 steps of 2**64 tokens each cannot wrap the 128-bit counters."""
    return _unsigned(name, value, COUNTER_MAX, "above_counter")


def as_i64(name: str, value: object) -> int:
    """Return ``value`` as a signed 64-bit int or raise naming ``name``."""
    if type(value) is int and I64_MIN <= value <= I64_MAX:
        return value
    v = _index(name, value)
    if not I64_MIN <= v <= I64_MAX:
        raise OverflowError(message("outside_i64", name=name, value=v))
    return v


def as_optional_u64(name: str, value: object) -> int | None:
    """``None`` or :func:`as_u64`."""
    return None if value is None else as_u64(name, value)


def as_bool(name: str, value: object) -> bool:
    """Return ``value`` if it is a ``bool`` (a numpy bool as a ``bool``); anything else (even
    0 or 1) is a ``TypeError``."""
    if isinstance(value, bool):
        return value
    if _is_bool(value):
        return bool(value)
    raise TypeError(
        message("not_bool", name=name, type_name=type(value).__name__, value_repr=repr(value))
    )


_BACKENDS = {"chunked_prefill._core": "rust", "chunked_prefill.pure": "pure"}
_EXPECTED_CLASS = {
    "not_config": "Config",
    "not_serving_config": "ServingConfig",
    "not_batch": "Batch",
    "not_chunk": "Chunk",
}


def type_error(key: str, name: str, value: object) -> TypeError:
    """A ``TypeError`` for ``value`` of the wrong type, from the table's ``key`` message.

    The same class of the other backend (a pure ``Config`` given to the Rust
    ``Scheduler``) gets the ``other_backend`` message, which says so, instead of the
    puzzling "must be a Config, got Config".
    """
    cls = type(value)
    other = _BACKENDS.get(cls.__module__)
    if other is not None and _EXPECTED_CLASS.get(key) == cls.__name__:
        module = next(m for m, b in _BACKENDS.items() if b != other)
        return TypeError(
            message(
                "other_backend",
                name=f"each item of {name}" if key == "not_chunk" else name,
                class_name=cls.__name__,
                backend=_BACKENDS[module],
                module=module,
                other=other,
                other_module=cls.__module__,
            )
        )
    return TypeError(
        message(key, name=name, type_name=type(value).__name__, value_repr=repr(value))
    )


def reject_config(name: str, value: object) -> NoReturn:
    """Raise the ``TypeError`` for an argument that should have been a ``Config``."""
    raise type_error("not_config", name, value)


def reject_chunk(name: str, value: object) -> NoReturn:
    """Raise the ``TypeError`` for an item of ``chunks`` that is not a ``Chunk``."""
    raise type_error("not_chunk", name, value)
