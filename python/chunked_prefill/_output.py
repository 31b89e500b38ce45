"""Output files of the command line: checked before the work, written whole or not at all.

Every file a command writes (``simulate --steps-csv`` and ``--plot``, ``search --plot``,
``fit --out``) is checked by :func:`check_output` before anything runs, so a path that
cannot be written is one error line naming the flag, not a failure after minutes of
simulation. It is then written by :func:`replacing`: into a temporary file in the same
folder, renamed over the old file (``os.replace``) only once complete, so a refused,
failed or interrupted run leaves the old file as it was and no temporary file behind.

The rules (docs/cli.md): a folder, a missing folder, a folder or an existing file that
cannot be written, and a symbolic link that leads to no file (dangling, or a loop) are
refused. A symbolic link to a file is followed: its target is replaced and the link stays.
A path that is neither a file nor a folder (``/dev/null``, ``/dev/stdout``, a named pipe)
is written in place, as it cannot be replaced.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator, Sequence
from typing import IO, Any

from ._args import UsageError

__all__ = ["check_output", "check_outputs", "replacing"]


def check_output(path: str, flag: str) -> None:
    """Refuse ``path`` for the output flag ``flag`` (``--plot``) with a :class:`UsageError`
    ``argument FLAG: cannot write PATH: REASON`` unless :func:`replacing` can write it."""
    reason = _unwritable(path)
    if reason is not None:
        raise UsageError(f"argument {flag}: cannot write {path}: {reason}")


def check_outputs(outputs: Sequence[tuple[str, str | None]]) -> None:
    """:func:`check_output` of each ``(flag, path)`` given (``None``: the flag is not
    given), and refuse two flags naming the same file (the second would overwrite the
    first)."""
    seen: dict[str, str] = {}
    for flag, path in outputs:
        if path is None:
            continue
        check_output(path, flag)
        key = os.path.realpath(path)
        if key in seen:
            raise UsageError(f"argument {flag}: {path} is also the file of {seen[key]}")
        seen[key] = flag


def _unwritable(path: str) -> str | None:
    """Why ``path`` cannot be written, or ``None``."""
    if not path:
        return "the name is empty"
    if os.path.isdir(path):
        return "it is a folder, not a file name"
    if os.path.islink(path) and not os.path.exists(path):
        return f"it is a symbolic link to {os.readlink(path)!r}, which leads to no file"
    if os.path.exists(path):
        if not os.access(path, os.W_OK):
            return "the file is not writable"
        if not os.path.isfile(path):
            return None  # a device or a pipe, written in place
    folder = os.path.dirname(os.path.realpath(path))
    if not os.path.exists(folder):
        return f"the folder {folder} does not exist"
    if not os.path.isdir(folder):
        return f"{folder} is not a folder"
    try:
        fd, temp = _temporary(folder, "probe")
    except OSError as err:
        return f"the folder {folder} is not writable ({err.strerror})"
    os.close(fd)
    os.unlink(temp)
    return None


def _temporary(folder: str, name: str) -> tuple[int, str]:
    """A new hidden file ``.NAME.XXXXXXXX.tmp`` in ``folder``, opened for writing, with the
    permissions a new file gets (0o666 less the umask); a name already taken (a file left
    by a killed run) is drawn again."""
    for _ in range(100):
        temp = os.path.join(folder, f".{name}.{os.urandom(4).hex()}.tmp")
        try:
            return os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), temp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary file name beside it")


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str], *, binary: bool = False) -> Iterator[IO[Any]]:
    """A file object whose content replaces ``path`` when the block ends without an
    exception; on any exception (``KeyboardInterrupt`` included) ``path`` is left as it
    was and the temporary file is removed. Text mode is UTF-8 with ``newline=""``."""
    name = os.fspath(path)
    mode: str = "wb" if binary else "w"
    encoding, newline = (None, None) if binary else ("utf-8", "")
    if os.path.exists(name) and not os.path.isfile(name) and not os.path.isdir(name):
        # A device or a pipe: nothing to replace.
        with open(name, mode, encoding=encoding, newline=newline) as fh:
            yield fh
        return
    target = os.path.realpath(name)
    folder, base = os.path.split(target)
    fd, temp = _temporary(folder, base)
    try:
        with os.fdopen(fd, mode, encoding=encoding, newline=newline) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        if os.path.exists(target):
            os.chmod(temp, os.stat(target).st_mode & 0o7777)
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
