"""``chunked_prefill.sim.engine``, as documented: the linear engine model, now
:mod:`.engines.linear`, re-exported here."""

from __future__ import annotations

from .engines.linear import (
    DEFAULT_ENGINE,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    ENGINE_PRESETS,
    GIB,
    MAX_COEFFICIENT_S,
    MEMORY_PRESETS,
    EngineModel,
    KVMemory,
    ProfileError,
    load_profile,
)

__all__ = [
    "DEFAULT_ENGINE",
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "ENGINE_PRESETS",
    "GIB",
    "MAX_COEFFICIENT_S",
    "MEMORY_PRESETS",
    "EngineModel",
    "KVMemory",
    "ProfileError",
    "load_profile",
]
