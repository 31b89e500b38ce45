"""Argument checks shared by both backends.

The pure twin calls these on every argument; the Rust binding calls them only on the slow
path (an argument that is not a plain in-range ``int``), so both raise the same exception
class with the same message from one table (``_messages.json``).
"""

from __future__ import annotations

import json
import operator
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn, Union

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


RequestId = Union[int, str]
"""A serving request id as the caller gives it back: an int or a str."""


def as_request_id(name: str, value: object) -> RequestId:
    """A serving request id: an int in ``0..=2**64-1`` (``as_u64``'s rules) or a ``str``
    (a subclass's value as a plain ``str``, so ids compare and hash as strings do)."""
    if type(value) is str:
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if _is_bool(value):
        raise TypeError(message("bool_not_request_id", name=name, value=bool(value)))
    if not hasattr(type(value), "__index__"):
        kind = type(value).__name__
        raise TypeError(
            message("not_request_id", name=name, type_name=kind, value_repr=repr(value))
        )
    return as_u64(name, value)


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


# Where each backend's classes live: the public module a message names, by the module a
# class reports (the twin's serving classes are defined in pure_values and pure_serving).
_BACKENDS = {
    "chunked_prefill._core": ("rust", "chunked_prefill._core"),
    "chunked_prefill.pure": ("pure", "chunked_prefill.pure"),
    "chunked_prefill.pure_values": ("pure", "chunked_prefill.pure_serving"),
    "chunked_prefill.pure_serving": ("pure", "chunked_prefill.pure_serving"),
}
_EXPECTED_CLASS = {
    "not_config": "Config",
    "not_serving_config": "ServingConfig",
    "not_batch": "Batch",
    "not_batch_item": "BatchItem",
    "not_chunk": "Chunk",
}
# The twin's module of each class (the one the other backend's object is expected from).
_PURE_MODULE = {
    "Config": "chunked_prefill.pure",
    "Chunk": "chunked_prefill.pure",
    "ServingConfig": "chunked_prefill.pure_serving",
    "Batch": "chunked_prefill.pure_serving",
    "BatchItem": "chunked_prefill.pure_serving",
}


def type_error(key: str, name: str, value: object, **fields: Any) -> TypeError:
    """A ``TypeError`` for ``value`` of the wrong type, from the table's ``key`` message
    (``fields`` fill its other fields).

    The same class of the other backend (a pure ``Config`` given to the Rust
    ``Scheduler``, a Rust ``Batch`` to the twin's ``update``) gets the ``other_backend``
    message, which names both backends, instead of the puzzling "must be a Config, got
    Config".
    """
    cls = type(value)
    given = _BACKENDS.get(cls.__module__)
    class_name = _EXPECTED_CLASS.get(key)
    if given is not None and class_name == cls.__name__:
        other, other_module = given
        backend = "pure" if other == "rust" else "rust"
        module = _PURE_MODULE[class_name] if backend == "pure" else "chunked_prefill._core"
        items = key in ("not_chunk", "not_batch_item")
        return TypeError(
            message(
                "other_backend",
                name=f"each item of {name}" if items else name,
                class_name=class_name,
                backend=backend,
                module=module,
                other=other,
                other_module=other_module,
            )
        )
    return TypeError(
        message(key, name=name, type_name=cls.__name__, value_repr=repr(value), **fields)
    )


def not_iterable(name: str, what: str, value: object) -> TypeError:
    """The ``TypeError`` for an argument ``name`` that should be an iterable of ``what``
    (``iter()`` refused it)."""
    return type_error("not_iterable", name, value, what=what)


def iterate(name: str, what: str, value: object) -> Iterator[Any]:
    """``iter(value)``, or the ``TypeError`` :func:`not_iterable` when it is no iterable.
    Only ``iter()`` is guarded: an exception raised while iterating propagates as is."""
    try:
        return iter(value)  # type: ignore[call-overload, no-any-return]
    except TypeError:
        raise not_iterable(name, what, value) from None


def token_pairs(mapping: Any) -> Iterator[tuple[Any, Any]]:
    """The ``(request_id, token_id)`` pairs of ``update``'s mapping ``token_ids``: its
    ``items()`` must be an iterable (``not_iterable``) of pairs, each unpacked as Python
    unpacks two names (a tuple, a list...; anything else is ``not_pair``)."""
    for pair in iterate("token_ids.items()", "(request_id, token_id) pairs", mapping.items()):
        yield as_pair(pair)


def as_pair(pair: Any) -> tuple[Any, Any]:
    """One entry of a mapping's ``items()``: two values, or the ``TypeError`` ``not_pair``."""
    if type(pair) is tuple and len(pair) == 2:
        return pair
    try:
        key, value = pair
    except (TypeError, ValueError):
        raise type_error("not_pair", "token_ids", pair) from None
    return key, value


def reject_config(name: str, value: object) -> NoReturn:
    """Raise the ``TypeError`` for an argument that should have been a ``Config``."""
    raise type_error("not_config", name, value)


def reject_chunk(name: str, value: object) -> NoReturn:
    """Raise the ``TypeError`` for an item of ``chunks`` that is not a ``Chunk``."""
    raise type_error("not_chunk", name, value)


U32_MAX = (1 << 32) - 1


def as_token(name: str, value: object) -> int:
    """Return ``value`` as a token id in ``0..=2**32-1``; any int outside it (negative or
    above 2**64 alike) is the ``ValueError`` ``token_id_range``."""
    if type(value) is int and 0 <= value <= U32_MAX:
        return value
    v = _index(name, value)
    if not 0 <= v <= U32_MAX:
        raise ValueError(message("token_id_range", name=name, value=v))
    return v


def _numpy_array(value: object) -> Any:
    """``value`` if it is a numpy array, else ``None`` (numpy is not imported for this)."""
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, np.ndarray):
        return value
    return None


def as_tokens(name: str, values: object) -> list[int]:
    """The token ids of a list, tuple, other ``collections.abc.Sequence`` or numpy array, each
    checked by :func:`as_token` and named ``name[i]``; the caller has refused ``str`` and
    ``bytes``. A 1-D numpy integer array takes a vectorised range check."""
    arr = _numpy_array(values)
    if arr is not None and arr.ndim == 1 and arr.dtype.kind in "iu":
        if arr.size:
            bad = (arr < 0) | (arr > U32_MAX)
            if bad.any():
                i = int(bad.argmax())
                raise ValueError(message("token_id_range", name=f"{name}[{i}]", value=int(arr[i])))
        out: list[int] = arr.tolist()
        return out
    items = values if isinstance(values, (list, tuple)) else list(values)  # type: ignore[call-overload]
    return [as_token(f"{name}[{i}]", v) for i, v in enumerate(items)]


def is_sequence(value: object) -> bool:
    """Whether ``value`` is taken as a sequence of ids: a list, a tuple, a numpy array of at
    least one dimension or any other ``collections.abc.Sequence`` except ``str``, ``bytes``
    and ``bytearray`` (the Rust binding's ``Vec`` extraction accepts the same)."""
    if isinstance(value, (list, tuple)):
        return True
    if isinstance(value, (str, bytes, bytearray)):
        return False
    arr = _numpy_array(value)
    if arr is not None:
        return bool(arr.ndim >= 1)
    return isinstance(value, Sequence)


def as_prompt(value: object) -> list[int] | int:
    """A prompt: its token ids (a sequence, see :func:`is_sequence`) or an int length
    (``as_u64`` named ``prompt``). ``bool``, ``str``, ``bytes`` and anything else are the
    ``TypeError`` ``prompt_type``."""
    if isinstance(value, bool):
        raise type_error("prompt_type", "prompt", value)
    if type(value) is int:
        return as_u64("prompt", value)
    if is_sequence(value):
        return as_tokens("prompt", value)
    if isinstance(value, (str, bytes, bytearray)) or not hasattr(type(value), "__index__"):
        raise type_error("prompt_type", "prompt", value)
    return as_u64("prompt", value)


def as_number(name: str, value: object) -> float:
    """Return ``value`` (an ``int`` or a ``float``, not a ``bool``) as a float; anything else
    is the ``TypeError`` ``not_number``."""
    if isinstance(value, bool):
        raise type_error("not_number", name, value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, int) or hasattr(type(value), "__index__"):
        return float(operator.index(value))  # type: ignore[arg-type]
    raise type_error("not_number", name, value)


def make_final(*classes: type) -> None:
    """Refuse subclasses of ``classes`` as the Rust classes do (PyO3 classes are final), with
    CPython's words for them."""
    for cls in classes:
        name = f"{cls.__module__}.{cls.__qualname__}"
        cls.__init_subclass__ = _refuse_subclass(name)  # type: ignore[method-assign]


def _refuse_subclass(name: str) -> Any:
    def refuse(sub: type, /, **kwargs: Any) -> None:
        raise TypeError(f"type '{name}' is not an acceptable base type")

    return classmethod(refuse)
