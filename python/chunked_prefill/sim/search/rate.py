"""The search for one configuration's capacity: bracketing, then bisection on the rate.

:class:`RateSearch` is a small state machine that knows nothing of simulation: it says
which rate to probe next (:meth:`RateSearch.next_rate`) and is told whether that rate met
the SLO (:meth:`RateSearch.record`). Its sequence of probes depends only on those answers,
so a search gives the same result however the probes of many configurations are spread
over workers.

The rule, with ``lo`` the highest rate known to meet the SLO and ``hi`` the lowest known
to fail:

1. Probe the start rate. While probes meet, double the rate (``lo`` rises); while they
   fail, halve it (``hi`` falls); stop at the first change, or after
   :data:`BRACKET_STEPS` doublings (capacity ``start * 2**BRACKET_STEPS``, *capped*) or
   halvings (capacity 0: no rate meets).
2. Bisect geometrically: probe ``sqrt(lo * hi)``; a pass raises ``lo``, a failure lowers
   ``hi``; stop when ``hi <= lo * (1 + precision)``.

The capacity is ``lo``. Every probe that met is at or below it and every probe that failed
is above it (``lo`` only rises and ``hi`` only falls), so it is *the highest probed rate
that meets the SLO*, with a failing probe less than ``precision`` above it. When attainment
is monotone in the rate, the true threshold lies in ``(lo, hi]``. When it is not (a load
that fails, then meets again higher up), the capacity is still a rate that meets the SLO
with a failing rate just above it, but a higher rate that meets may exist unprobed: the
search finds *an* edge, the one its fixed sequence reaches from the start rate.
"""

from __future__ import annotations

import math

__all__ = ["BRACKET_STEPS", "RateSearch", "bisection_steps"]

BRACKET_STEPS = 10
"""Doublings (or halvings) of the start rate before the bracketing gives up: the search
covers rates from ``start / 1024`` to ``start * 1024``."""


def bisection_steps(lo: float, hi: float, precision: float) -> int:
    """Probes a geometric bisection of ``(lo, hi)`` takes to reach ``hi <= lo * (1 +
    precision)``."""
    steps = 0
    while hi > lo * (1 + precision):
        mid = math.sqrt(lo * hi)
        # The worst case: the wider half is always kept (they are equal up to rounding).
        lo, hi = (mid, hi) if hi / mid >= mid / lo else (lo, mid)
        steps += 1
    return steps


class RateSearch:
    """The capacity search of one configuration (see the module docstring)."""

    def __init__(self, start: float, precision: float) -> None:
        if not (math.isfinite(start) and start > 0):
            raise ValueError(f"start rate must be a finite number > 0, got {start!r}")
        if not (math.isfinite(precision) and precision > 0):
            raise ValueError(f"precision must be a finite number > 0, got {precision!r}")
        self.start = float(start)
        self.precision = float(precision)
        self.lo: float | None = None
        self.hi: float | None = None
        self.probes: list[tuple[float, bool]] = []
        self._next: float | None = self.start
        self.capped = False

    def next_rate(self) -> float | None:
        """The rate to probe next, or ``None`` when the search is over."""
        return self._next

    def record(self, rate: float, meets: bool) -> None:
        """Take the result of probing ``rate`` (it must be :meth:`next_rate`)."""
        if rate != self._next:
            raise ValueError(f"expected a result for rate {self._next!r}, got one for {rate!r}")
        self.probes.append((rate, meets))
        if meets:
            self.lo = rate
        else:
            self.hi = rate
        self._next = self._choose()

    def _choose(self) -> float | None:
        lo, hi = self.lo, self.hi
        if lo is not None and hi is not None:
            if hi <= lo * (1 + self.precision):
                return None
            return math.sqrt(lo * hi)
        factor = 2.0 ** len(self.probes)
        if lo is not None:  # every probe so far met: go up
            if factor > 2.0**BRACKET_STEPS:
                self.capped = True
                return None
            return self.start * factor
        if factor > 2.0**BRACKET_STEPS:  # every probe failed: go down
            return None
        return self.start / factor

    @property
    def done(self) -> bool:
        """Whether the search is over."""
        return self._next is None

    @property
    def capacity(self) -> float:
        """The highest probed rate that met the SLO (0 when none did)."""
        return self.lo if self.lo is not None else 0.0

    def remaining(self) -> int:
        """An estimate of the probes still to run (exact once bracketed)."""
        if self._next is None:
            return 0
        if self.lo is not None and self.hi is not None:
            return bisection_steps(self.lo, self.hi, self.precision)
        # Bracketing: one more probe for the bracket, then bisection of a factor of 2.
        return 1 + bisection_steps(1.0, 2.0, self.precision)
