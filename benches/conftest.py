"""Benchmarks run each case on both backends side by side (``--benchmark-group-by=group``)."""

from __future__ import annotations

from types import ModuleType

import pytest

import chunked_prefill._core as rust_backend
import chunked_prefill.pure as pure_backend


@pytest.fixture(params=["rust", "pure"])
def backend(request: pytest.FixtureRequest) -> ModuleType:
    """The module of one backend."""
    return {"rust": rust_backend, "pure": pure_backend}[request.param]
