"""The lines under a serving table that say what it means (issue 24): which rows the engine
could not keep up with, and which rows meet which SLO.

A table of eleven figure columns leaves the reading to the user; these lines do it for the
two questions most asked of it: is the load sustainable, and does the configuration meet
its latency targets.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .table import short_labels

if TYPE_CHECKING:
    from ..runs.results import SimResult

__all__ = ["DEFAULT_READING_ATTAINMENT", "overload_lines", "reading_line"]

DEFAULT_READING_ATTAINMENT = 0.99
"""The fraction of requests that must meet an SLO for a row to meet it (``search``'s
default ``--attainment``)."""

_SLO_NAMES = {"ttft_s": "TTFT", "tpot_s": "TPOT", "tbt_s": "TBT"}


def overload_lines(results: Sequence[SimResult]) -> list[str]:
    """A line naming the overloaded rows, with their offered and served rates (none when
    every row kept up)."""
    over = [
        (label, r.serving.steady)
        for label, r in zip(short_labels(results), results)
        if r.serving is not None and r.serving.overloaded and r.serving.steady is not None
    ]
    if not over:
        return []
    offered = [s.offered_rps or 0.0 for _, s in over]
    served = [s.served_rps or 0.0 for _, s in over]
    which = "every row" if len(over) == len(results) else ", ".join(label for label, _ in over)
    return [
        f"overloaded: {which}: {min(offered):.3g} req/s offered, only {_span(served)} served;"
        " the queue grows through the run, so its latencies grow with the run's length"
        " (lower --rate, or add --replicas)"
    ]


def _span(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.3g}" if f"{lo:.3g}" == f"{hi:.3g}" else f"{lo:.3g} to {hi:.3g}"


def reading_line(
    results: Sequence[SimResult], attainment: float = DEFAULT_READING_ATTAINMENT
) -> str | None:
    """Which rows meet every SLO for ``attainment`` of the steady requests, and what the
    others miss; without SLOs, the rows with the lowest TTFT and TBT p99. ``None`` for a
    single row without SLOs."""
    labels = short_labels(results)
    slo = next((r.serving.slo for r in results if r.serving is not None and r.serving.slo), None)
    if slo is None:
        if len(results) < 2:
            return None
        ttft = [r.ttft_s.p99 or 0.0 for r in results]
        tbt = [r.tbt_s.p99 or 0.0 for r in results]
        i, j = ttft.index(min(ttft)), tbt.index(min(tbt))
        return (
            f"reading: lowest TTFT p99 {labels[i]} ({ttft[i] * 1e3:.0f} ms), lowest TBT p99"
            f" {labels[j]} ({tbt[j] * 1e3:.1f} ms); give --slo-ttft/--slo-tpot to see which"
            " rows meet them"
        )
    meets, misses = [], []
    for label, r in zip(labels, results):
        s = r.serving
        assert s is not None
        missed = [
            f"{_SLO_NAMES[name]} {share * 100:.1f} %"
            for name, share in s.slo_attainment_each.items()
            if share < attainment
        ]
        if s.overloaded:
            missed.append("overloaded")
        if missed:
            misses.append(f"{label} ({', '.join(missed)})")
        else:
            meets.append(label)
    targets = ", ".join(f"{_SLO_NAMES[k]} {v:g} s" for k, v in slo.items())
    line = f"reading: {targets} met by {attainment * 100:g} % of requests in"
    if len(meets) == len(results) > 1:
        return line + " every row"
    line += f" {', '.join(meets)}" if meets else " no row"
    return line + (f"; missed by {'; '.join(misses)}" if misses else "")
