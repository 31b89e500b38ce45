"""Which scheduler backend the transformers integration plans with."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from .._validate import message

_ALIASES = {"rust": "chunked_prefill._core", "pure": "chunked_prefill.pure"}


def _module(backend: Any, aliases: dict[str, str]) -> ModuleType:
    """The module ``backend`` names: ``None`` is the package, an alias or a dotted name is
    imported; a name that is neither an alias nor importable is a ``ValueError``."""
    if backend is None:
        return importlib.import_module("chunked_prefill")
    if isinstance(backend, ModuleType):
        return backend
    if not isinstance(backend, str):
        raise TypeError(
            f"backend must be None, 'rust', 'pure' or a module, got {type(backend).__name__}:"
            f" {backend!r}"
        )
    if backend in aliases:  # a missing extension is an ImportError of the installation
        return importlib.import_module(aliases[backend])
    try:
        return importlib.import_module(backend)
    except (ImportError, ValueError, TypeError):  # ValueError: an empty or relative name
        raise ValueError(
            f"backend must be None, 'rust', 'pure', a module or the name of one, got {backend!r}"
        ) from None


def resolve_backend(backend: Any = None) -> ModuleType:
    """The module whose ``Config`` and ``Scheduler`` plan the steps.

    ``None`` is the package's default (:mod:`chunked_prefill`, which follows
    ``CHUNKED_PREFILL_BACKEND``); ``"rust"`` and ``"pure"`` name the two backends; a module
    (``chunked_prefill._core``, ``chunked_prefill.pure``) or a dotted module name is used as
    given.
    """
    module = _module(backend, _ALIASES)
    if not hasattr(module, "Scheduler") or not hasattr(module, "Config"):
        raise ValueError(f"backend {module.__name__!r} has no Scheduler and Config")
    return module


def convert_config(config: Any, module: ModuleType) -> Any:
    """``config`` as a ``Config`` of ``module`` (the two backends' classes are distinct)."""
    if isinstance(config, module.Config):
        return config
    if not _is_config(config, "Config"):
        raise TypeError(
            message(
                "not_config",
                name="config",
                type_name=type(config).__name__,
                value_repr=repr(config),
            )
        )
    return module.Config(**config.to_dict())


_SERVING_ALIASES = {"rust": "chunked_prefill._core", "pure": "chunked_prefill.pure_serving"}


def resolve_serving_backend(backend: Any = None) -> ModuleType:
    """The module whose ``ServingConfig`` and ``ServingScheduler`` schedule a paged engine.

    ``None`` is the package's default (:mod:`chunked_prefill`); ``"rust"`` is the extension
    (``chunked_prefill._core``) and ``"pure"`` the twin (``chunked_prefill.pure_serving``); a
    module or a dotted module name is used as given.
    """
    module = _module(backend, _SERVING_ALIASES)
    if not hasattr(module, "ServingScheduler") or not hasattr(module, "ServingConfig"):
        raise ValueError(f"backend {module.__name__!r} has no ServingScheduler and ServingConfig")
    return module


def convert_serving_config(config: Any, module: ModuleType) -> Any:
    """``config`` as a ``ServingConfig`` of ``module`` (the two backends' classes are distinct)."""
    if isinstance(config, module.ServingConfig):
        return config
    if not _is_config(config, "ServingConfig"):
        raise TypeError(
            message(
                "not_serving_config",
                name="config",
                type_name=type(config).__name__,
                value_repr=repr(config),
            )
        )
    return module.ServingConfig(**config.to_dict())


def _is_config(config: Any, class_name: str) -> bool:
    """A ``class_name`` of one of the package's backends (converted field by field)."""
    cls = type(config)
    return (
        cls.__name__ == class_name
        and cls.__module__.startswith("chunked_prefill")
        and hasattr(config, "to_dict")
    )
