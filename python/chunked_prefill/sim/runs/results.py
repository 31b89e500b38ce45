"""What a run returns: percentile summaries, step records, the serving figures and
:class:`SimResult`, one per configuration, for either scheduler."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .defaults import DEFAULT_STALL_THRESHOLD_S as DEFAULT_STALL_THRESHOLD_S  # re-exported

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from ..engines.roofline import StepTimeModel
    from .steady import Steady


@dataclass(frozen=True)
class Percentiles:
    """Summary of a latency distribution, in seconds (``None`` when it has no sample)."""

    count: int
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None

    def to_dict(self) -> dict[str, Any]:
        """The figures as plain data."""
        return {
            "count": self.count,
            "mean": self.mean,
            "p50": self.p50,
            "p90": self.p90,
            "p99": self.p99,
            "max": self.max,
        }

    @classmethod
    def of(
        cls,
        values: npt.NDArray[np.float64],
        weights: npt.NDArray[np.int64] | None = None,
    ) -> Percentiles:
        """Inverted-CDF percentiles of ``values`` (each counted ``weights[i]`` times)."""
        import numpy as np

        if values.size == 0:
            return cls(0, None, None, None, None, None)
        if np.signbit(values).any():
            # -0.0 and 0.0 are equal but print apart: the stable sort fixes which is picked.
            order = np.argsort(values, kind="stable")
            v = values[order]
            w = np.ones(v.size, dtype=np.int64) if weights is None else weights[order]
            mean_of = (v, w)
        elif weights is None:
            # Equal values are equal bits here, so each order statistic is one value however
            # ties are placed. Each counted once, the q-th percentile is at index
            # ceil(q n / 100) - 1: partitions find them in linear time (a sort was a
            # twentieth of a 100 000-request simulation), and the mean is the plain pairwise
            # sum of the values as given, with no array of weights beside a million values.
            n = int(values.size)
            at = [-(-q * n // 100) - 1 for q in (50, 90, 99)] + [n - 1]
            p50, p90, p99, top = _order_statistics(values, at)
            return cls(n, float(np.sum(values) / n), p50, p90, p99, top)
        elif strictly_increasing(values):
            # Sorted runs of distinct values (a serving run's gaps): nothing to sort.
            v, w = values, weights
            mean_of = (values, weights)
        else:
            # Any order of equal values picks alike, and the weighted mean is summed in the
            # given order (a stable sort took a tenth of a long run's time).
            order = np.argsort(values)
            v = values[order]
            w = weights[order]
            mean_of = (values, weights)
        cw = np.cumsum(w, dtype=np.int64)
        total = int(cw[-1])

        def pick(q: int) -> float:
            # The first value whose cumulative weight reaches q % of the total:
            # cw * 100 >= q * total, for integers cw >= ceil(q * total / 100).
            return float(v[int(np.searchsorted(cw, -(-q * total // 100), side="left"))])

        # numpy's own pairwise sum, not np.dot: BLAS splits a dot product by its thread
        # count (Ray workers run with one thread), which changed the last bit between hosts.
        # The product casts the weights as it goes (no float copy of them).
        mean = float(np.sum(np.multiply(*mean_of, dtype=np.float64)) / total)
        return cls(total, mean, pick(50), pick(90), pick(99), float(v[-1]))


def _order_statistics(values: npt.NDArray[np.float64], ranks: list[int]) -> list[float]:
    """The values of ``ranks`` (ascending) in ``values`` sorted, by a partition per rank of
    the part above the one before: 0.3 ms for 100 000 values, where numpy's partition at
    all four of a summary's ranks at once took 1.4."""
    import numpy as np

    found = []
    rest, offset = values, 0
    for rank in ranks:
        rest = np.partition(rest, rank - offset)[rank - offset :]
        offset = rank
        found.append(float(rest[0]))
    return found


def strictly_increasing(values: npt.NDArray[np.float64]) -> bool:
    """Whether ``values`` are sorted with no value twice (a serving run's token gap runs)."""
    import numpy as np

    return values.size < 2 or bool(np.all(values[1:] > values[:-1]))


@dataclass(frozen=True)
class StepRecord:
    """One simulated step (kept only with ``record_steps=True``)."""

    index: int
    start_s: float
    end_s: float
    decode_tokens: int
    chunks: tuple[tuple[int, int, int, bool], ...]
    """``(request_id, start, tokens, is_last)`` of each prefill chunk."""
    decoded: tuple[int, ...]
    """Ids of the decoding requests that received a token this step."""
    attention_pairs: int = 0
    """Causal (query, key) pairs of the step's prefill chunks (the model's ``c_attn`` term)."""
    decode_context_tokens: int = 0
    """Context tokens of the decoded requests (the model's ``c_kv`` term)."""
    prefill_chunk_sq: int = 0
    """The squares of the step's prefill chunk lengths, summed (the ``c_chunk_sq`` term)."""

    @property
    def prefill_tokens(self) -> int:
        """Prompt tokens prefilled this step."""
        return sum(c[2] for c in self.chunks)

    @property
    def prefill_chunks(self) -> int:
        """Prefill chunks this step (the roofline's ``head_row_s`` and ``seq_s`` rows)."""
        return len(self.chunks)

    @property
    def duration_s(self) -> float:
        """The modelled duration of the step."""
        return self.end_s - self.start_s


def _no_requests() -> npt.NDArray[np.uint64]:
    import numpy as np

    return np.zeros(0, dtype=np.uint64)


@dataclass(frozen=True)
class ServingStats:
    """The figures only a memory-true (serving scheduler) run has."""

    queue_s: Percentiles
    """Arrival to first admission (getting KV blocks and a first chunk)."""
    preemptions: int
    recomputed_tokens: int
    """Tokens computed again by requests that lost their blocks."""
    prefix_hit_rate: float
    """Prompt tokens found in the prefix cache at first admission / all prompt tokens."""
    kv_usage_mean: float
    """Blocks in use, averaged over the engine's busy time, as a fraction of the pool."""
    kv_usage_peak: float
    num_blocks: int
    input_throughput_tok_s: float
    slo: dict[str, float]
    """The SLOs given (``ttft_s``, ``tpot_s``, ``tbt_s``), maybe none."""
    slo_attainment: float | None
    """Fraction of the steady part's requests meeting every SLO (:mod:`.steady`)."""
    goodput_rps: float | None
    """Those requests per second of the steady window."""
    kv_series_t: npt.NDArray[np.float64] = field(repr=False, compare=False)
    """KV usage over time: step end times (thinned to at most 4096 points)."""
    kv_series_blocks: npt.NDArray[np.uint64] = field(repr=False, compare=False)
    max_gap: npt.NDArray[np.float64] = field(repr=False, compare=False)
    """Per request: its longest gap between two tokens."""
    preempted: npt.NDArray[np.uint64] = field(repr=False, compare=False)
    """Per request: times it was preempted."""
    replicas: int = 1
    """Identical replicas behind the router (the figures above are the fleet's; the KV
    figures are per replica: ``kv_usage_mean`` over every replica's busy time,
    ``kv_usage_peak`` the fullest replica's, ``num_blocks`` one replica's pool)."""
    router: str = "round-robin"
    replica: npt.NDArray[np.uint64] = field(default_factory=_no_requests, repr=False, compare=False)
    """Per request: the replica it was routed to (empty when not recorded)."""
    slo_attainment_ci: tuple[float, float] | None = None
    """The Wilson 95 % interval of ``slo_attainment``."""
    slo_attainment_each: dict[str, float] = field(default_factory=dict)
    """Per SLO (``ttft_s``, ``tpot_s``, ``tbt_s``): the fraction of the steady part's
    requests meeting it."""
    steady: Steady | None = None
    """The steady window: offered and served rates, output throughput, overload."""

    @property
    def overloaded(self) -> bool:
        """The engine finished fewer requests than arrived over the steady window."""
        return self.steady is not None and self.steady.overloaded


@dataclass(frozen=True)
class SimResult:
    """What one configuration did to the workload: summaries plus the raw samples."""

    config: Any
    """A :class:`SimConfig` (the planner) or a ``ServingSimConfig``."""
    requests: int
    ttft_s: Percentiles
    tbt_s: Percentiles
    e2e_s: Percentiles
    throughput_tok_s: float
    steps: int
    stalls: int
    stall_threshold_s: float
    sim_time_s: float
    """From the first arrival to the last token."""
    prefill_tokens: int
    """Prompt tokens prefilled (cached ones excluded)."""
    output_tokens: int
    engine: StepTimeModel
    arrival: npt.NDArray[np.float64] = field(repr=False, compare=False)
    """Per request (workload order): arrival time."""
    admitted: npt.NDArray[np.float64] = field(repr=False, compare=False)
    """Per request: when it was admitted and enqueued into the scheduler."""
    first_token: npt.NDArray[np.float64] = field(repr=False, compare=False)
    """Per request: when its first token was emitted."""
    finish: npt.NDArray[np.float64] = field(repr=False, compare=False)
    """Per request: when its last token was emitted."""
    prefilled: npt.NDArray[np.int64] = field(repr=False, compare=False)
    """Per request: prompt tokens it was given in chunks (planner runs; zeros for serving
    runs, whose per-request figures are in ``serving``)."""
    tbt_gaps: npt.NDArray[np.float64] = field(repr=False, compare=False)
    """TBT gap values; gap ``i`` occurred ``tbt_weights[i]`` times."""
    tbt_weights: npt.NDArray[np.int64] = field(repr=False, compare=False)
    step_log: tuple[StepRecord, ...] | None = field(default=None, repr=False, compare=False)
    serving: ServingStats | None = None
    """The serving scheduler's figures (``None`` for a planner run)."""

    @property
    def ttft(self) -> npt.NDArray[np.float64]:
        """Per-request TTFT samples, in workload order."""
        return self.first_token - self.arrival

    @property
    def e2e(self) -> npt.NDArray[np.float64]:
        """Per-request end-to-end latency samples, in workload order."""
        return self.finish - self.arrival

    def to_dict(self) -> dict[str, Any]:
        """The summaries as JSON-ready plain data (the schema of ``--json``)."""
        out: dict[str, Any] = {
            "config": self.config.to_dict(),
            "requests": self.requests,
            "ttft_s": self.ttft_s.to_dict(),
            "tbt_s": self.tbt_s.to_dict(),
            "e2e_s": self.e2e_s.to_dict(),
            "throughput_tok_s": self.throughput_tok_s,
            "steps": self.steps,
            "stalls": self.stalls,
            "stall_threshold_s": self.stall_threshold_s,
            "sim_time_s": self.sim_time_s,
            "prefill_tokens": self.prefill_tokens,
            "output_tokens": self.output_tokens,
            "engine": self.engine.to_dict(),
        }
        s = self.serving
        if s is not None:
            out.update(
                {
                    "queue_s": s.queue_s.to_dict(),
                    "preemptions": s.preemptions,
                    "recomputed_tokens": s.recomputed_tokens,
                    "prefix_hit_rate": s.prefix_hit_rate,
                    "kv_usage": {"mean": s.kv_usage_mean, "peak": s.kv_usage_peak},
                    "num_blocks": s.num_blocks,
                    "input_throughput_tok_s": s.input_throughput_tok_s,
                    "overloaded": s.overloaded,
                }
            )
            if s.steady is not None:
                out["offered_rps"] = s.steady.offered_rps
                out["served_rps"] = s.steady.served_rps
                out["steady"] = s.steady.to_dict()
            out["config"].update(replicas=s.replicas, router=s.router)
            if s.replicas > 1:
                import numpy as np

                counts = np.bincount(s.replica.astype(np.int64), minlength=s.replicas)
                out["replica_requests"] = [int(c) for c in counts]
            if s.slo:
                out["slo"] = dict(s.slo)
                out["slo_attainment"] = s.slo_attainment
                ci = s.slo_attainment_ci
                out["slo_attainment_ci"] = None if ci is None else list(ci)
                out["slo_attainment_each"] = dict(s.slo_attainment_each)
                out["goodput_rps"] = s.goodput_rps
        return out
