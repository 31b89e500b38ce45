"""Which scheduler backend the transformers integration plans with."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

_ALIASES = {"rust": "chunked_prefill._core", "pure": "chunked_prefill.pure"}


def resolve_backend(backend: Any = None) -> ModuleType:
    """The module whose ``Config`` and ``Scheduler`` plan the steps.

    ``None`` is the package's default (:mod:`chunked_prefill`, which follows
    ``CHUNKED_PREFILL_BACKEND``); ``"rust"`` and ``"pure"`` name the two backends; a module
    (``chunked_prefill._core``, ``chunked_prefill.pure``) or a dotted module name is used as
    given.
    """
    if backend is None:
        return importlib.import_module("chunked_prefill")
    if isinstance(backend, ModuleType):
        module = backend
    elif isinstance(backend, str):
        module = importlib.import_module(_ALIASES.get(backend, backend))
    else:
        raise TypeError(f"backend must be None, 'rust', 'pure' or a module, got {backend!r}")
    if not hasattr(module, "Scheduler") or not hasattr(module, "Config"):
        raise TypeError(f"backend {module.__name__!r} has no Scheduler and Config")
    return module


def convert_config(config: Any, module: ModuleType) -> Any:
    """``config`` as a ``Config`` of ``module`` (the two backends' classes are distinct)."""
    if isinstance(config, module.Config):
        return config
    return module.Config(**config.to_dict())


_SERVING_ALIASES = {"rust": "chunked_prefill._core", "pure": "chunked_prefill.pure_serving"}


def resolve_serving_backend(backend: Any = None) -> ModuleType:
    """The module whose ``ServingConfig`` and ``ServingScheduler`` schedule a paged engine.

    ``None`` is the package's default (:mod:`chunked_prefill`); ``"rust"`` is the extension
    (``chunked_prefill._core``) and ``"pure"`` the twin (``chunked_prefill.pure_serving``); a
    module or a dotted module name is used as given.
    """
    if backend is None:
        return importlib.import_module("chunked_prefill")
    if isinstance(backend, ModuleType):
        module = backend
    elif isinstance(backend, str):
        module = importlib.import_module(_SERVING_ALIASES.get(backend, backend))
    else:
        raise TypeError(f"backend must be None, 'rust', 'pure' or a module, got {backend!r}")
    if not hasattr(module, "ServingScheduler") or not hasattr(module, "ServingConfig"):
        raise TypeError(f"backend {module.__name__!r} has no ServingScheduler and ServingConfig")
    return module


def convert_serving_config(config: Any, module: ModuleType) -> Any:
    """``config`` as a ``ServingConfig`` of ``module`` (the two backends' classes are distinct)."""
    if isinstance(config, module.ServingConfig):
        return config
    if not hasattr(config, "to_dict") or not hasattr(config, "num_blocks"):
        raise TypeError(f"config must be a ServingConfig, got {config!r}")
    return module.ServingConfig(**config.to_dict())
