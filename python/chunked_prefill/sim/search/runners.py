"""Where a search's probes run: in this process, on a local process pool, or on Ray.

A probe is one simulation of one grid point at one rate (:func:`run_probe`); it depends
on nothing but its :class:`ProbeContext`, the point's index and the rate, so every runner
gives the same answers. A runner takes probes (:meth:`Runner.submit`) and hands back
finished ones (:meth:`Runner.wait`), in whatever order they finish; the search feeds each
answer to its point's own :class:`~.rate.RateSearch`, which keeps the result
independent of that order.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from ..report.to_json import results_to_json
from ..runs.defaults import DEFAULT_DRAIN, DEFAULT_WARMUP
from ..runs.results import SimResult
from ..runs.serving import simulate_serving
from ..workload.synthetic import MAX_REQUESTS
from ..workload.types import Workload
from .space import RateWorkload, SearchPoint, SyntheticWorkload

__all__ = [
    "PoolRunner",
    "ProbeContext",
    "RayRunner",
    "Runner",
    "SerialRunner",
    "run_probe",
]

MAX_GROWTH = 64
"""The most times a probe multiplies a synthetic workload's requests to reach a steady
state."""

Done = tuple[int, float, bool, dict[str, Any]]
"""A finished probe: the point's index, the rate, whether it met the SLO, and the
``simulate --json`` object of the run."""


@dataclass(frozen=True)
class ProbeContext:
    """Everything a probe needs besides its point index and rate (sent to each worker
    once)."""

    workload: RateWorkload
    points: tuple[SearchPoint, ...]
    slo: Mapping[str, float]
    attainment: float
    gpu_memory_utilization: float
    backend: str
    stall_threshold_s: float
    max_steps: int
    warmup: float = DEFAULT_WARMUP
    drain: float = DEFAULT_DRAIN


def run_probe(ctx: ProbeContext, index: int, rate: float) -> Done:
    """Simulate point ``index`` at ``rate``: whether it meets the SLOs (``slo_attainment >=
    attainment`` and not overloaded), and the run as ``simulate --json`` writes it.

    A synthetic workload is drawn again with twice the requests while the run is too short
    to show a steady state (:mod:`..runs.steady`), up to :data:`MAX_GROWTH` times; an overloaded
    run is decisive as it is."""
    workload = fleet_workload(ctx.workload, ctx.points[index].replicas)
    result = _simulate(ctx, index, workload.at_rate(rate))
    grow = workload.requests * MAX_GROWTH if isinstance(workload, SyntheticWorkload) else 0
    most = min(grow, MAX_REQUESTS)  # never past what a synthetic workload may draw
    while isinstance(workload, SyntheticWorkload) and workload.requests * 2 <= most:
        steady = result.serving.steady if result.serving is not None else None
        if steady is None or steady.long_enough or steady.overloaded:
            break
        workload = replace(workload, requests=workload.requests * 2)
        result = _simulate(ctx, index, workload.at_rate(rate))
    stats = result.serving
    assert stats is not None and stats.slo_attainment is not None
    doc: dict[str, Any] = json.loads(results_to_json([result], indent=None))[0]
    # An overloaded run's latencies grow with its length: the rate is past capacity.
    meets = stats.slo_attainment >= ctx.attainment and not stats.overloaded
    return index, rate, meets, doc


def _simulate(ctx: ProbeContext, index: int, workload: Workload) -> SimResult:
    point = ctx.points[index]
    (result,) = simulate_serving(
        workload,
        point.config,
        engine=point.engine.model,
        memory=point.engine.memory,
        gpu_memory_utilization=ctx.gpu_memory_utilization,
        backend=ctx.backend,
        stall_threshold_s=ctx.stall_threshold_s,
        slo_ttft_s=ctx.slo.get("ttft_s"),
        slo_tpot_s=ctx.slo.get("tpot_s"),
        slo_tbt_s=ctx.slo.get("tbt_s"),
        max_steps=ctx.max_steps,
        replicas=point.replicas,
        router=point.router,
        warmup=ctx.warmup,
        drain=ctx.drain,
    )
    return result


def fleet_workload(workload: RateWorkload, replicas: int) -> RateWorkload:
    """The workload a fleet of ``replicas`` is probed with: a synthetic one draws
    ``replicas`` times its requests (at most :data:`~..workload.synthetic.MAX_REQUESTS`),
    so that each replica serves as many as one replica alone and a fleet's run is as long
    as one replica's (with half the requests each, two replicas would be measured on a run
    half as long, too short to fill them). A trace is what it is."""
    if isinstance(workload, SyntheticWorkload) and replicas > 1:
        return replace(workload, requests=min(workload.requests * replicas, MAX_REQUESTS))
    return workload


class Runner(Protocol):
    """Runs probes; :meth:`wait` returns at least one finished probe while any is
    pending."""

    def submit(self, index: int, rate: float) -> None:
        """Start probing point ``index`` at ``rate``."""
        ...

    def wait(self) -> list[Done]:
        """Block until one or more probes finish; return them."""
        ...

    def close(self, *, abandon: bool = False) -> None:
        """Stop the workers (pending probes are dropped). With ``abandon`` (the search was
        interrupted or failed) at once: running probes are stopped, not awaited."""
        ...


class SerialRunner:
    """Probes one after another in this process (``workers=1``)."""

    def __init__(self, ctx: ProbeContext) -> None:
        self._ctx = ctx
        self._queue: deque[tuple[int, float]] = deque()

    def submit(self, index: int, rate: float) -> None:
        self._queue.append((index, rate))

    def wait(self) -> list[Done]:
        index, rate = self._queue.popleft()
        return [run_probe(self._ctx, index, rate)]

    def close(self, *, abandon: bool = False) -> None:
        self._queue.clear()


_WORKER_CTX: ProbeContext | None = None


def _init_worker(ctx: ProbeContext, parent: int) -> None:
    global _WORKER_CTX
    _WORKER_CTX = ctx
    for signum in _HUSHED:  # as started (_hushed_spawns), when another way started it
        signal.signal(signum, signal.SIG_IGN)
    _die_with(parent)


_HUSHED = tuple(getattr(signal, name) for name in ("SIGINT", "SIGHUP") if hasattr(signal, name))


@contextlib.contextmanager
def _hushed_spawns() -> Iterator[None]:
    """Processes spawned in the block (the pool's workers, multiprocessing's resource
    tracker) ignore Ctrl-C and SIGHUP from their first instruction: Python keeps a signal
    ignored at its start ignored. A terminal sends both to every process of the command;
    the search handles them and stops its workers, which would otherwise print a
    KeyboardInterrupt traceback, or die under its feet. Only the fork itself runs with
    the signals ignored in this process (a worker's start takes long, and a Ctrl-C then
    must not be lost); only the main thread can change them."""
    from multiprocessing import util

    real = getattr(util, "spawnv_passfds", None)
    if real is None or threading.current_thread() is not threading.main_thread():
        yield
        return

    def spawn(*args: Any) -> Any:
        previous = [signal.signal(signum, signal.SIG_IGN) for signum in _HUSHED]
        try:
            return real(*args)
        finally:
            for signum, handler in zip(_HUSHED, previous):
                signal.signal(signum, handler)

    setattr(util, "spawnv_passfds", spawn)  # noqa: B010  (typeshed's exact signature)
    try:
        yield
    finally:
        util.spawnv_passfds = real


_PR_SET_PDEATHSIG = 1
_WATCH_INTERVAL_S = 0.5


def _die_with(parent: int) -> None:
    """End this worker when the process ``parent`` ends, even by SIGKILL (which runs no
    cleanup in the parent): on Linux the kernel sends SIGKILL on the parent's death
    (``PR_SET_PDEATHSIG``); everywhere a daemon thread watches for a new parent pid (the
    worker is re-parented when its parent dies), which also covers a parent that died
    before the request was made."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_WATCH_INTERVAL_S)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _probe_in_worker(index: int, rate: float) -> Done:
    assert _WORKER_CTX is not None
    return run_probe(_WORKER_CTX, index, rate)


class PoolRunner:
    """Probes on a pool of ``workers`` processes on this machine. Each worker is a fresh
    interpreter (``spawn``: no state forked from a caller with threads) that receives the
    context once."""

    def __init__(self, ctx: ProbeContext, workers: int) -> None:
        import multiprocessing
        from concurrent.futures import Future, ProcessPoolExecutor

        with _hushed_spawns():  # it starts the resource tracker
            self._pool = ProcessPoolExecutor(
                max_workers=workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_init_worker,
                initargs=(ctx, os.getpid()),
            )
        self._pending: set[Future[Done]] = set()

    def submit(self, index: int, rate: float) -> None:
        with _hushed_spawns():  # the pool starts a worker on demand, in submit()
            self._pending.add(self._pool.submit(_probe_in_worker, index, rate))

    def wait(self) -> list[Done]:
        from concurrent.futures import FIRST_COMPLETED, wait

        done, self._pending = wait(self._pending, return_when=FIRST_COMPLETED)
        return [f.result() for f in done]

    def close(self, *, abandon: bool = False) -> None:
        if abandon:
            # Python 3.14 has `terminate_workers`; before it, the pool's own process table.
            terminate = getattr(self._pool, "terminate_workers", None)
            if terminate is not None:
                terminate()
            else:
                for process in list(getattr(self._pool, "_processes", {}).values()):
                    process.terminate()
        self._pool.shutdown(wait=not abandon, cancel_futures=True)


class RayRunner:
    """Probes as Ray tasks, one CPU each: on the cluster at ``address``, or on a new local
    Ray instance (``address=None``, with ``workers`` CPUs, bound to the loopback
    interface). A driver already connected to Ray (``ray.init`` called by the caller)
    keeps its connection."""

    def __init__(self, ctx: ProbeContext, address: str | None, workers: int | None) -> None:
        import ray

        self._ray = ray
        self._started = not ray.is_initialized()
        if self._started:
            options: dict[str, Any] = {
                "include_dashboard": False,
                "log_to_driver": False,
                "logging_level": logging.WARNING,
                "configure_logging": True,
            }
            if address is None:
                # A new instance of our own, never someone else's cluster found through
                # RAY_ADDRESS or /tmp/ray, and reachable from this machine only.
                options.update(address="local", _node_ip_address="127.0.0.1")
                options["num_cpus"] = workers or os.cpu_count() or 1
            else:
                options["address"] = address
            ray.init(**options)
        self._task = ray.remote(num_cpus=1)(run_probe)
        self._ctx = ray.put(ctx)
        self._pending: list[Any] = []

    def submit(self, index: int, rate: float) -> None:
        self._pending.append(self._task.remote(self._ctx, index, rate))

    def wait(self) -> list[Done]:
        done, self._pending = self._ray.wait(self._pending, num_returns=1)
        return [self._ray.get(ref) for ref in done]

    def close(self, *, abandon: bool = False) -> None:
        for ref in self._pending:
            self._ray.cancel(ref, force=abandon)
        self._pending = []
        if self._started:
            self._ray.shutdown()
