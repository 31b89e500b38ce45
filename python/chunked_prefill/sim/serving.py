"""``chunked_prefill.sim.serving``, as documented: serving-scheduler runs, now
:mod:`.runs.serving`, re-exported here."""

from __future__ import annotations

from .engines.spec import memory_of
from .runs.serving import (
    U64_MAX,
    ServingSimConfig,
    default_num_blocks,
    expand_serving_configs,
    min_serving_steps,
    resolve_configs,
    simulate_serving,
)

__all__ = [
    "U64_MAX",
    "ServingSimConfig",
    "default_num_blocks",
    "expand_serving_configs",
    "memory_of",
    "min_serving_steps",
    "resolve_configs",
    "simulate_serving",
]
