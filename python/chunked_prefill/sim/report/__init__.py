"""Reports of simulation results: the rich table (:mod:`.table`), JSON (:mod:`.to_json`),
latency plots (:mod:`.plots`) and the lines that read a serving table (:mod:`.reading`).

The names of the former ``chunked_prefill.sim.report`` module are importable from here,
loaded on first use (matplotlib only when a plot is drawn).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .plots import (
        PLOT_HINT,
        PlotUnavailable,
        latency_figure,
        plain_log_ticks,
        plot_cdfs,
        plot_labels,
        plot_title,
        require_matplotlib,
        save_figure,
    )
    from .table import (
        SERVING_DROP_ORDER,
        chunk_is_budget,
        print_table,
        print_whole,
        results_table,
        serving_table,
        short_labels,
        steady_output,
    )
    from .to_json import (
        results_to_json,
    )
else:
    from .._lazy import lazy_exports

    __getattr__ = lazy_exports(
        __name__,
        {
            ".to_json": ("results_to_json",),
            ".table": (
                "SERVING_DROP_ORDER",
                "chunk_is_budget",
                "print_table",
                "print_whole",
                "results_table",
                "serving_table",
                "short_labels",
                "steady_output",
            ),
            ".plots": (
                "PLOT_HINT",
                "PlotUnavailable",
                "latency_figure",
                "plain_log_ticks",
                "plot_cdfs",
                "plot_labels",
                "plot_title",
                "require_matplotlib",
                "save_figure",
            ),
        },
    )

__all__ = [
    "PLOT_HINT",
    "SERVING_DROP_ORDER",
    "PlotUnavailable",
    "chunk_is_budget",
    "latency_figure",
    "plain_log_ticks",
    "plot_cdfs",
    "plot_labels",
    "plot_title",
    "print_table",
    "print_whole",
    "require_matplotlib",
    "results_table",
    "results_to_json",
    "save_figure",
    "serving_table",
    "short_labels",
    "steady_output",
]
