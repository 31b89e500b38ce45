"""Latency simulator: what a chunked-prefill configuration does to TTFT and TBT.

``simulate`` replays a workload (the embedded synthetic chat workload of
:func:`default_workload`, or a trace read by :func:`load_trace`) through the real
``Scheduler`` against a step-latency model of the engine (:class:`EngineModel`) and
returns one :class:`SimResult` per configuration::

    from chunked_prefill.sim import default_workload, expand_configs, simulate

    results = simulate(default_workload(), expand_configs(chunk_sizes=[512, None]))
    for r in results:
        print(r.config.label(), r.ttft_s.p99, r.tbt_s.p99, r.tbt_s.max)

:func:`simulate_serving` runs the serving scheduler instead, memory-true (KV-block pool,
prefix caching, preemption), its loop in the Rust core; it is what the command line does
by default. :func:`engine_for` builds the roofline engine of a model on tensor-parallel
GPUs (:mod:`.catalog`, :mod:`.roofline`) for either. The command line is
``chunked-prefill simulate`` (see :mod:`chunked_prefill.sim.cli`).
"""

from __future__ import annotations

from .catalog import EngineFitError, GpuSpec, ModelConfigError, ModelSpec, engine_for
from .engine import DEFAULT_ENGINE, ENGINE_PRESETS, EngineModel, ProfileError, load_profile
from .roofline import RooflineModel
from .serving import (
    ServingSimConfig,
    default_num_blocks,
    expand_serving_configs,
    simulate_serving,
)
from .simulator import (
    DEFAULT_CHUNK_SIZES,
    DEFAULT_STALL_THRESHOLD_S,
    ConfigError,
    Percentiles,
    ServingStats,
    SimConfig,
    SimResult,
    StepLimitError,
    StepRecord,
    backend_name,
    check_configs,
    expand_configs,
    min_steps,
    resolve_backend,
    simulate,
)
from .workload import (
    DEFAULT_RATE,
    DEFAULT_REQUESTS,
    FIELD_ALIASES,
    ChatWorkloadSpec,
    Request,
    TraceError,
    Workload,
    default_workload,
    load_trace,
)

__all__ = [
    "DEFAULT_CHUNK_SIZES",
    "DEFAULT_ENGINE",
    "DEFAULT_RATE",
    "DEFAULT_REQUESTS",
    "DEFAULT_STALL_THRESHOLD_S",
    "ENGINE_PRESETS",
    "FIELD_ALIASES",
    "ChatWorkloadSpec",
    "ConfigError",
    "EngineFitError",
    "EngineModel",
    "GpuSpec",
    "ModelConfigError",
    "ModelSpec",
    "Percentiles",
    "ProfileError",
    "Request",
    "RooflineModel",
    "ServingSimConfig",
    "ServingStats",
    "SimConfig",
    "SimResult",
    "StepLimitError",
    "StepRecord",
    "TraceError",
    "Workload",
    "backend_name",
    "check_configs",
    "default_num_blocks",
    "default_workload",
    "engine_for",
    "expand_configs",
    "expand_serving_configs",
    "load_profile",
    "load_trace",
    "min_steps",
    "resolve_backend",
    "simulate",
    "simulate_serving",
]
