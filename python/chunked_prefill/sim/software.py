"""``chunked_prefill.sim.software``, as documented: serving engines and attention backends,
now :mod:`.engines.software`, re-exported here."""

from __future__ import annotations

from .engines.software import (
    ATTENTION_BACKENDS,
    DEFAULT_ATTENTION_BACKEND,
    DEFAULT_SERVING_ENGINE,
    SERVING_ENGINES,
    AttentionBackend,
    ServingEngine,
    resolve_attention_backend,
    resolve_serving_engine,
    vllm_software,
    vllm_token_budget,
)

__all__ = [
    "ATTENTION_BACKENDS",
    "DEFAULT_ATTENTION_BACKEND",
    "DEFAULT_SERVING_ENGINE",
    "SERVING_ENGINES",
    "AttentionBackend",
    "ServingEngine",
    "resolve_attention_backend",
    "resolve_serving_engine",
    "vllm_software",
    "vllm_token_budget",
]
