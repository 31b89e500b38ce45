"""Command-line plumbing shared by ``chunked-prefill plan`` and ``chunked-prefill simulate``.

Every bad input ends as one line on stderr, ``PROG: error: MESSAGE``, and exit status 2,
whether argparse or a later check finds it. A numeric flag is parsed and range-checked in
one place (:func:`int_flag`, :func:`float_flag`, :func:`list_of`), when the command line is
read, so a message names the flag (argparse adds ``argument --flag:``), the value as typed
and the rule, and nothing runs before the whole command line is known to be good.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn, TypeVar

__all__ = [
    "U64_MAX",
    "ArgumentParser",
    "SubcommandParser",
    "UsageError",
    "float_flag",
    "int_flag",
    "list_of",
    "show",
]

T = TypeVar("T")

U64_MAX = 2**64 - 1
"""The scheduler's counts (chunk size, token budget, caps, prompt lengths) are u64."""

_INT = re.compile(r"[+-]?[0-9]+")
# More digits than any bound here can hold; such text is refused before int() sees it,
# so a 5 000-digit value gets the range message, not Python's int-conversion limit.
_MAX_DIGITS = 40


class UsageError(Exception):
    """A command line that cannot run; the message names the flag, the value and the rule."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse with the one-line error form ``PROG: error: MESSAGE`` (exit status 2)."""

    def error(self, message: str) -> NoReturn:
        fail(self.prog, message)


class SubcommandParser(ArgumentParser):
    """A subcommand's parser (``add_subparsers(parser_class=SubcommandParser)``): an argument
    it does not know is its own error, ``chunked-prefill simulate: error: unrecognized
    arguments: ...``; argparse would leave it to the top parser, whose message names no
    subcommand."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def fail(prog: str, message: str) -> NoReturn:
    """Print ``PROG: error: MESSAGE`` as one line on stderr and exit with status 2."""
    print(f"{prog}: error: {one_line(message)}", file=sys.stderr)
    sys.exit(2)


def one_line(message: str) -> str:
    """``message`` with its line breaks folded, so an error is always one line."""
    return " ".join(message.split())


def memory_message(err: MemoryError) -> str:
    """The CLI's line for a run that does not fit in memory: the core names what was too big
    (``request 0's prompt of ... token ids does not fit in memory``); Python's own
    ``MemoryError`` usually says nothing, so the line says what happened."""
    text = one_line(str(err))
    return text or "the run does not fit in memory (MemoryError)"


def show(text: str, limit: int = 60) -> str:
    """``repr(text)``, shortened in the middle when it is long (a 5 000-digit number)."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[: limit // 2]!r}...{text[-10:]!r} ({len(text)} characters)"


def _interval(low: float, high: float, low_open: bool = False, high_open: bool = False) -> str:
    def fmt(x: float) -> str:
        if isinstance(x, int):
            return str(x)
        return "inf" if math.isinf(x) else f"{x:g}"

    return f"{'(' if low_open else '['}{fmt(low)}, {fmt(high)}{')' if high_open else ']'}"


def int_flag(low: int, high: int, *, none: bool = False) -> Callable[[str], int | None]:
    """A parser of a whole number in ``[low, high]`` (or ``none`` when ``none`` is set)."""
    rule = f"a whole number in {_interval(low, high)}" + (" or 'none'" if none else "")

    def parse(text: str) -> int | None:
        stripped = text.strip()
        if none and stripped.lower() == "none":
            return None
        if not _INT.fullmatch(stripped):
            raise argparse.ArgumentTypeError(f"expected {rule}, got {show(text)}")
        digits = stripped.lstrip("+-").lstrip("0")
        if len(digits) > _MAX_DIGITS:
            raise argparse.ArgumentTypeError(f"expected {rule}, got {show(text)}")
        value = int(stripped)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected {rule}, got {show(text)}")
        return value

    parse.__name__ = rule
    return parse


def float_flag(
    low: float,
    high: float,
    *,
    low_open: bool = False,
    high_open: bool = False,
    what: str = "a number",
) -> Callable[[str], float]:
    """A parser of a number in ``[low, high]`` (an end is excluded with ``low_open`` or
    ``high_open``: ``float_flag(0, 1, high_open=True)`` is a fraction below 1).

    ``high`` may be ``math.inf`` to accept ``inf``, or ``sys.float_info.max`` to accept
    every finite number; NaN is always refused.
    """
    if high == sys.float_info.max:  # no bound but finiteness: say so in words
        rule = f"{what}, finite and {'>' if low_open else '>='} {low:g}"
    else:
        rule = f"{what} in {_interval(low, high, low_open, high_open)}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {rule}, got {show(text)}") from None
        too_low = value <= low if low_open else value < low
        too_high = value >= high if high_open else value > high
        if math.isnan(value) or too_low or too_high:
            raise argparse.ArgumentTypeError(f"expected {rule}, got {show(text)}")
        return value

    parse.__name__ = rule
    return parse


def name_flag(what: str) -> Callable[[str], str]:
    """A parser of a name of ``what`` (a file to read, a preset): any but the empty one,
    which names nothing and would reach the readers' own type checks as a traceback; whether
    the file or preset exists is the reader's to say."""

    def parse(text: str) -> str:
        if not text:
            raise argparse.ArgumentTypeError(f"expected {what}, got '' (the name is empty)")
        return text

    parse.__name__ = what
    return parse


input_file = name_flag("a file name")
"""The parser of a file to read (``--trace``, ``--profile``, ``fit``'s steps)."""


def list_of(parse: Callable[[str], T]) -> Callable[[str], list[T]]:
    """A parser of a comma list whose items ``parse`` reads; an error names the item."""

    def parse_list(text: str) -> list[T]:
        items = [item.strip() for item in text.split(",")]
        if any(not item for item in items):
            raise argparse.ArgumentTypeError(
                f"expected a comma-separated list, got {show(text)} (an empty item)"
            )
        out: list[T] = []
        for item in items:
            try:
                out.append(parse(item))
            except argparse.ArgumentTypeError as err:
                if len(items) == 1:
                    raise
                raise argparse.ArgumentTypeError(f"in the list {show(text)}: {err}") from None
        return out

    parse_list.__name__ = f"list of {getattr(parse, '__name__', 'value')}"
    return parse_list
