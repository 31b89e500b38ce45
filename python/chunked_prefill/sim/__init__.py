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
GPUs (:mod:`.engines`) for either. The command line is
``chunked-prefill simulate`` (see :mod:`chunked_prefill.sim.cli`). :func:`search` finds each
configuration's capacity, the highest arrival rate that meets SLOs (``chunked-prefill
search``).

The package reads as the pipeline: :mod:`.workload` (what arrives), :mod:`.engines` (what a
step costs), :mod:`.runs` (the planner and serving runs, fleets, the steady part),
:mod:`.report` (tables, JSON, plots), :mod:`.search` (capacity) and :mod:`.cli` (the
commands). Every name below is imported from its home on first use, so a command loads only
what it runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

# The search subpackage shares its name with the search function, which this package has
# always exported as ``search``: load the (light) subpackage first, then drop the module the
# import bound to that name, so that ``chunked_prefill.sim.search`` stays the function
# whichever of its modules is imported later.
from . import search as _search_package  # noqa: F401

del globals()["search"]

if TYPE_CHECKING:
    from .engines.catalog import (
        engine_for,
    )
    from .engines.errors import (
        EngineFitError,
        ModelConfigError,
    )
    from .engines.gpus import (
        GpuSpec,
    )
    from .engines.linear import (
        DEFAULT_ENGINE,
        ENGINE_PRESETS,
        EngineModel,
        ProfileError,
        load_profile,
    )
    from .engines.models import (
        ModelSpec,
    )
    from .engines.roofline import (
        RooflineModel,
    )
    from .engines.spec import EngineSpec
    from .runs.backend import (
        backend_name,
        resolve_backend,
    )
    from .runs.errors import ConfigError, StepLimitError
    from .runs.planner import (
        DEFAULT_CHUNK_SIZES,
        SimConfig,
        check_configs,
        expand_configs,
        min_steps,
        simulate,
    )
    from .runs.results import (
        DEFAULT_STALL_THRESHOLD_S,
        Percentiles,
        ServingStats,
        SimResult,
        StepRecord,
    )
    from .runs.serving import (
        ServingSimConfig,
        default_num_blocks,
        expand_serving_configs,
        simulate_serving,
    )
    from .search.capacity import (
        search,
    )
    from .search.space import (
        SyntheticWorkload,
    )
    from .workload.synthetic import (
        DEFAULT_RATE,
        DEFAULT_REQUESTS,
        ChatWorkloadSpec,
        default_workload,
    )
    from .workload.trace import (
        FIELD_ALIASES,
        TraceError,
        load_trace,
    )
    from .workload.types import (
        Request,
        Workload,
    )
else:
    from ._lazy import lazy_exports

    __getattr__ = lazy_exports(
        __name__,
        {
            ".engines.errors": (
                "EngineFitError",
                "ModelConfigError",
            ),
            ".engines.gpus": ("GpuSpec",),
            ".engines.models": ("ModelSpec",),
            ".engines.catalog": ("engine_for",),
            ".engines.linear": (
                "DEFAULT_ENGINE",
                "ENGINE_PRESETS",
                "EngineModel",
                "ProfileError",
                "load_profile",
            ),
            ".engines.roofline": ("RooflineModel",),
            ".search.capacity": ("search",),
            ".engines.spec": ("EngineSpec",),
            ".search.space": ("SyntheticWorkload",),
            ".runs.serving": (
                "ServingSimConfig",
                "default_num_blocks",
                "expand_serving_configs",
                "simulate_serving",
            ),
            ".runs.results": (
                "DEFAULT_STALL_THRESHOLD_S",
                "Percentiles",
                "ServingStats",
                "SimResult",
                "StepRecord",
            ),
            ".runs.backend": (
                "backend_name",
                "resolve_backend",
            ),
            ".runs.errors": ("ConfigError", "StepLimitError"),
            ".runs.planner": (
                "DEFAULT_CHUNK_SIZES",
                "SimConfig",
                "check_configs",
                "expand_configs",
                "min_steps",
                "simulate",
            ),
            ".workload.types": (
                "Request",
                "Workload",
            ),
            ".workload.synthetic": (
                "ChatWorkloadSpec",
                "DEFAULT_RATE",
                "DEFAULT_REQUESTS",
                "default_workload",
            ),
            ".workload.trace": (
                "FIELD_ALIASES",
                "TraceError",
                "load_trace",
            ),
        },
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
    "EngineSpec",
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
    "SyntheticWorkload",
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
    "search",
    "simulate",
    "simulate_serving",
]
