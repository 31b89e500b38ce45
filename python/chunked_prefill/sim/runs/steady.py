"""The steady part of a serving run, and whether the engine kept up with it (issue 24).

A run starts empty (its first requests find no queue) and ends draining (its last ones see
no new arrivals), so both ends flatter latency. The figures a user compares against SLOs,
and the throughput the engine sustains, are measured on the requests in between: those
whose arrival rank lies in ``[warmup * n, n - drain * n)``. Their arrivals span the
*window* ``[first, last]`` of those arrivals.

Over the window, the engine is **overloaded** when it finishes fewer requests than arrive:
``served_rps < (1 - OVERLOAD_TOLERANCE) * offered_rps``, with ``offered_rps`` the window's
arrivals per second and ``served_rps`` the requests finished inside it per second. Requests
in the system then pile up through the run (a queue growing without bound), and every
latency figure grows with the run's length instead of describing the load: a capacity
search counts such a rate as failing whatever its attainment.

A window is **long enough** when it lasts at least :data:`MIN_LIFETIMES` times the mean
time its requests spend running (admission to last token): a shorter run ends before the
requests with long outputs have piled up to their steady number, and flatters every
figure. A capacity search draws more requests of a synthetic workload until its runs are
long enough.

SLO attainment is the fraction of the window's requests that meet every SLO, with a Wilson
95 % confidence interval (the run is one sample of the arrival process).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .defaults import DEFAULT_DRAIN, DEFAULT_WARMUP

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "DEFAULT_DRAIN",
    "DEFAULT_WARMUP",
    "MIN_LIFETIMES",
    "OVERLOAD_TOLERANCE",
    "Steady",
    "slo_met",
    "steady_state",
    "wilson_interval",
]

OVERLOAD_TOLERANCE = 0.05
"""How far the served rate may fall below the offered rate before the run is overloaded:
in a stable run the two differ only by the change in requests in the system between the
window's ends, a few percent of the window's requests at high load."""

MIN_LIFETIMES = 40.0
"""A window shorter than this many mean running times (admission to last token) is too
short to show the steady state."""


@dataclass(frozen=True)
class Steady:
    """The steady window of a run and what the engine did in it."""

    requests: int
    """Requests whose arrival lies in the window (measured for SLOs)."""
    start_s: float
    end_s: float
    offered_rps: float | None
    """Arrivals per second over the window (``None`` when it has no length)."""
    served_rps: float | None
    """Requests finished inside the window, per second."""
    output_tok_s: float | None
    """Output tokens per second emitted inside the window (each request's tokens spread
    evenly between its first and last token)."""
    overloaded: bool
    """``served_rps < (1 - OVERLOAD_TOLERANCE) * offered_rps``."""
    lifetimes: float = math.inf
    """The window's length over its requests' mean running time (admission to last
    token)."""

    @property
    def long_enough(self) -> bool:
        """The window lasts at least :data:`MIN_LIFETIMES` mean running times."""
        return self.lifetimes >= MIN_LIFETIMES

    def to_dict(self) -> dict[str, object]:
        """The JSON form (``steady`` in ``simulate --json``)."""
        return {
            "requests": self.requests,
            "window_s": [self.start_s, self.end_s],
            "offered_rps": self.offered_rps,
            "served_rps": self.served_rps,
            "output_tok_s": self.output_tok_s,
            "lifetimes": self.lifetimes if math.isfinite(self.lifetimes) else None,
            "long_enough": self.long_enough,
        }


def steady_mask(
    arrival: npt.NDArray[np.float64], warmup: float, drain: float
) -> npt.NDArray[np.bool_]:
    """Which requests (workload order) are in the steady part: arrival rank in ``[warmup *
    n, n - drain * n)``, ties in workload order. Never empty: a run too short to cut keeps
    every request."""
    import numpy as np

    n = len(arrival)
    lo, hi = int(warmup * n), n - int(drain * n)
    if hi - lo < 2:
        lo, hi = 0, n
    order = np.argsort(arrival, kind="stable")
    mask = np.zeros(n, dtype=bool)
    mask[order[lo:hi]] = True
    return mask


def steady_state(
    arrival: npt.NDArray[np.float64],
    admitted: npt.NDArray[np.float64],
    first: npt.NDArray[np.float64],
    finish: npt.NDArray[np.float64],
    output: npt.NDArray[np.int64],
    mask: npt.NDArray[np.bool_],
) -> Steady:
    """The window spanned by the arrivals of ``mask``'s requests and the rates in it."""
    import numpy as np

    start, end = float(arrival[mask].min()), float(arrival[mask].max())
    count = int(mask.sum())
    span = end - start
    if span <= 0:
        return Steady(count, start, end, None, None, None, overloaded=False)
    arrived = int(((arrival >= start) & (arrival <= end)).sum())
    served = int(((admitted >= start) & (admitted <= end)).sum())
    # The first token at ``first``; the others evenly over ``(first, finish]``.
    lasting = np.maximum(finish - first, 1e-300)
    inside = np.clip(np.minimum(finish, end) - np.maximum(first, start), 0.0, None)
    later = np.where(output > 1, (output - 1) * inside / lasting, 0.0)
    tokens = float(((first >= start) & (first <= end)).sum() + later.sum())
    offered, served_rps = arrived / span, served / span
    running = float((finish - admitted)[mask].mean())
    return Steady(
        requests=count,
        start_s=start,
        end_s=end,
        offered_rps=offered,
        served_rps=served_rps,
        output_tok_s=tokens / span,
        overloaded=served_rps < (1.0 - OVERLOAD_TOLERANCE) * offered,
        lifetimes=span / running if running > 0 else math.inf,
    )


def slo_met(
    slo: dict[str, float],
    arrival: npt.NDArray[np.float64],
    first: npt.NDArray[np.float64],
    finish: npt.NDArray[np.float64],
    output: npt.NDArray[np.int64],
    max_gap: npt.NDArray[np.float64],
) -> npt.NDArray[np.bool_]:
    """Per request, whether it meets every SLO in ``slo``: ``ttft_s`` its time to first
    token, ``tpot_s`` its mean time per output token after the first, ``tbt_s`` every gap
    between two of its tokens."""
    import numpy as np

    ok = np.ones(len(arrival), dtype=bool)
    if "ttft_s" in slo:
        ok &= first - arrival <= slo["ttft_s"]
    if "tpot_s" in slo:
        steps = np.maximum(output - 1, 1).astype(np.float64)
        ok &= np.where(output > 1, (finish - first) / steps, 0.0) <= slo["tpot_s"]
    if "tbt_s" in slo:
        ok &= max_gap <= slo["tbt_s"]
    return ok


def wilson_interval(met: int, total: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a proportion ``met / total`` (95 % by default)."""
    if total == 0:
        return (0.0, 1.0)
    p = met / total
    denom = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denom
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denom
    # At p = 0 or 1 an end is exactly 0 or 1; rounding would leave it just inside.
    lo = 0.0 if met == 0 else max(0.0, centre - half)
    hi = 1.0 if met == total else min(1.0, centre + half)
    return (lo, hi)
