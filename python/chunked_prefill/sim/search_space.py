"""What a capacity search ranges over: workloads at a rate, engines, and grid points.

A search probes each grid point (:class:`SearchPoint`: a serving configuration on an
engine, with a replica count and a router) at several arrival rates. The workload at a
rate comes from a :class:`RateWorkload`: :class:`SyntheticWorkload` draws the synthetic
workload at that Poisson rate (what ``simulate --rate`` runs), and any :class:`Workload`
(a trace) has its arrivals rescaled (:meth:`Workload.at_rate`, what ``simulate --trace
--rate`` runs). An engine is an :class:`EngineSpec`: the step-time model, its KV memory,
its GPU count and the ``simulate`` flags that select it, so other catalogs (models, GPUs,
tensor parallelism) can add specs without touching the search.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ._check import check_engine, count, kind, real, show
from .engine import ENGINE_PRESETS, MEMORY_PRESETS, EngineModel, KVMemory
from .roofline import StepTimeModel
from .router import ROUTERS
from .serving import ServingSimConfig, memory_of
from .workload import (
    DEFAULT_REQUESTS,
    MAX_REQUESTS,
    MAX_TOKENS,
    Workload,
    check_lengths,
    default_workload,
)

__all__ = [
    "ROUTERS",
    "EngineSpec",
    "RateWorkload",
    "SearchPoint",
    "SyntheticWorkload",
    "engine_spec",
    "grid",
]


class RateWorkload(Protocol):
    """Anything that gives the workload at an arrival rate (requests/s)."""

    def at_rate(self, rate: float) -> Workload:
        """The workload with arrivals at ``rate`` requests/s."""
        ...


@dataclass(frozen=True)
class SyntheticWorkload:
    """The synthetic chat workload (:func:`default_workload`) of these parameters, drawn at
    each probed rate: the same lengths at every rate, only the arrival gaps scale."""

    requests: int = DEFAULT_REQUESTS
    seed: int = 0
    prefix_tokens: int = 0
    prefix_groups: int = 1
    turns: int = 1
    prompt_scale: float = 1.0
    output_scale: float = 1.0
    input_len: int | None = None
    output_len: int | None = None
    length_dist: str = "chat"
    range_ratio: float | None = None

    def __post_init__(self) -> None:
        # default_workload's rules, checked here so that a bad value is refused before the
        # search draws (or ships to a worker) anything.
        for name, low, high in (
            ("requests", 1, MAX_REQUESTS),
            ("seed", 0, 2**64 - 1),
            ("prefix_tokens", 0, MAX_TOKENS),
            ("prefix_groups", 1, MAX_TOKENS),
            ("turns", 1, MAX_TOKENS),
        ):
            object.__setattr__(self, name, count(name, getattr(self, name), low, high))
        for name in ("prompt_scale", "output_scale"):
            object.__setattr__(self, name, real(name, getattr(self, name), 0.0, low_open=True))
        check_lengths(
            self.input_len,
            self.output_len,
            self.length_dist,
            self.range_ratio,
            self.prompt_scale,
            self.output_scale,
        )

    def at_rate(self, rate: float) -> Workload:
        """The workload ``chunked-prefill simulate --rate RATE`` with these flags runs."""
        wl = default_workload(
            self.requests,
            rate=rate,
            seed=self.seed,
            prefix_tokens=self.prefix_tokens,
            prefix_groups=self.prefix_groups,
            turns=self.turns,
            input_len=self.input_len,
            output_len=self.output_len,
            length_dist=self.length_dist,
            range_ratio=self.range_ratio,
        )
        return wl.scaled(self.prompt_scale, 1.0).scaled(1.0, self.output_scale)


MAX_GPUS = 2**20
"""The most GPUs one replica of an :class:`EngineSpec` uses (a GPU count, not memory)."""


@dataclass(frozen=True)
class EngineSpec:
    """One engine of the grid: its step-time model, its KV memory, the GPUs one replica
    uses, and the ``simulate`` flags that select it (for the reproducing command line)."""

    model: StepTimeModel
    """The linear model of a preset or profile, or a roofline (:func:`~.engine_for`)."""
    memory: KVMemory
    gpus: int = 1
    flags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_engine(self.model, "model")
        kind("memory", self.memory, (KVMemory,), "a KVMemory")
        object.__setattr__(self, "gpus", count("gpus", self.gpus, 1, MAX_GPUS))
        if not isinstance(self.flags, (tuple, list)) or not all(
            isinstance(f, str) for f in self.flags
        ):
            raise TypeError(f"flags must be a tuple of strings, got {show(self.flags)}")
        object.__setattr__(self, "flags", tuple(self.flags))

    @property
    def name(self) -> str:
        """The engine model's name."""
        return self.model.name


def engine_spec(engine: EngineSpec | EngineModel | str) -> EngineSpec:
    """An :class:`EngineSpec` from a preset name, an :class:`EngineModel` (with its
    preset's memory, see :func:`~.serving.memory_of`) or a spec."""
    if isinstance(engine, EngineSpec):
        return engine
    if isinstance(engine, str):
        if engine not in ENGINE_PRESETS:
            raise ValueError(
                f"unknown engine preset {engine!r}; known: {', '.join(sorted(ENGINE_PRESETS))}"
            )
        return EngineSpec(ENGINE_PRESETS[engine], MEMORY_PRESETS[engine], 1, ("--engine", engine))
    if isinstance(engine, EngineModel):
        return EngineSpec(engine, memory_of(engine), 1, ())
    raise TypeError(f"an engine must be a preset name, EngineModel or EngineSpec, got {engine!r}")


@dataclass(frozen=True)
class SearchPoint:
    """One point of the grid: a serving configuration on an engine, ``replicas`` of it
    behind ``router``."""

    config: ServingSimConfig
    engine: EngineSpec
    replicas: int = 1
    router: str = "round-robin"

    @property
    def gpus(self) -> int:
        """GPUs the point uses: replicas x the engine's."""
        return self.replicas * self.engine.gpus

    def to_dict(self) -> dict[str, Any]:
        """The configuration as ``simulate --json`` writes it, plus ``replicas``,
        ``router`` and the ``engine``'s name."""
        return {
            **self.config.to_dict(),
            "replicas": self.replicas,
            "router": self.router,
            "engine": self.engine.name,
        }


def grid(
    configs: Sequence[ServingSimConfig],
    engines: Sequence[EngineSpec],
    replicas: Sequence[int],
    routers: Sequence[str],
) -> list[SearchPoint]:
    """The cross product, engines slowest, then replicas, routers and configurations. One
    replica has nothing to route: it is searched once, with the first router."""
    return [
        SearchPoint(cfg, eng, n, router)
        for eng in engines
        for n in replicas
        for router in (routers if n > 1 else routers[:1])
        for cfg in configs
    ]
