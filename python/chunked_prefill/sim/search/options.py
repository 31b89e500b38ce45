"""The search's defaults that its callers share with the command line (whose flags need them
before anything is imported to run): when a rate meets the SLOs, how close the bisection
gets, and the orders of the result."""

from __future__ import annotations

DEFAULT_ATTAINMENT = 0.99
"""A rate meets the SLOs when at least this fraction of requests meets every one."""
DEFAULT_PRECISION = 0.02
"""The bisection stops when the failing rate is within 2 % above the meeting one."""
RANK_BY = ("capacity", "per-gpu")
"""Orders of the result: by capacity, or by capacity per GPU (the same order per dollar
when every GPU costs the same)."""
