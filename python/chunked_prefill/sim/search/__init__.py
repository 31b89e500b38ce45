"""Capacity search: the search space (:mod:`.space`), the rate search of one point
(:mod:`.rate`), the probe runners in this process, a process pool or Ray (:mod:`.runners`),
the driver :func:`search` (:mod:`.capacity`), its defaults (:mod:`.options`) and its table
and plot (:mod:`.report`).

The names of the former ``chunked_prefill.sim.search`` module are importable from here,
loaded on first use: importing the package costs nothing until a search runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .capacity import Progress, search
    from .options import DEFAULT_ATTAINMENT, DEFAULT_PRECISION, RANK_BY
else:
    from .._lazy import lazy_exports

    __getattr__ = lazy_exports(
        __name__,
        {
            ".capacity": ("Progress", "search"),
            ".options": ("DEFAULT_ATTAINMENT", "DEFAULT_PRECISION", "RANK_BY"),
        },
    )

__all__ = ["DEFAULT_ATTAINMENT", "DEFAULT_PRECISION", "RANK_BY", "Progress", "search"]
