"""Lazy re-exports for a package's ``__init__``: a name is imported from its home module on
first use (PEP 562), so ``import chunked_prefill.sim`` (and every command, which imports the
package first) pays only for what it runs: ``simulate`` never loads the search machinery,
the catalog parsers, matplotlib or Ray; and :func:`import_meanwhile`, which imports what a
run needs only after the core's loop while the loop runs."""

from __future__ import annotations

import importlib
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


def import_meanwhile(*modules: str) -> None:
    """Import ``modules`` (those not imported yet) on another thread, in order.

    For a caller about to run the core's loop, which releases the GIL: a module it needs
    only after the loop (numpy for the records, rich for the report) is imported on a
    second core meanwhile instead of before. The thread is not a daemon, so an interpreter
    that exits early (the run refused or interrupted) waits for the import rather than
    freezing it halfway; whoever imports the module meanwhile waits on the import lock for
    this one.
    """
    missing = [name for name in modules if name not in sys.modules]
    if missing:
        threading.Thread(
            target=lambda: [importlib.import_module(name) for name in missing],
            name="import " + ", ".join(missing),
        ).start()
