"""Which scheduler implementation runs: the Rust core or the pure-Python twin."""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import TYPE_CHECKING, Union

from .._check import show

if TYPE_CHECKING:
    pass


Backend = Union[str, ModuleType]


def resolve_backend(backend: Backend = "auto") -> ModuleType:
    """The scheduler module for ``backend``: ``"rust"``, ``"pure"``, ``"auto"`` or a module.

    ``"auto"`` follows ``CHUNKED_PREFILL_BACKEND`` when it is set, else takes the Rust
    extension when it is built and the pure twin otherwise.
    """
    if isinstance(backend, ModuleType):
        return backend
    if not isinstance(backend, str):
        raise TypeError(f"backend must be 'auto', 'rust', 'pure' or a module, got {show(backend)}")
    if backend == "auto":
        env = os.environ.get("CHUNKED_PREFILL_BACKEND", "").strip().lower()
        if env in ("rust", "pure"):
            backend = env
        else:
            try:
                return importlib.import_module("chunked_prefill._core")
            except ImportError:
                return importlib.import_module("chunked_prefill.pure")
    if backend == "rust":
        return importlib.import_module("chunked_prefill._core")
    if backend == "pure":
        return importlib.import_module("chunked_prefill.pure")
    raise ValueError(f"backend must be 'auto', 'rust', 'pure' or a module, got {backend!r}")


def backend_name(module: ModuleType) -> str:
    """``"rust"`` or ``"pure"`` for the package's backends, else the module's name."""
    return {"chunked_prefill._core": "rust", "chunked_prefill.pure": "pure"}.get(
        module.__name__, module.__name__
    )
