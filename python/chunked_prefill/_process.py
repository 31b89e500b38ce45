"""What a ``chunked-prefill`` process sets up around its command, which a program calling
:func:`chunked_prefill.cli.main` in its own process does not get: the process is the
command's alone and ends with it."""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from collections.abc import Callable
from typing import NoReturn

__all__ = ["exit_now", "run_process"]


def run_process(command: Callable[[], int]) -> NoReturn:
    """Run ``command()`` as the whole process and end the process with its exit status.

    - ``OPENBLAS_NUM_THREADS=1`` unless the environment sets it: no command multiplies
      matrices, and OpenBLAS (numpy's wheels) starts a thread per core when numpy is
      imported, each spinning for work for a while (about 0.1 s of a core, taken from the
      simulation's loop when numpy is imported while it runs). A command's Ray workers
      inherit it.
    - The command's status ends the process through :func:`exit_now`. An exception the
      command lets through (``SystemExit`` from ``--help`` or a usage error included) ends
      it the interpreter's usual way.
    """
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    exit_now(command())


def exit_now(status: int) -> NoReturn:
    """End the process with ``status`` as the interpreter's exit would, less its teardown.

    What an exit does for others is done, in the interpreter's order: the threads that are
    not daemons are waited for, the ``atexit`` handlers run (Ray's shutdown, logging's
    flush, multiprocessing's and ``weakref.finalize``'s clean-ups), stdout and stderr are
    flushed. What it does only to free memory is not: clearing every module and collecting
    every object of numpy, rich and the report (10-40 ms of a ``simulate``), which the
    process's end frees at once (as mypy's ``hard_exit`` does). A reader that closed stdout
    before its last flush is not an error, as for a command's other output
    (:func:`~._stop.stopping`): status 0.
    """
    current = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not current and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    try:
        if sys.stdout is not None:  # None: the process started without a stdout
            sys.stdout.flush()
    except BrokenPipeError:
        status = 0
    if sys.stderr is not None:
        with contextlib.suppress(OSError):  # nowhere left to say so
            sys.stderr.flush()
    os._exit(status)
