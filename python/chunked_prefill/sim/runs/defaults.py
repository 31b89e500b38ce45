"""The runs' defaults that the command line's flags and the runs' signatures share, apart
from the modules that use them: the flags are built before anything runs, and the
results' and steady state's classes are imported while the loop runs
(:func:`~.._lazy.import_meanwhile`)."""

from __future__ import annotations

__all__ = ["DEFAULT_DRAIN", "DEFAULT_STALL_THRESHOLD_S", "DEFAULT_WARMUP"]

DEFAULT_STALL_THRESHOLD_S = 0.1
"""A TBT gap above this many seconds counts as a decode stall."""
DEFAULT_WARMUP = 0.1
"""Fraction of requests, first arrivals, left out as warm-up."""
DEFAULT_DRAIN = 0.1
"""Fraction of requests, last arrivals, left out as drain."""
