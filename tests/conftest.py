"""Shared fixtures: every behavioural test runs against both backends."""

from __future__ import annotations

import os
from types import ModuleType

import pytest
from hypothesis import settings

import chunked_prefill._core as rust_backend
import chunked_prefill.pure as pure_backend

BACKENDS = {"rust": rust_backend, "pure": pure_backend}

settings.register_profile("ci", max_examples=200, deadline=None)
settings.register_profile("dev", max_examples=50, deadline=None)
settings.register_profile("long", max_examples=5000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest) -> ModuleType:
    """The module of one backend: ``chunked_prefill._core`` or ``chunked_prefill.pure``."""
    return BACKENDS[request.param]
