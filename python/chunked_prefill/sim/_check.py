"""Argument checks of the simulator's public functions, run before any work.

The simulator's rule (``docs/simulate.md``, "Python API"): a number of the wrong kind or out
of range is a ``ValueError`` naming the argument, its rule and the value (``requests must be
an int in [1, ...], got True``), as the planner's ``SimConfig`` has always said; an argument
that is not the kind of object asked for (a workload, configuration, engine, list,
callback) is a ``TypeError`` naming it. ``bool`` is never a number; numpy integers and
floats are numbers.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = [
    "boolean",
    "check_callback",
    "check_engine",
    "count",
    "items",
    "kind",
    "path",
    "real",
    "show",
]


def show(value: object) -> str:
    """``repr(value)``, shortened when long (a huge int, a long string)."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:30]}...{text[-10:]} ({len(text)} characters)"


def _is_int(value: object) -> bool:
    # numbers.Integral covers numpy integers; bool and numpy.bool_ are not counts.
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def count(name: str, value: object, low: int, high: int, *, none: bool = False) -> Any:
    """``value`` as an int in ``[low, high]`` (``None`` allowed when ``none``)."""
    if none and value is None:
        return None
    if not _is_int(value) or type(value).__name__ == "bool_" or not low <= value <= high:  # type: ignore[operator]
        rule = f"an int in [{low}, {high}]" + (" or None" if none else "")
        raise ValueError(f"{name} must be {rule}, got {show(value)}")
    return int(value)  # type: ignore[call-overload]


def real(
    name: str,
    value: object,
    low: float,
    high: float = math.inf,
    *,
    low_open: bool = False,
    high_open: bool = False,
    none: bool = False,
    inf: bool = False,
) -> Any:
    """``value`` as a float in the interval (``inf`` allows ``high=inf`` itself)."""
    if none and value is None:
        return None
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    ok = ok and type(value).__name__ != "bool_"
    if ok:
        v = float(value)  # type: ignore[arg-type]
        ok = (v > low if low_open else v >= low) and (v < high if high_open else v <= high)
        ok = ok and (math.isfinite(v) or (inf and v == math.inf))
    if not ok:
        left = "(" if low_open else "["
        top = "inf]" if inf else f"{high:g}" + (")" if high_open or math.isinf(high) else "]")
        rule = f"a number in {left}{low:g}, {top}" + (" or None" if none else "")
        raise ValueError(f"{name} must be {rule}, got {show(value)}")
    return float(value)  # type: ignore[arg-type]


def boolean(name: str, value: object) -> bool:
    """``value`` when it is a ``bool`` (numpy's too)."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {show(value)}")


def items(name: str, value: object, what: str, *, empty: bool = False) -> list[Any]:
    """The values of an iterable argument, at least one; a string, bytes or mapping is
    not a list of values."""
    if isinstance(value, (str, bytes, bytearray, Mapping)) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be an iterable of {what}, got {show(value)}")
    out = list(value)
    if not out and not empty:
        raise ValueError(f"{name} must hold at least one value, got none")
    return out


def kind(name: str, value: object, types: tuple[type, ...], what: str) -> None:
    """A ``TypeError`` naming ``name`` unless ``value`` is one of ``types``."""
    if not isinstance(value, types):
        raise TypeError(f"{name} must be {what}, got {show(value)}")


def check_callback(name: str, value: object) -> Callable[..., Any] | None:
    """``value`` when it is ``None`` or callable."""
    if value is not None and not callable(value):
        raise TypeError(f"{name} must be None or a callable, got {show(value)}")
    return value


def check_engine(engine: object, name: str = "engine") -> None:
    """A ``TypeError`` unless ``engine`` is a step-time model (an ``EngineModel`` or a
    ``RooflineModel``)."""
    from .engines.linear import EngineModel
    from .engines.roofline import RooflineModel

    kind(name, engine, (EngineModel, RooflineModel), "an EngineModel or a RooflineModel")


def path(name: str, value: object) -> str:
    """``value`` as a file name: a ``str`` or ``os.PathLike`` of one."""
    text = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if not isinstance(text, str) or not text or "\0" in text:
        raise TypeError(
            f"{name} must be a file path (a non-empty str or os.PathLike), got {show(value)}"
        )
    return text
