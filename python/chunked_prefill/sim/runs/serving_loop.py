"""The reference loop: the serving simulation in plain Python over the pure twin.

It does what ``rust/core/src/sim/run/`` does, one token at a time and with the same
floating-point operations in the same order, so both give identical records (and the
same ``--json``). It is the specification the fast loop is tested against, not a path
for large runs.
"""

from __future__ import annotations

import math
import operator
from typing import Any

from ..engines.roofline import RooflineModel, StepTimeModel
from ..workload.tokens import TokenPlan
from ..workload.types import Workload
from .router import check_fleet, outstanding, pick

__all__ = ["KV_SERIES_CAP", "SimLoopError", "run_loop"]

KV_SERIES_CAP = 4096
"""Points of the KV-usage series before it is thinned (as ``sim::KV_SERIES_CAP``)."""


class SimLoopError(ValueError):
    """A run that cannot finish (a request that never fits, the step limit)."""


def check_fits(workload: Workload, config: dict[str, Any]) -> None:
    """Raise for the first request that can never fit the pool (as ``sim::check_fits``)."""
    bs = config["block_size"]
    usable = config["num_blocks"] - math.floor(config["watermark"] * config["num_blocks"])
    if _all_fit(workload, bs, usable):
        return
    for i, (p, o) in enumerate(zip(workload.prompt_tokens, workload.output_tokens)):
        needed = -(-(p + o - 1) // bs)
        if needed > usable:
            raise SimLoopError(
                f"request {i} (prompt {p} tokens, output {o}) needs {needed} KV blocks at its"
                f" longest, but the pool has {usable} usable blocks: it could never run"
            )


def _all_fit(workload: Workload, bs: int, usable: int) -> bool:
    """Whether every request fits, told by the longest: ``ceil((p + o - 1) / bs) > usable``
    is ``p + o - 1 > usable * bs``, one pass in C over Python's exact ints (the scan that
    names the first offender runs only when one exists)."""
    if len(workload) == 0:
        return True
    # The longest prompt and the longest output together bound every request (the
    # workload's kept figures); only when they do not fit is the longest request itself
    # summed.
    stats = workload._stats()
    if stats.max_prompt + stats.max_output - 1 <= usable * bs:
        return True
    longest: int = max(map(operator.add, workload.prompt_tokens, workload.output_tokens))
    return longest - 1 <= usable * bs


def run_loop(
    workload: Workload,
    config: dict[str, Any],
    engine: StepTimeModel,
    max_steps: int,
    replicas: int = 1,
    router: str = "round-robin",
) -> dict[str, Any]:
    """Run ``workload`` through ``replicas`` pure ``ServingScheduler(ServingConfig(**config))``
    behind ``router``; returns the records ``_core.simulate_serving`` returns, as lists.

    One global clock; the next event is the earliest of the next arrival and the end of
    each replica's step in flight. At an event time: the steps ending then complete (replica
    order), the requests arrived by then are routed (arrival order), then every idle replica
    with requests plans a step (replica order); an empty plan leaves it idle."""
    check_fleet(replicas, router)
    from ...pure_serving import ServingConfig  # the pure loop only: the Rust loop needs none

    ServingConfig(**config)
    check_fits(workload, config)
    fleet = _Fleet(workload, config, engine, max_steps, replicas, router)
    n = len(workload)
    while fleet.done < n:
        t = fleet.next_event()
        if t is None:
            raise SimLoopError(f"no replica can plan a step with {fleet.done} of {n} requests done")
        fleet.now = max(fleet.now, t)
        for r, rep in enumerate(fleet.replicas):
            if rep.flight is not None and rep.flight[1] <= fleet.now:
                fleet.complete(r)
        fleet.route_arrived()
        for r, rep in enumerate(fleet.replicas):
            if rep.flight is None and rep.sched.num_running + rep.sched.num_waiting > 0:
                fleet.start(r)
    return fleet.rec


def _records(n: int) -> dict[str, Any]:
    nan = math.nan
    return {
        "admitted": [nan] * n,
        "first_token": [nan] * n,
        "finish": [nan] * n,
        "max_gap": [0.0] * n,
        "cached_tokens": [0] * n,
        "preemptions": [0] * n,
        "recomputed_tokens": [0] * n,
        "replica": [0] * n,
        "gap_values": [],
        "gap_weights": [],
        "kv_series_t": [],
        "kv_series_blocks": [],
        "steps": 0,
        "prefill_tokens": 0,
        "decode_tokens": 0,
        "kv_block_seconds": 0.0,
        "busy_s": 0.0,
        "kv_peak_blocks": 0,
        "kv_stride": 1,
    }


class _Replica:
    """One replica: its scheduler, its step in flight ``(batch, end, duration, used)``, its
    outstanding tokens and the blocks it held at its latest step."""

    def __init__(self, config: dict[str, Any]) -> None:
        from ...pure_serving import ServingConfig, ServingScheduler

        self.sched = ServingScheduler(ServingConfig(**config))
        self.flight: tuple[Any, float, float, int] | None = None
        self.load = 0
        self.held = 0
        # When its last step ended: a decode whose last token came then has that gap.
        self.last_end = math.nan


class _Fleet:
    """The loop's state between events (as ``Loop`` in ``run/mod.rs``)."""

    def __init__(
        self,
        workload: Workload,
        config: dict[str, Any],
        engine: StepTimeModel,
        max_steps: int,
        replicas: int,
        router: str,
    ) -> None:
        n = len(workload)
        self.wl, self.config, self.engine, self.max_steps = workload, config, engine, max_steps
        self.router = router
        self.replicas = [_Replica(config) for _ in range(replicas)]
        self.plan = TokenPlan(workload)
        self.rec = _records(n)
        self.order = sorted(range(n), key=lambda i: (workload.arrival_s[i], i))
        self.next = 0
        self.emitted = [0] * n
        self.last = [0.0] * n
        self.computed = [0] * n
        self.started = 0
        self.fleet_used = 0
        self.done = 0
        self.now = 0.0

    def next_event(self) -> float | None:
        """The earliest of the next arrival and the end of each step in flight."""
        times = [rep.flight[1] for rep in self.replicas if rep.flight is not None]
        if self.next < len(self.order):
            times.append(self.wl.arrival_s[self.order[self.next]])
        return min(times) if times else None

    def route_arrived(self) -> None:
        """Route every request that has arrived by now, in arrival order."""
        order, arrival = self.order, self.wl.arrival_s
        while self.next < len(order) and arrival[order[self.next]] <= self.now:
            self._route(order[self.next])
            self.next += 1

    def _route(self, i: int) -> None:
        wl, plan = self.wl, self.plan
        prompt, output = wl.prompt_tokens[i], wl.output_tokens[i]
        ids: Any = plan.prompt(i, prompt) if plan.known and plan.known[i] else prompt
        reps = self.replicas

        def cached(r: int) -> int:
            return reps[r].sched.cached_prefix_tokens(ids)

        loads = [rep.load for rep in reps]
        r = pick(self.router, self.next, loads, None if isinstance(ids, int) else cached)
        reps[r].load += outstanding(prompt, output, 0, 0)
        self.rec["replica"][i] = r
        reps[r].sched.add_request(i, ids, output, priority=wl.priority[i])

    def start(self, r: int) -> None:
        """Plan a step on replica ``r`` now and put it in flight (an empty plan is reported
        at once and leaves it idle)."""
        rec, rep = self.rec, self.replicas[r]
        if self.started == self.max_steps:
            raise SimLoopError(
                f"reached the limit of {self.max_steps} steps with {self.done} of"
                f" {len(self.wl)} requests done"
            )
        batch = rep.sched.schedule()
        if len(batch) == 0:
            rep.sched.update(batch)
            return
        start = self.now
        pairs = 0
        context = 0
        chunks = 0
        chunk_sq = 0
        for rid in batch.preempted:
            rec["preemptions"][rid] += 1
        for item in batch.items:
            i = item.request_id
            if math.isnan(rec["admitted"][i]):
                rec["admitted"][i] = start
                rec["cached_tokens"][i] = item.cached_tokens
            if item.is_prefill:
                pairs += item.tokens * item.start + item.tokens * (item.tokens + 1) // 2
                chunks += 1
                chunk_sq += item.tokens * item.tokens
                if rec["preemptions"][i] > 0:
                    rec["recomputed_tokens"][i] += item.tokens
            else:
                context += item.start + 1
        prefill, decode = batch.num_prefill_tokens, batch.num_decode_tokens
        if isinstance(self.engine, RooflineModel):
            duration = self.engine.step_time(prefill, decode, pairs, context, chunk_sq, chunks)
        else:
            duration = self.engine.step_time(prefill, decode, pairs, context, chunk_sq)
        used = self.config["num_blocks"] - batch.num_free_blocks
        self.fleet_used += used - rep.held
        rep.held = used
        rep.flight = (batch, start + duration, duration, used)
        self.started += 1

    def complete(self, r: int) -> None:
        """Complete replica ``r``'s step in flight: record it, sample its tokens, report
        it back."""
        rec, rep, wl, plan = self.rec, self.replicas[r], self.wl, self.plan
        assert rep.flight is not None
        batch, end, duration, used = rep.flight
        rep.flight = None
        _kv(rec, used, self.fleet_used, duration, end)
        rec["steps"] += 1
        rec["prefill_tokens"] += batch.num_prefill_tokens
        rec["decode_tokens"] += batch.num_decode_tokens
        prompt = wl.prompt_tokens
        for i in batch.preempted:
            rep.load += min(self.computed[i], prompt[i])
            self.computed[i] = 0
        for item in batch.items:
            if item.is_prefill:
                i = item.request_id
                now = item.start + item.tokens
                rep.load -= min(now, prompt[i]) - min(self.computed[i], prompt[i])
                self.computed[i] = now
        sampled = []
        if plan.known:
            for i in batch.sampling_ids:
                sampled.append(plan.token(i, prompt[i] + self.emitted[i], prompt[i]))
        # The gaps of the step's decodes that sampled in the replica's step before (all the
        # same) come first as one run, then the other tokens in item order (the Rust loop
        # records them in this order without visiting each decode).
        run = [
            item.request_id
            for item in batch.items
            if not item.is_prefill and self.last[item.request_id] == rep.last_end
        ]
        gap = end - rep.last_end
        if run:
            _gaps(rec, gap, len(run))
        in_run = set(run)
        for i in batch.sampling_ids:
            if i in in_run:
                if gap > rec["max_gap"][i]:
                    rec["max_gap"][i] = gap
            elif self.emitted[i] == 0:
                rec["first_token"][i] = end
            else:
                _gap(rec, i, end - self.last[i])
            self.last[i] = end
            self.emitted[i] += 1
            rep.load -= 1
        rep.last_end = end
        for i in rep.sched.update(batch, token_ids=sampled if sampled else None):
            rec["finish"][i] = end
            self.done += 1
        held = self.config["num_blocks"] - rep.sched.num_free_blocks
        self.fleet_used += held - rep.held
        rep.held = held


def _gap(rec: dict[str, Any], r: int, gap: float) -> None:
    _gaps(rec, gap, 1)
    if gap > rec["max_gap"][r]:
        rec["max_gap"][r] = gap


def _gaps(rec: dict[str, Any], gap: float, count: int) -> None:
    values, weights = rec["gap_values"], rec["gap_weights"]
    if values and values[-1] == gap:
        weights[-1] += count
    else:
        values.append(gap)
        weights.append(count)


def _kv(rec: dict[str, Any], used: int, fleet_used: int, duration: float, end: float) -> None:
    rec["kv_block_seconds"] += used * duration
    rec["busy_s"] += duration
    if used > rec["kv_peak_blocks"]:
        rec["kv_peak_blocks"] = used
    step = rec["steps"]
    if step % rec["kv_stride"] == 0:
        if len(rec["kv_series_t"]) == KV_SERIES_CAP:
            rec["kv_series_t"] = rec["kv_series_t"][::2]
            rec["kv_series_blocks"] = rec["kv_series_blocks"][::2]
            rec["kv_stride"] *= 2
        if step % rec["kv_stride"] == 0:
            rec["kv_series_t"].append(end)
            rec["kv_series_blocks"].append(fleet_used)
