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

from .._check import count, real
from ..engines.spec import EngineSpec
from ..runs.router import ROUTERS
from ..runs.serving import ServingSimConfig
from ..workload.synthetic import DEFAULT_REQUESTS, MAX_REQUESTS, check_lengths, default_workload
from ..workload.types import MAX_TOKENS, Workload

__all__ = [
    "ROUTERS",
    "RateWorkload",
    "SearchPoint",
    "SyntheticWorkload",
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
