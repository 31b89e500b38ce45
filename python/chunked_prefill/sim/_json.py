"""Strict JSON reading for traces and engine profiles.

``json.loads`` drops what a strict reader must report: the last of two equal keys wins, a
number becomes a float that may already be rounded (``9007199254740993.0``), and a number of
more than 4 300 digits raises a ``ValueError`` that says nothing of where it is. Here every
number stays its exact text (:class:`Number`), decided by the caller where it knows the
field, and a repeated key raises :class:`DuplicateKey`.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal, localcontext
from typing import Any

__all__ = ["FLOAT_EXACT", "DuplicateKey", "Number", "exact", "loads", "whole"]


class Number(str):
    """The text of a JSON number, exactly as written (``"12"``, ``"1.5e3"``)."""

    __slots__ = ()


class DuplicateKey(ValueError):
    """A JSON object names ``key`` twice."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"the key {key!r} appears twice in one object")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(key)
        out[key] = value
    return out


def loads(text: str) -> Any:
    """``json.loads(text)`` with exact :class:`Number` texts and no repeated keys.

    ``NaN`` and ``Infinity`` come back as :class:`Number` texts too, for the caller to
    refuse. Raises ``json.JSONDecodeError`` or :class:`DuplicateKey`.
    """
    try:
        return json.loads(
            text,
            object_pairs_hook=_object,
            parse_int=Number,
            parse_float=Number,
            parse_constant=Number,
        )
    except RecursionError:  # arrays or objects nested thousands deep
        raise json.JSONDecodeError("nested too deeply", text, 0) from None


_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_INTEGER = re.compile(r"[+-]?[0-9]+")
FLOAT_EXACT = 2**53
"""Up to here a float holds every whole number; a number written with a fraction or an
exponent is trusted as a whole number only up to it (a tool that wrote
``9007199254740993.0`` held a float that had already rounded)."""


def exact(text: str) -> tuple[Decimal, bool] | None:
    """The exact value of the decimal number ``text`` and whether it was written as a
    plain integer (no fraction, no exponent); ``None`` when it is not a decimal number."""
    text = text.strip()
    if not _DECIMAL.fullmatch(text):
        return None
    return Decimal(text), bool(_INTEGER.fullmatch(text))


def whole(value: Decimal, written_as_integer: bool) -> int | None:
    """``value`` as an int when it is an exact whole number, else ``None``.

    A value written with a fraction or an exponent counts only up to :data:`FLOAT_EXACT`;
    callers check the range (whose bounds are far below ``10**30``) first.
    """
    if not written_as_integer and abs(value) > FLOAT_EXACT:
        return None
    with localcontext() as ctx:
        ctx.prec = 80
        if value != value.to_integral_value():
            return None
        return int(value)
