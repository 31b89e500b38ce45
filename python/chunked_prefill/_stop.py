"""How a command ends early: Ctrl-C, SIGTERM or SIGHUP, or a reader that closed stdout.

:func:`stopping` runs a command so that each ends as one line on stderr and a
conventional exit status, never a traceback: Ctrl-C (``KeyboardInterrupt``) exits with
130, SIGTERM with 143 and SIGHUP with 129 (128 + the signal number). Both signals are
turned into :class:`Terminated`, a ``SystemExit``, so the stack unwinds through Python:
output files are left whole (:func:`~._output.replacing`) and a search stops its workers,
where the default action would end the process at once. A closed stdout (``| head``) is
not an error: exit status 0.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

__all__ = ["Terminated", "stopping", "terminate_raises"]

_CAUGHT = ("SIGTERM", "SIGHUP")


class Terminated(SystemExit):
    """SIGTERM or SIGHUP arrived; ``code`` is the exit status, 128 + the signal number
    (uncaught, the interpreter exits with it silently)."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated(signum)


@contextlib.contextmanager
def terminate_raises() -> Iterator[None]:
    """While the block runs, SIGTERM and SIGHUP raise :class:`Terminated`. A signal
    that is ignored (``nohup``) stays ignored; off the main thread (where no handler can be
    set) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[int, object] = {}
    for name in _CAUGHT:
        signum = getattr(signal, name, None)
        if signum is not None and signal.getsignal(signum) is not signal.SIG_IGN:
            previous[signum] = signal.signal(signum, _raise_terminated)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]


@contextlib.contextmanager
def _last_words() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP ignored while the last line is printed (a second Ctrl-C
    would print a traceback), then as they were."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signums = [getattr(signal, name) for name in ("SIGINT", *_CAUGHT) if hasattr(signal, name)]
    previous = [signal.signal(signum, signal.SIG_IGN) for signum in signums]
    try:
        yield
    finally:
        for signum, handler in zip(signums, previous):
            signal.signal(signum, handler)


def _stdout_closed() -> bool:
    """Whether stdout is a pipe or socket whose reader has gone (poll reports an error)."""
    try:
        import select

        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows), no file descriptor
        return False


def reader_gone(err: BaseException) -> bool:
    """Whether ``err`` is the broken pipe of a stdout whose reader stopped reading, which
    :func:`stopping` ends with status 0 (a command's own ``except OSError`` lets it by)."""
    return isinstance(err, BrokenPipeError) and _stdout_closed()


def stopping(prog: str, body: Callable[[], int]) -> int:
    """``body()``'s exit status, or the status of how it was stopped, after one line
    ``PROG: interrupted`` (Ctrl-C, 130) or ``PROG: terminated by SIGTERM`` (143; SIGHUP
    129) on stderr."""
    try:
        with terminate_raises():
            return body()
    except KeyboardInterrupt:
        with _last_words():
            print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Terminated as stop:
        with _last_words():
            print(f"{prog}: terminated by {signal.Signals(stop.signum).name}", file=sys.stderr)
        return 128 + stop.signum
    except BrokenPipeError:
        if not _stdout_closed():
            raise
        # The reader (head, less) stopped reading: not an error. Point stdout at devnull
        # so that the interpreter's final flush does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def pipe_console(**options: Any) -> Any:
    """A ``rich`` console whose write to a closed pipe raises ``BrokenPipeError``, which
    :func:`stopping` ends with status 0 as for the commands' other output (rich's own
    handling exits with status 1)."""
    from rich.console import Console

    class _PipeConsole(Console):
        def on_broken_pipe(self) -> None:
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    return _PipeConsole(**options)
