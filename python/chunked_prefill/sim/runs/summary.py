"""The figures of one serving run from its loop's records (the core's or the pure twin's,
which are the same): latency percentiles, throughput, queueing, preemption, the prefix cache,
the KV pool, and the SLOs over the steady part."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..workload.types import Workload
from .results import Percentiles, ServingStats, SimResult, strictly_increasing
from .steady import slo_met, steady_mask, steady_state, wilson_interval

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from ..engines.roofline import StepTimeModel
    from .serving import RunSpec, ServingSimConfig


def canonical_runs(
    values: npt.NDArray[np.float64], weights: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """Token gaps as runs sorted by value, equal values merged (the Rust loop returns them
    so; the pure loop's are put so here): both backends summarise the same arrays."""
    import numpy as np

    if strictly_increasing(values):
        return values, weights
    order = np.argsort(values, kind="stable")
    v, w = values[order], weights[order]
    starts = np.flatnonzero(np.r_[True, v[1:] != v[:-1]])
    return v[starts], np.add.reduceat(w, starts)


def summarise(
    workload: Workload,
    cfg: ServingSimConfig,
    options: dict[str, Any],
    engine: StepTimeModel,
    raw: dict[str, Any],
    a: dict[str, Any],
    spec: RunSpec,
) -> SimResult:
    """The result of one run from the loop's records ``raw`` (``a``: its arrays, with the
    workload's ``arrival_s`` and ``output_tokens`` columns)."""
    import numpy as np

    # No copies of the loop's arrays (read-only views of its bytes): a million requests'
    # columns are 8 MB each, and the summary's peak is the run's.
    arrival = a["arrival_s"].astype(np.float64, copy=False)
    first = a["first_token"].astype(np.float64, copy=False)
    finish = a["finish"].astype(np.float64, copy=False)
    gaps, weights = canonical_runs(
        a["gap_values"].astype(np.float64, copy=False),
        a["gap_weights"].astype(np.int64, copy=False),
    )
    span = float(finish.max() - arrival.min())
    total_out = workload._stats().total_output
    threshold = spec.stall_threshold_s
    return SimResult(
        config=cfg,
        requests=len(workload),
        ttft_s=Percentiles.of(first - arrival),
        tbt_s=Percentiles.of(gaps, weights),
        e2e_s=Percentiles.of(finish - arrival),
        throughput_tok_s=total_out / span if span > 0 else math.inf,
        steps=int(raw["steps"]),
        stalls=int(weights[gaps > threshold].sum()),
        stall_threshold_s=threshold,
        sim_time_s=span,
        prefill_tokens=int(raw["prefill_tokens"]),
        output_tokens=total_out,
        engine=engine,
        arrival=arrival,
        admitted=a["admitted"].astype(np.float64, copy=False),
        first_token=first,
        finish=finish,
        prefilled=np.zeros(len(workload), dtype=np.int64),
        tbt_gaps=gaps,
        tbt_weights=weights,
        serving=_serving_stats(workload, options, raw, a, spec, (arrival, first, finish, span)),
    )


def _serving_stats(
    workload: Workload,
    options: dict[str, Any],
    raw: dict[str, Any],
    a: dict[str, Any],
    spec: RunSpec,
    at: tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64], float],
) -> ServingStats:
    """The serving scheduler's figures of one run: queueing, preemption, the prefix cache,
    the KV pool, and the SLOs over the steady part (``at``: the arrival, first token and
    finish columns and the run's span, as :func:`summarise` has them)."""
    import numpy as np

    arrival, first, finish, span = at
    admitted = a["admitted"].astype(np.float64, copy=False)
    max_gap = a["max_gap"].astype(np.float64, copy=False)
    output = a["output_tokens"].astype(np.uint64, copy=False).view(np.int64)  # < 2**63
    total_in = workload._stats().total_prompt
    pool = options["num_blocks"]
    busy = raw["busy_s"]
    mask = steady_mask(arrival, *spec.cut)
    steady = steady_state(arrival, admitted, first, finish, output, mask)
    times = (arrival, first, finish, output, max_gap)
    attainment, goodput, interval, each = _slo_figures(spec.slo, times, mask, steady, span)
    return ServingStats(
        queue_s=Percentiles.of(admitted - arrival),
        preemptions=int(a["preemptions"].sum()),
        recomputed_tokens=int(a["recomputed_tokens"].sum()),
        prefix_hit_rate=int(a["cached_tokens"].sum()) / total_in,
        kv_usage_mean=raw["kv_block_seconds"] / busy / pool if busy > 0 else 0.0,
        kv_usage_peak=raw["kv_peak_blocks"] / pool,
        num_blocks=pool,
        input_throughput_tok_s=total_in / span if span > 0 else math.inf,
        slo=spec.slo,
        slo_attainment=attainment,
        goodput_rps=goodput,
        slo_attainment_ci=interval,
        slo_attainment_each=each,
        steady=steady,
        kv_series_t=a["kv_series_t"].astype(np.float64),
        kv_series_blocks=a["kv_series_blocks"].astype(np.uint64),
        max_gap=max_gap,
        preempted=a["preemptions"].astype(np.uint64, copy=False),
    )


def _slo_figures(
    slo: dict[str, float], times: tuple[Any, ...], mask: Any, steady: Any, span: float
) -> tuple[float | None, float | None, tuple[float, float] | None, dict[str, float]]:
    """SLO attainment over the steady part, goodput, the attainment's Wilson interval and
    each SLO's own attainment (all ``None``, and no SLO's, without SLOs)."""
    import numpy as np

    each: dict[str, float] = {}
    if not slo:
        return None, None, None, each
    # Each SLO's mask once; meeting every SLO is their conjunction.
    ok = np.ones(int(mask.sum()), dtype=bool)
    for name, limit in slo.items():
        one = slo_met({name: limit}, *times)[mask]
        each[name] = float(one.mean())
        ok &= one
    met = int(ok.sum())
    window = steady.end_s - steady.start_s
    goodput = met / window if window > 0 else met / span if span > 0 else math.inf
    return met / len(ok), goodput, wilson_interval(met, len(ok)), each
