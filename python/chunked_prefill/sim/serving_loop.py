"""The reference loop: the serving simulation in plain Python over the pure twin.

It does what ``rust/core/src/sim/run.rs`` does, one token at a time and with the same
floating-point operations in the same order, so both give identical records (and the
same ``--json``). It is the specification the fast loop is tested against, not a path
for large runs.
"""

from __future__ import annotations

import math
from typing import Any

from ..pure_serving import ServingConfig, ServingScheduler
from .engine import EngineModel
from .tokens import TokenPlan
from .workload import Workload

__all__ = ["KV_SERIES_CAP", "SimLoopError", "run_loop"]

KV_SERIES_CAP = 4096
"""Points of the KV-usage series before it is thinned (as ``sim::KV_SERIES_CAP``)."""


class SimLoopError(ValueError):
    """A run that cannot finish (a request that never fits, the step limit)."""


def check_fits(workload: Workload, config: dict[str, Any]) -> None:
    """Raise for the first request that can never fit the pool (as ``sim::check_fits``)."""
    bs = config["block_size"]
    usable = config["num_blocks"] - math.floor(config["watermark"] * config["num_blocks"])
    first = _first_unfit(workload, bs, usable)
    if first is None:
        return
    for i, (p, o) in enumerate(zip(workload.prompt_tokens, workload.output_tokens)):
        if i < first:
            continue
        needed = -(-(p + o - 1) // bs)
        if needed > usable:
            raise SimLoopError(
                f"request {i} (prompt {p} tokens, output {o}) needs {needed} KV blocks at its"
                f" longest, but the pool has {usable} usable blocks: it could never run"
            )


def _first_unfit(workload: Workload, bs: int, usable: int) -> int | None:
    """Where :func:`check_fits`'s scan starts: the first request that may not fit, found
    with numpy where no sum can pass int64 (``None``: all fit), else 0 (scan them all)."""
    import numpy as np

    if len(workload) == 0:
        return None
    p = np.asarray(workload.prompt_tokens, dtype=np.int64)
    o = np.asarray(workload.output_tokens, dtype=np.int64)
    if int(p.max()) + int(o.max()) > np.iinfo(np.int64).max:
        return 0
    unfit = np.flatnonzero(-(-(p + o - 1) // bs) > usable)
    return int(unfit[0]) if unfit.size else None


def run_loop(
    workload: Workload, config: dict[str, Any], engine: EngineModel, max_steps: int
) -> dict[str, Any]:
    """Run ``workload`` through the pure ``ServingScheduler(ServingConfig(**config))``;
    returns the records ``_core.simulate_serving`` returns, as lists."""
    sched = ServingScheduler(ServingConfig(**config))
    check_fits(workload, config)
    plan = TokenPlan(workload)
    n = len(workload)
    arrival, prompt, output = workload.arrival_s, workload.prompt_tokens, workload.output_tokens
    order = sorted(range(n), key=lambda i: (arrival[i], i))
    nan = math.nan
    rec: dict[str, Any] = {
        "admitted": [nan] * n,
        "first_token": [nan] * n,
        "finish": [nan] * n,
        "max_gap": [0.0] * n,
        "cached_tokens": [0] * n,
        "preemptions": [0] * n,
        "recomputed_tokens": [0] * n,
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
    emitted = [0] * n
    last = [0.0] * n
    now = 0.0
    nxt = 0
    done = 0
    while done < n:
        while nxt < n and arrival[order[nxt]] <= now:
            i = order[nxt]
            ids: Any = plan.prompt(i, prompt[i]) if plan.known and plan.known[i] else prompt[i]
            sched.add_request(i, ids, output[i], priority=workload.priority[i])
            nxt += 1
        if sched.num_running + sched.num_waiting == 0:
            now = arrival[order[nxt]]
            continue
        if rec["steps"] == max_steps:
            raise SimLoopError(
                f"reached the limit of {max_steps} steps with {done} of {n} requests done"
            )
        batch = sched.schedule()
        if len(batch) == 0:
            sched.update(batch)
            if nxt < n:
                now = max(now, arrival[order[nxt]])
            continue
        start = now
        pairs = 0
        context = 0
        chunk_sq = 0
        for rid in batch.preempted:
            rec["preemptions"][rid] += 1
        for item in batch.items:
            r = item.request_id
            if math.isnan(rec["admitted"][r]):
                rec["admitted"][r] = start
                rec["cached_tokens"][r] = item.cached_tokens
            if item.is_prefill:
                pairs += item.tokens * item.start + item.tokens * (item.tokens + 1) // 2
                chunk_sq += item.tokens * item.tokens
                if rec["preemptions"][r] > 0:
                    rec["recomputed_tokens"][r] += item.tokens
            else:
                context += item.start + 1
        prefill = batch.num_prefill_tokens
        decode = batch.num_decode_tokens
        duration = engine.step_time(prefill, decode, pairs, context, chunk_sq)
        now = start + duration
        used = config["num_blocks"] - batch.num_free_blocks
        _kv(rec, used, duration, now)
        rec["steps"] += 1
        rec["prefill_tokens"] += prefill
        rec["decode_tokens"] += decode
        sampled = []
        for rid in batch.sampling_ids:
            if plan.known:
                sampled.append(plan.token(rid, prompt[rid] + emitted[rid], prompt[rid]))
            if emitted[rid] == 0:
                rec["first_token"][rid] = now
            else:
                _gap(rec, rid, now - last[rid])
            last[rid] = now
            emitted[rid] += 1
        for rid in sched.update(batch, token_ids=sampled if sampled else None):
            rec["finish"][rid] = now
            done += 1
    return rec


def _gap(rec: dict[str, Any], r: int, gap: float) -> None:
    values, weights = rec["gap_values"], rec["gap_weights"]
    if values and values[-1] == gap:
        weights[-1] += 1
    else:
        values.append(gap)
        weights.append(1)
    if gap > rec["max_gap"][r]:
        rec["max_gap"][r] = gap


def _kv(rec: dict[str, Any], used: int, duration: float, end: float) -> None:
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
            rec["kv_series_blocks"].append(used)
