"""What a ``chunked-prefill`` process sets up around its command, which a program calling
:func:`chunked_prefill.cli.main` in its own process does not get: the process is the
command's alone and ends with it."""

from __future__ import annotations

import gc
import os
from collections.abc import Callable

__all__ = ["run_process"]


def run_process(command: Callable[[], int]) -> int:
    """Run ``command()`` as the whole process and return its exit status.

    - ``OPENBLAS_NUM_THREADS=1`` unless the environment sets it: no command multiplies
      matrices, and OpenBLAS (numpy's wheels) starts a thread per core when numpy is
      imported, each spinning for work for a while (about 0.1 s of a core, taken from the
      simulation's loop when numpy is imported while it runs). A command's Ray workers
      inherit it.
    - After the command: ``gc.freeze()``, so that the interpreter's shutdown collection
      does not walk every object of numpy, rich and the report only to find them alive
      (about 15 ms of a ``simulate``). Files are closed by then (each is written in a
      ``with``); what the collection would have freed is the process's memory, freed by
      its exit.
    """
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    status = command()
    gc.freeze()
    return status
