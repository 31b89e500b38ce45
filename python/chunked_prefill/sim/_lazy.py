"""Lazy re-exports for a package's ``__init__``: a name is imported from its home module on
first use (PEP 562), so ``import chunked_prefill.sim`` (and every command, which imports the
package first) pays only for what it runs: ``simulate`` never loads the search machinery,
the catalog parsers, matplotlib or Ray; and :func:`import_meanwhile`, which imports what a
run needs only after the core's loop while the loop runs."""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import threading
from collections.abc import Callable, Mapping


def lazy_exports(package: str, homes: Mapping[str, tuple[str, ...]]) -> Callable[[str], object]:
    """A module ``__getattr__`` for ``package`` that finds each name of ``homes`` (module,
    relative to ``package`` -> the names it holds) in its module on first use, and keeps it
    in the package's namespace so later uses cost nothing."""
    home_of = {name: module for module, names in homes.items() for name in names}

    def __getattr__(name: str) -> object:
        module = home_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__


_pending: set[str] = set()
"""The modules an :func:`import_meanwhile` thread was started for (imported or not yet)."""
_pending_lock = threading.Lock()


def import_meanwhile(*modules: str, low_priority: bool = False) -> None:
    """Import ``modules`` (those neither imported nor asked for already) on another
    thread, in order.

    For a caller about to run the core's loop, which releases the GIL: a module it needs
    only after the loop (numpy for the records, rich for the report) is imported on a
    second core meanwhile instead of before. The thread is not a daemon, so an interpreter
    that exits early (the run refused or interrupted) waits for the import rather than
    freezing it halfway; whoever imports the module meanwhile waits on the import lock for
    this one.

    ``low_priority`` (Linux; elsewhere ignored): the thread lowers its own CPU priority to
    the lowest (nice 19), so the loop and its compactor thread keep the cores on a machine
    with few of them and the imports take what they leave. Only for a process that owns
    its threads (the command line): a thread started by these imports inherits the
    priority (OpenBLAS's pool, which the command line keeps from starting).
    """
    with _pending_lock:
        missing = [name for name in modules if name not in sys.modules and name not in _pending]
        _pending.update(missing)
    if missing:
        threading.Thread(
            target=_import_all,
            args=(missing, low_priority),
            name="import " + ", ".join(missing),
        ).start()


def _import_all(names: list[str], low_priority: bool) -> None:
    if low_priority and sys.platform == "linux":
        # Linux's nice value is per thread (setpriority(2), "BUGS"); elsewhere the id of a
        # thread is no process's and the call is left out.
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    for name in names:
        importlib.import_module(name)
