"""Latency plots of simulation results: TTFT and TBT CDFs, the tail, the KV pool."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .table import short_labels

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from matplotlib.figure import Figure

    from ..runs.results import SimResult


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed (it is the optional ``plot`` extra)."""


PLOT_HINT = (
    "install the plot extra: pip install '.[plot]' from a checkout, or"
    " pip install 'chunked-prefill[plot]'"
)


def require_matplotlib() -> None:
    """Raise :class:`PlotUnavailable` unless matplotlib can be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PlotUnavailable(PLOT_HINT) from None


def plot_title(results: Sequence[SimResult], workload: str | None = None) -> str:
    """The figure's title: the workload (else the request count), the engine(s) with their
    model and GPU, and the scheduler (with the KV pool for the serving scheduler)."""
    from ..engines.roofline import RooflineModel
    from ..engines.spec import memory_of

    if workload is None:
        workload = f"{results[0].requests} requests" if results else "no results"
    engines = []
    for engine in {r.engine.name: r.engine for r in results}.values():
        if isinstance(engine, RooflineModel):
            engines.append(f"roofline of {engine.name}")  # the name gives model, GPU, TP
            continue
        memory = memory_of(engine.name)
        engines.append(f"{engine.name} ({memory.model} on {memory.gpu})")
    pools = sorted({r.serving.num_blocks for r in results if r.serving is not None})
    if pools:
        scheduler = f"serving scheduler, {', '.join(map(str, pools))} KV blocks"
        fleets = sorted({(r.serving.replicas, r.serving.router) for r in results if r.serving})
        if fleets != [(1, "round-robin")]:
            scheduler += "; " + ", ".join(f"{n} replicas, {router}" for n, router in fleets)
    else:
        scheduler = "planner, no memory limit"
    return f"{workload}\nengine: {', '.join(engines) or '-'}; scheduler: {scheduler}"


def _tail(
    values: npt.NDArray[np.float64], weights: npt.NDArray[np.int64] | None
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Sorted samples, the fraction at or below each, and the fraction at or above each."""
    import numpy as np

    order = np.argsort(values, kind="stable")
    x = values[order]
    w = np.ones(x.size) if weights is None else weights[order].astype(np.float64)
    cw = np.cumsum(w)
    total = cw[-1]
    return x, cw / total, (total - cw + w) / total


def latency_figure(results: Sequence[SimResult], *, workload: str | None = None) -> Figure:
    """A matplotlib figure of the TTFT and TBT distributions of every configuration.

    The top row is the CDF (the body: medians and the usual case); the second row is the
    tail, the fraction of samples at or above each latency on a log axis, where p99 (the
    1e-2 line), p99.9 and the maximum (the last point of each curve) are as far apart as
    they are in time, and the TBT panel marks the stall threshold. Serving-scheduler
    results add a third row: KV-cache usage over time. The title names the ``workload``
    (a description such as ``Workload.source``; else the request count), the engine with
    its model and GPU, and the scheduler. The caller closes the figure
    (``matplotlib.pyplot.close(fig)``).
    """
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    serving = bool(results) and all(r.serving is not None for r in results)
    fig = plt.figure(figsize=(12, 12.5 if serving else 8.5))
    grid = fig.add_gridspec(3 if serving else 2, 2)
    ax_ttft = fig.add_subplot(grid[0, 0])
    ax_tbt = fig.add_subplot(grid[0, 1])
    tail_ttft = fig.add_subplot(grid[1, 0], sharex=ax_ttft)
    tail_tbt = fig.add_subplot(grid[1, 1], sharex=ax_tbt)
    if serving:
        _kv_panel(fig.add_subplot(grid[2, :]), results)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, (r, label) in enumerate(zip(results, plot_labels(results))):
        color = colors[index % len(colors)]
        for ax, tail, values, weights in (
            (ax_ttft, tail_ttft, r.ttft, None),
            (ax_tbt, tail_tbt, r.tbt_gaps, r.tbt_weights),
        ):
            if not values.size:
                continue
            x, below, above = _tail(values * 1e3, weights)
            ax.step(x, below, where="post", color=color, label=label)
            tail.step(x, above, where="pre", color=color)
            tail.plot(x[-1], above[-1], marker="o", color=color, markersize=4)
    for ax in (ax_ttft, ax_tbt):
        ax.set_ylabel("fraction at or below (CDF)")
        ax.set_ylim(0, 1.0)
    for tail in (tail_ttft, tail_tbt):
        tail.set_yscale("log")
        tail.set_ylabel("fraction at or above (1 - CDF, log)")
        tail.axhline(1e-2, color="grey", linestyle="--", linewidth=0.8, label="p99")
        tail.axhline(1e-3, color="grey", linestyle=":", linewidth=0.8, label="p99.9")
    for ax in (ax_ttft, ax_tbt, tail_ttft, tail_tbt):
        ax.set_xscale("log")
        plain_log_ticks(ax.xaxis)
        ax.grid(True, which="both", alpha=0.3)
    tail_ttft.set_xlabel("TTFT, ms (log scale)")
    tail_tbt.set_xlabel("TBT, ms (log scale)")
    if results:
        threshold = results[0].stall_threshold_s * 1e3
        for ax in (ax_tbt, tail_tbt):
            ax.axvline(threshold, color="black", linestyle=":", label=f"stall > {threshold:g} ms")
    ax_ttft.set_title("Time to first token")
    ax_tbt.set_title("Time between tokens (vLLM's ITL)")
    tail_ttft.set_title("TTFT tail (dot: the maximum)")
    tail_tbt.set_title("TBT tail (dot: the maximum)")
    for ax in (ax_ttft, ax_tbt):
        ax.legend(fontsize="small", loc="lower right")
    for ax in (tail_ttft, tail_tbt):
        ax.legend(fontsize="small", loc="lower left")
    fig.suptitle(plot_title(results, workload))
    fig.tight_layout()
    return fig


def plot_labels(results: Sequence[SimResult]) -> list[str]:
    """:func:`short_labels`, each overloaded run marked as such."""
    return [
        f"{label} (overloaded)" if r.serving is not None and r.serving.overloaded else label
        for label, r in zip(short_labels(results), results)
    ]


def plain_log_ticks(axis: Any) -> None:
    """Tick labels of a log axis as plain numbers (``40``, not ``4x10^1``); minor ticks
    are labelled all on an axis within a decade, at 2 and 5 on one up to three decades,
    and not at all on a longer one (where they would overlap)."""
    from matplotlib.ticker import FuncFormatter

    def minor(value: float, _pos: int | None) -> str:
        lo, hi = sorted(axis.get_view_interval())
        decades = math.log10(hi / lo) if lo > 0 else math.inf
        mantissa = round(value / 10 ** math.floor(math.log10(value)), 6) if value > 0 else 0
        if decades <= 1 or (decades <= 3 and mantissa in (2, 5)):
            return f"{value:g}"
        return ""

    axis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value:g}"))
    axis.set_minor_formatter(FuncFormatter(minor))


def _kv_panel(ax: Any, results: Sequence[SimResult]) -> None:
    """KV-cache usage over time, one line per configuration (the serving scheduler's)."""
    import matplotlib.pyplot as plt

    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    # Configurations often use the pool alike: a dash pattern and width of its own keep
    # each line visible where they coincide.
    styles = ("-", "--", ":", "-.")
    for index, (r, label) in enumerate(zip(results, plot_labels(results))):
        s = r.serving
        if s is None or not s.kv_series_t.size:
            continue
        # A fleet's series counts every replica's blocks: its pool is replicas x num_blocks.
        used = s.kv_series_blocks.astype(float) / (s.num_blocks * s.replicas)
        ax.plot(
            s.kv_series_t,
            used,
            color=colors[index % len(colors)],
            linestyle=styles[index % len(styles)],
            linewidth=0.8 + 1.2 * (len(results) - 1 - index) / max(len(results) - 1, 1),
            label=f"{label} ({s.preemptions} preemptions)",
        )
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("simulated time, s")
    ax.set_ylabel("KV blocks in use (fraction of the pool)")
    ax.set_title("KV-cache usage over time")
    ax.grid(True, alpha=0.3)
    # Beside the panel, not over it: a full pool is where the lines are.
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)


def plot_cdfs(results: Sequence[SimResult], path: str, *, workload: str | None = None) -> None:
    """Draw :func:`latency_figure` of ``results`` into the image file ``path``."""
    fig = latency_figure(results, workload=workload)
    import matplotlib.pyplot as plt

    try:
        save_figure(fig, path, dpi=120)
    finally:
        plt.close(fig)


def save_figure(fig: Any, path: str | os.PathLike[str], *, dpi: int) -> None:
    """``fig.savefig`` into ``path`` through a temporary file renamed into place, so an
    interrupted or failed drawing leaves the old file whole (:func:`~.._output.replacing`).
    The suffix names the format; without one, matplotlib's default format is used and its
    suffix added to the name, as ``savefig`` does."""
    from matplotlib import rcParams

    from ..._output import replacing

    name = os.fspath(path)
    fmt = os.path.splitext(name)[1][1:].lower()
    if not fmt:
        fmt = str(rcParams["savefig.format"])
        name = f"{name}.{fmt}"
    with replacing(name, binary=True) as fh:
        fig.savefig(fh, format=fmt, dpi=dpi)
