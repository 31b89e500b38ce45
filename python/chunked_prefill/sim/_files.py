"""Reading the simulator's input files (traces, steps files, profiles, ``config.json``)
without hanging or reading forever.

Only a regular file is read: a FIFO or a terminal would block until a writer comes, a
character device such as ``/dev/zero`` never ends, and a directory is not text. The file is
opened without blocking (opening a FIFO would wait for its writer), checked with ``fstat``,
then read in chunks, each checked for a NUL byte, which no text input holds: a binary file
or a sparse one (a 2 GB hole reads as zeros) is refused at its first chunk rather than read
whole. ``limit`` bounds the small files (profiles), checked from the size before reading.
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any

__all__ = [
    "CHUNK",
    "PROFILE_LIMIT",
    "FileProblem",
    "read_bytes",
    "read_json_object",
    "read_profile_bytes",
]

CHUNK = 1 << 20
PROFILE_LIMIT = 16 << 20
"""The largest profile, GPU profile or ``config.json`` read (a real one is a few KiB)."""

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class FileProblem(ValueError):
    """Why a file was not read; ``line`` is the 1-based line of a NUL byte (else 0)."""

    def __init__(self, problem: str, line: int = 0) -> None:
        self.problem = problem
        self.line = line
        super().__init__(problem)


def _kind(mode: int) -> str:
    for test, what in _KINDS:
        if test(mode):
            return what
    return "not a regular file"


def read_bytes(name: str, limit: int | None = None) -> bytes:
    """The bytes of the regular file ``name``; :class:`FileProblem` otherwise."""
    if name == "-":
        raise FileProblem(
            "cannot be read: '-' is not standard input here; save the input to a file"
        )
    try:
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as err:
        raise FileProblem(f"cannot be read: {err.strerror or err}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise FileProblem(f"cannot be read: it is {_kind(info.st_mode)}, not a regular file")
    with os.fdopen(fd, "rb", buffering=0) as fh:
        if limit is not None and info.st_size > limit:
            raise FileProblem(
                f"is {info.st_size} bytes, above the limit of {limit} bytes for this file"
            )
        parts: list[bytes] = []
        lines = 0
        while True:
            try:
                chunk = fh.read(CHUNK)
            except OSError as err:
                raise FileProblem(f"cannot be read: {err.strerror or err}") from None
            if not chunk:
                break
            nul = chunk.find(b"\0")
            if nul != -1:
                line = lines + chunk.count(b"\n", 0, nul) + 1
                raise FileProblem("holds a NUL byte: a binary file, not text", line)
            lines += chunk.count(b"\n")
            parts.append(chunk)
            if limit is not None and sum(map(len, parts)) > limit:
                raise FileProblem(f"is above the limit of {limit} bytes for this file")
    return b"".join(parts)


def read_profile_bytes(name: str, error: type[ValueError]) -> bytes:
    """The bytes of a profile or ``config.json``, at most :data:`PROFILE_LIMIT`; ``error``
    (``NAME: problem``) otherwise."""
    try:
        return read_bytes(name, PROFILE_LIMIT)
    except FileProblem as err:
        where = f"{name}:{err.line}" if err.line else name
        raise error(f"{where}: {err.problem}") from None


def read_json_object(name: str, error: type[ValueError]) -> dict[str, Any]:
    """The JSON object of a profile or ``config.json`` (exact numbers, no repeated key,
    see :mod:`._json`); ``error`` naming the file otherwise."""
    from ._json import DuplicateKey
    from ._json import loads as json_loads

    data = read_profile_bytes(name, error)
    try:
        table = json_loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError as err:
        raise error(f"{name}: not UTF-8 text: {err}") from None
    except DuplicateKey as err:
        raise error(f"{name}: key {err.key!r}: appears twice in one object") from None
    except json.JSONDecodeError as err:
        raise error(f"{name}: not valid JSON: {err}") from None
    if not isinstance(table, dict):
        raise error(f"{name}: expected a JSON object at the top level")
    return table
