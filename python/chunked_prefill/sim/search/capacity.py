"""Capacity search: for each configuration, the highest arrival rate that meets the SLOs.

:func:`search` crosses serving configurations with engines, replica counts and routers,
and for each point finds its *capacity*: the highest rate (requests/s) at which
``slo_attainment >= attainment``, by bracketing then bisection to a relative
``precision`` (:mod:`.rate` says how, and what the capacity is when attainment is
not monotone in the rate). Each probe is one :func:`~..runs.serving.simulate_serving` run of
the workload at that rate; probes run in this process, on a process pool or as Ray tasks
(:mod:`.runners`), with the same result on any of them::

    from chunked_prefill.sim import ServingSimConfig, search

    ranked = search(configs=[ServingSimConfig(chunk_size=256), ServingSimConfig()],
                    slo_ttft_s=2.0, slo_tbt_s=0.1, workers=1)
    best = ranked[0]
    print(best["config"]["chunk_size"], best["capacity_rps"])
"""

from __future__ import annotations

import importlib
import math
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .._check import boolean, check_callback, count, items, kind, real, show
from ..engines.linear import DEFAULT_GPU_MEMORY_UTILIZATION, EngineModel
from ..engines.spec import EngineSpec, engine_spec
from ..runs.defaults import DEFAULT_DRAIN, DEFAULT_STALL_THRESHOLD_S, DEFAULT_WARMUP
from ..runs.router import check_fleet
from ..runs.serving import ServingSimConfig
from ..workload.synthetic import DEFAULT_RATE
from ..workload.types import Workload
from .options import DEFAULT_ATTAINMENT, DEFAULT_PRECISION, RANK_BY
from .rate import RateSearch
from .runners import PoolRunner, ProbeContext, RayRunner, Runner, SerialRunner
from .space import RateWorkload, SearchPoint, SyntheticWorkload, grid

__all__ = ["DEFAULT_ATTAINMENT", "DEFAULT_PRECISION", "RANK_BY", "Progress", "search"]

Progress = Callable[[int, int], None]
"""``on_probe(done, total)``: probes finished, and that plus an estimate of those to go."""


def search(
    workload: Workload | RateWorkload | None = None,
    configs: ServingSimConfig | Iterable[ServingSimConfig] | None = None,
    *,
    engines: Sequence[EngineSpec | EngineModel | str] = ("llama2-7b-a100",),
    replicas: Sequence[int] = (1,),
    routers: Sequence[str] = ("round-robin",),
    slo_ttft_s: float | None = None,
    slo_tpot_s: float | None = None,
    slo_tbt_s: float | None = None,
    warmup: float = DEFAULT_WARMUP,
    drain: float = DEFAULT_DRAIN,
    attainment: float = DEFAULT_ATTAINMENT,
    precision: float = DEFAULT_PRECISION,
    start_rate: float | None = None,
    rank_by: str = "capacity",
    gpu_cost: float | None = None,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    backend: str = "rust",
    stall_threshold_s: float = DEFAULT_STALL_THRESHOLD_S,
    max_steps: int = 10_000_000,
    workers: int | None = None,
    ray: bool = False,
    ray_address: str | None = None,
    on_probe: Progress | None = None,
    keep_runs: bool = False,
) -> list[dict[str, Any]]:
    """The capacity of every point of the grid, best first, as plain data.

    ``workload`` is a :class:`SyntheticWorkload` (default: the synthetic workload of
    1000 requests), drawn at each probed rate, or a :class:`Workload` (a trace) whose
    arrivals are rescaled to it. The grid is ``configs`` x ``engines`` (preset names,
    models or :class:`EngineSpec`) x ``replicas`` x ``routers``. At least one SLO must be
    given; a rate meets them when at least ``attainment`` of the steady part's requests
    (``warmup`` and ``drain`` left out, :mod:`..runs.steady`) meets every one and the run is not
    overloaded. A probe of a synthetic workload draws it again with twice the requests
    while the run is too short for a steady state (and a fleet of N replicas N times the
    requests to start with). The first probe of each point is ``start_rate`` (default: the
    workload's own mean rate, or 6 req/s for the synthetic workload).

    Each item: ``config`` (``simulate --json``'s, plus ``replicas``, ``router`` and
    ``engine``), ``gpus``, ``capacity_rps``, ``capacity_per_gpu_rps``,
    ``requests_per_dollar`` (with ``gpu_cost``, dollars per GPU-hour), ``capped`` (every
    probed rate met the SLO, up to 1024 x the start rate), ``probes`` (``rate_rps``,
    ``meets_slo``, in the order run) and ``at_capacity`` (the ``simulate --json`` object of
    the run at ``capacity_rps``; ``None`` when no rate met). With ``keep_runs`` each probe
    also holds its run's ``simulate --json`` object as ``run`` (for latency-vs-rate
    curves). Items are ordered by
    ``rank_by`` (``"capacity"`` or ``"per-gpu"``), then grid order.

    Probes run on ``workers`` processes (default: every core; 1: in this process), or as
    Ray tasks with ``ray=True`` (on the cluster at ``ray_address``, else a new local
    instance). The result is the same on any of them. Raises ``ValueError`` for a bad
    argument, before anything runs.
    """
    source = _rate_workload(workload)
    points = _points(configs, engines, replicas, routers)
    slo = _slo(slo_ttft_s, slo_tpot_s, slo_tbt_s)
    _check(attainment, precision, rank_by, gpu_cost, workers)
    start = _start_rate(source, start_rate)
    run = (gpu_memory_utilization, backend, stall_threshold_s, max_steps, warmup, drain)
    ctx = _probe_context(source, points, slo, attainment, run)
    _check_runner(ray, ray_address, on_probe, keep_runs)
    searches = [RateSearch(start, precision) for _ in points]
    found = _drive(_runner(ctx, workers, ray, ray_address), searches, on_probe)
    items = [
        _item(p, s, found[i], gpu_cost, keep_runs) for i, (p, s) in enumerate(zip(points, searches))
    ]
    key = "capacity_rps" if rank_by == "capacity" else "capacity_per_gpu_rps"
    order = sorted(range(len(items)), key=lambda i: (-items[i][key], i))
    return [items[i] for i in order]


def _probe_context(
    source: RateWorkload,
    points: Sequence[SearchPoint],
    slo: dict[str, float],
    attainment: float,
    run: tuple[object, object, object, object, object, object],
) -> ProbeContext:
    """What every probe shares; ``run`` is :func:`search`'s ``gpu_memory_utilization``,
    ``backend``, ``stall_threshold_s``, ``max_steps``, ``warmup`` and ``drain``, checked in
    that order."""
    util = real("gpu_memory_utilization", run[0], 0.0, 1.0, low_open=True)
    backend = run[1]
    if not isinstance(backend, str) or backend not in ("rust", "pure"):
        raise ValueError(f"backend must be 'rust' or 'pure', got {show(backend)}")
    threshold = real("stall_threshold_s", run[2], 0.0)
    max_steps = count("max_steps", run[3], 1, 2**64 - 1)
    warmup = real("warmup", run[4], 0.0, 0.5, high_open=True)
    drain = real("drain", run[5], 0.0, 0.5, high_open=True)
    return ProbeContext(
        source, tuple(points), slo, attainment, util, backend, threshold, max_steps, warmup, drain
    )


def _rate_workload(workload: Workload | RateWorkload | None) -> RateWorkload:
    if workload is None:
        return SyntheticWorkload()
    if not callable(getattr(workload, "at_rate", None)):
        raise TypeError(f"workload must have an at_rate(rate) method, got {workload!r}")
    if isinstance(workload, Workload) and math.isinf(workload.mean_rate):
        raise ValueError(
            "the workload's arrivals span no time (one request, or all at once), so their"
            " rate cannot be rescaled"
        )
    return workload


def _points(
    configs: ServingSimConfig | Iterable[ServingSimConfig] | None,
    engines: Sequence[EngineSpec | EngineModel | str],
    replicas: Sequence[int],
    routers: Sequence[str],
) -> list[SearchPoint]:
    if isinstance(configs, ServingSimConfig):
        cfgs = [configs]
    elif configs is None:
        cfgs = [ServingSimConfig()]
    else:
        cfgs = items("configs", configs, "ServingSimConfig values", empty=True)
        for i, cfg in enumerate(cfgs):
            kind(f"configs[{i}]", cfg, (ServingSimConfig,), "a ServingSimConfig")
    engines = items("engines", engines, "engine presets, EngineModels or EngineSpecs", empty=True)
    specs = [engine_spec(e) for e in engines]
    replicas = items("replicas", replicas, "ints", empty=True)
    routers = items("routers", routers, "router names", empty=True)
    for what, values in (("configs", cfgs), ("engines", specs), ("replicas", replicas)):
        if not values:
            raise ValueError(f"{what} must not be empty")
    if not routers:
        raise ValueError("routers must not be empty")
    fleets = [check_fleet(n, r) for n in replicas for r in routers]
    replicas = [n for n, _ in fleets]
    routers = [r for _, r in fleets]
    return grid(cfgs, specs, list(dict.fromkeys(replicas)), list(dict.fromkeys(routers)))


def _slo(ttft: float | None, tpot: float | None, tbt: float | None) -> dict[str, float]:
    slo = {k: v for k, v in (("ttft_s", ttft), ("tpot_s", tpot), ("tbt_s", tbt)) if v is not None}
    if not slo:
        raise ValueError("give at least one SLO (slo_ttft_s, slo_tpot_s or slo_tbt_s)")
    for key, value in slo.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"slo_{key} must be a number of seconds, got {value!r}")
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"slo_{key} must be a finite number of seconds > 0, got {value!r}")
    return slo


def _check(
    attainment: float,
    precision: float,
    rank_by: str,
    gpu_cost: float | None,
    workers: int | None,
) -> None:
    for name, value in (("attainment", attainment), ("precision", precision)):
        try:
            real(name, value, 0.0, 1.0, low_open=True)
        except ValueError:
            raise ValueError(f"{name} must be a fraction in (0, 1], got {show(value)}") from None
    if not isinstance(rank_by, str) or rank_by not in RANK_BY:
        raise ValueError(f"rank_by must be one of {', '.join(RANK_BY)}, got {show(rank_by)}")
    real("gpu_cost", gpu_cost, 0.0, low_open=True, none=True)
    if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool)):
        raise ValueError(f"workers must be an int >= 1, got {show(workers)}")
    if workers is not None and workers < 1:
        raise ValueError(f"workers must be an int >= 1, got {workers!r}")


def _check_runner(ray: object, address: object, on_probe: object, keep_runs: object) -> None:
    use_ray = boolean("ray", ray)
    if address is not None and (not isinstance(address, str) or not address):
        raise TypeError(f"ray_address must be None or a non-empty string, got {show(address)}")
    if address is not None and not use_ray:
        raise ValueError(f"ray_address={address!r} needs ray=True")
    if use_ray:
        try:
            importlib.import_module("ray")
        except ImportError:
            raise ImportError(
                "ray=True needs Ray; install the ray extra: pip install 'chunked-prefill[ray]'"
                " (or pip install ray)"
            ) from None
    check_callback("on_probe", on_probe)
    boolean("keep_runs", keep_runs)


def _start_rate(source: RateWorkload, start_rate: float | None) -> float:
    if start_rate is None:
        return source.mean_rate if isinstance(source, Workload) else DEFAULT_RATE
    if isinstance(start_rate, bool) or not (math.isfinite(start_rate) and start_rate > 0):
        raise ValueError(
            f"start_rate must be a finite number of requests/s > 0, got {start_rate!r}"
        )
    return float(start_rate)


def _runner(ctx: ProbeContext, workers: int | None, ray: bool, address: str | None) -> Runner:
    if ray:
        return RayRunner(ctx, address, workers)
    count = workers if workers is not None else os.cpu_count() or 1
    if count == 1:
        return SerialRunner(ctx)
    return PoolRunner(ctx, min(count, len(ctx.points)))


def _drive(
    runner: Runner, searches: list[RateSearch], on_probe: Progress | None
) -> list[dict[float, dict[str, Any]]]:
    """Run every search to its end; the ``simulate --json`` object of each probe, per point
    and rate."""
    found: list[dict[float, dict[str, Any]]] = [{} for _ in searches]
    try:
        pending = 0
        for index, s in enumerate(searches):
            rate = s.next_rate()
            assert rate is not None
            runner.submit(index, rate)
            pending += 1
        done = 0
        while pending:
            for index, rate, meets, doc in runner.wait():
                pending -= 1
                done += 1
                searches[index].record(rate, meets)
                found[index][rate] = doc
                nxt = searches[index].next_rate()
                if nxt is not None:
                    runner.submit(index, nxt)
                    pending += 1
                if on_probe is not None:
                    on_probe(done, done + sum(s.remaining() for s in searches))
    except BaseException:
        # Interrupted (Ctrl-C; SIGTERM in the CLI) or failed: no worker outlives the search.
        runner.close(abandon=True)
        raise
    runner.close()
    return found


def _item(
    point: SearchPoint,
    s: RateSearch,
    runs: dict[float, dict[str, Any]],
    gpu_cost: float | None,
    keep_runs: bool,
) -> dict[str, Any]:
    capacity = s.capacity
    item: dict[str, Any] = {
        "config": point.to_dict(),
        "gpus": point.gpus,
        "capacity_rps": capacity,
        "capacity_per_gpu_rps": capacity / point.gpus,
    }
    if gpu_cost is not None:
        item["requests_per_dollar"] = capacity * 3600 / (point.gpus * gpu_cost)
    item["capped"] = s.capped
    item["probes"] = [
        {"rate_rps": r, "meets_slo": m, **({"run": runs[r]} if keep_runs else {})}
        for r, m in s.probes
    ]
    item["at_capacity"] = runs.get(capacity) if capacity > 0 else None
    return item
