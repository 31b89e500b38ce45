"""Reports of simulation results: a rich table, JSON, and latency plots (CDF and tail)."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

from .simulator import ServingStats, SimResult

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from matplotlib.figure import Figure
    from rich.console import Console
    from rich.table import Table

__all__ = [
    "SERVING_DROP_ORDER",
    "PlotUnavailable",
    "latency_figure",
    "plot_cdfs",
    "plot_title",
    "print_table",
    "print_whole",
    "require_matplotlib",
    "results_table",
    "results_to_json",
    "serving_table",
    "short_labels",
]

_CONFIG_COLUMNS = (
    ("chunk_size", "chunk"),
    ("token_budget", "budget"),
    ("max_prefills_per_step", "prefills"),
    ("max_decode_tokens", "decode\ncap"),
    ("max_running", "max\nrunning"),
)


def results_to_json(results: Sequence[SimResult], *, indent: int | None = 2) -> str:
    """The ``--json`` document: a list with one object per configuration.

    A figure that is not a finite number (the throughput of a run whose span rounds to
    zero) is written as ``null``, so the document is always standard JSON.
    """
    return json.dumps([_finite(r.to_dict()) for r in results], indent=indent, allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _ms(value: float | None) -> str:
    """Seconds shown as milliseconds: one decimal below 100 ms, whole numbers above."""
    if value is None:
        return "-"
    ms = value * 1e3
    if ms >= 100:
        return f"{ms:.0f}"
    return f"{ms:.1f}"


def _sec(value: float | None) -> str:
    """Seconds with three significant digits (at least whole seconds)."""
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _option(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return "none" if value is None else str(value)


def _row_options(results: Sequence[SimResult]) -> list[dict[str, Any]]:
    """Each result's configuration as plain data, with its engine's options in front: a
    roofline's ``gpu`` and ``tp``, else the engine's name (``engine``), so that rows of
    several engines (``simulate --gpu A,B --tp 1,2``) can say which is which."""
    from .roofline import RooflineModel

    out = []
    for r in results:
        e = r.engine
        if isinstance(e, RooflineModel):
            engine: dict[str, Any] = {"engine": e.model, "gpu": e.gpu, "tp": e.tp}
        else:
            engine = {"engine": e.name, "gpu": None, "tp": None}
        out.append({**engine, **r.config.to_dict()})
    return out


_ENGINE_COLUMNS = (("engine", "engine"), ("gpu", "GPU"), ("tp", "TP"))
"""The engine options a table shows when they differ between its rows."""

_LABELS = {
    "engine": "engine",
    "gpu": "gpu",
    "tp": "TP",
    "chunk_size": "chunk",
    "token_budget": "budget",
    "max_prefills_per_step": "prefills",
    "max_decode_tokens": "decode cap",
    "max_running": "max running",
    "block_size": "block",
    "num_blocks": "blocks",
    "watermark": "watermark",
    "prefix_caching": "prefix cache",
}


def chunk_is_budget(dicts: Sequence[dict[str, Any]]) -> bool:
    """Every row's chunk size is its token budget (the serving default comparison): the
    chunk column says nothing the budget column does not."""
    return bool(dicts) and all(
        d.get("token_budget") is not None and d["chunk_size"] == d["token_budget"] for d in dicts
    )


def short_labels(results: Sequence[SimResult]) -> list[str]:
    """One label per result naming only the options that differ (the chunk size always,
    unless it is every row's token budget), the engine's GPU and TP among them."""
    dicts = _row_options(results)
    same = chunk_is_budget(dicts)
    keys = [
        k
        for k in _LABELS
        if (k == "chunk_size" and not same)
        or (k == "token_budget" and same)
        or (all(k in d for d in dicts) and len({d[k] for d in dicts}) > 1 and k != "chunk_size")
    ]
    return [" ".join(f"{_LABELS[k]}={_option(d[k])}" for k in keys) for d in dicts]


_SERVING_COLUMNS = (
    ("chunk_size", "chunk"),
    ("token_budget", "budget"),
    ("max_prefills_per_step", "prefills"),
    ("max_running", "max\nrunning"),
    ("block_size", "block"),
    ("num_blocks", "blocks"),
    ("watermark", "water\nmark"),
    ("prefix_caching", "prefix\ncache"),
)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}"


def steady_output(r: SimResult) -> float:
    """Output tokens/s over the steady window (the whole run's when it has none)."""
    s = r.serving
    if s is not None and s.steady is not None and s.steady.output_tok_s is not None:
        return s.steady.output_tok_s
    return r.throughput_tok_s


def _served(s: ServingStats) -> str:
    served = None if s.steady is None else s.steady.served_rps
    if served is None:
        return "-"
    return f"[bold red]{served:.3g}![/]" if s.overloaded else f"{served:.3g}"


def _goodput(s: ServingStats) -> str:
    return "-" if s.goodput_rps is None else f"{s.goodput_rps:.2f}"


_SERVING_FIGURES: tuple[tuple[str, str, Callable[[SimResult, ServingStats], str]], ...] = (
    ("TTFT\np50", "", lambda r, s: _ms(r.ttft_s.p50)),
    ("TTFT\np99", "", lambda r, s: _ms(r.ttft_s.p99)),
    ("TBT\np50", "magenta", lambda r, s: _ms(r.tbt_s.p50)),
    ("TBT\np99", "magenta", lambda r, s: _ms(r.tbt_s.p99)),
    ("TBT\nmax", "magenta", lambda r, s: _ms(r.tbt_s.max)),
    ("queue\np99", "", lambda r, s: _ms(s.queue_s.p99)),
    ("out\ntok/s", "", lambda r, s: f"{steady_output(r):.0f}"),
    ("served\nreq/s", "", lambda r, s: _served(s)),
    ("pre-\nempt", "red", lambda r, s: str(s.preemptions)),
    ("hit\n%", "", lambda r, s: _pct(s.prefix_hit_rate)),
    ("KV\n%", "", lambda r, s: _pct(s.kv_usage_peak)),
)

SERVING_DROP_ORDER = (
    "TTFT\np50",
    "TBT\np50",
    "queue\np99",
    "out\ntok/s",
    "hit\n%",
    "served\nreq/s",
)
"""The figure columns a narrow console loses first, in this order (all are in ``--json``)."""


def serving_table(
    results: Sequence[SimResult],
    *,
    title: str | None = None,
    hidden: Collection[str] = (),
) -> Table:
    """The table of serving-scheduler results: latency, queueing, memory, goodput.

    Eleven figure columns plus the options that differ; the figures named (by their header,
    e.g. ``"TTFT\\np50"``) in ``hidden`` are left out and listed in the caption, so that
    :func:`print_table` can fit a narrow console. Everything is in ``--json``.
    """
    from rich import box
    from rich.table import Table

    slo = any(r.serving is not None and r.serving.slo for r in results)
    threshold_ms = results[0].stall_threshold_s * 1e3 if results else 0.0
    last = (
        ("good\nreq/s", "green", lambda r, s: _goodput(s))
        if slo
        else (f"stalls\n>{threshold_ms:g}ms", "red", _stalls)
    )
    figures = [f for f in (*_SERVING_FIGURES, last) if f[0] not in hidden]
    dicts = _row_options(results)
    same = chunk_is_budget(dicts)
    table = Table(
        title=title,
        caption=_serving_caption(slo, [h for h, _, _ in _SERVING_FIGURES if h in hidden], same),
        header_style="bold",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    shown = [
        (key, head)
        for key, head in (*_ENGINE_COLUMNS, *_SERVING_COLUMNS)
        # A budget of None only follows from chunk none (stretched): not a difference.
        if (key == "chunk_size" and not same)
        or (key == "token_budget" and same)
        or (key != "chunk_size" and len({d[key] for d in dicts} - {None}) > 1)
    ]
    for _key, head in shown:
        table.add_column(head, justify="right", style="cyan", no_wrap=True)
    for head, style, _ in figures:
        table.add_column(head, justify="right", style=style or None, no_wrap=True)
    for r, d in zip(results, dicts):
        if r.serving is not None:
            options = (_option(d[key]) for key, _ in shown)
            table.add_row(*options, *(cell(r, r.serving) for _, _, cell in figures))
    return table


def _stalls(r: SimResult, s: ServingStats) -> str:
    return str(r.stalls)


def _serving_caption(slo: bool, hidden: Sequence[str], same: bool = False) -> str:
    caption = (
        "budget: vLLM's max_num_batched_tokens, one prefill may take all of it; " if same else ""
    )
    caption += (
        "TTFT, TBT (vLLM's ITL), queue in ms; out tok/s, served req/s: steady part (!:"
        " overloaded); hit: prefix cache %; KV: peak pool %"
    )
    if slo:
        caption += "; good: goodput req/s"
    if hidden:
        names = ", ".join(h.replace("\n", " ") for h in hidden)
        caption += f"; not shown for width (in --json): {names}"
    return caption


def results_table(results: Sequence[SimResult], *, title: str | None = None) -> Table:
    """A rich table with one row per configuration (TTFT and TBT in ms, e2e in s).

    Only the configuration options that differ between the rows get a column (the chunk
    size always does).
    """
    from rich import box
    from rich.table import Table

    table = Table(
        title=title,
        caption="TTFT and TBT in ms (TBT: time between tokens, vLLM's ITL), e2e in s",
        header_style="bold",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    dicts = _row_options(results)
    shown = [
        (key, head)
        for key, head in (*_ENGINE_COLUMNS, *_CONFIG_COLUMNS)
        if key == "chunk_size" or len({d[key] for d in dicts}) > 1
    ]
    for _key, head in shown:
        table.add_column(head, justify="right", style="cyan")
    threshold_ms = results[0].stall_threshold_s * 1e3 if results else 0.0
    for head in ("TTFT\np50", "TTFT\np90", "TTFT\np99"):
        table.add_column(head, justify="right")
    for head in ("TBT\np50", "TBT\np99", "TBT\nmax"):
        table.add_column(head, justify="right", style="magenta")
    for head in ("e2e\np50", "e2e\np99"):
        table.add_column(head, justify="right")
    table.add_column("output\ntok/s", justify="right")
    table.add_column("steps", justify="right")
    table.add_column(f"stalls\n>{threshold_ms:g}ms", justify="right", style="red")
    for column in table.columns:
        column.no_wrap = True
    for r, d in zip(results, dicts):
        table.add_row(
            *(_option(d[key]) for key, _ in shown),
            _ms(r.ttft_s.p50),
            _ms(r.ttft_s.p90),
            _ms(r.ttft_s.p99),
            _ms(r.tbt_s.p50),
            _ms(r.tbt_s.p99),
            _ms(r.tbt_s.max),
            _sec(r.e2e_s.p50),
            _sec(r.e2e_s.p99),
            f"{r.throughput_tok_s:.0f}",
            str(r.steps),
            str(r.stalls),
        )
    return table


def print_table(results: Sequence[SimResult], console: Console, title: str | None = None) -> None:
    """Print the results table to ``console``, never cutting a figure short.

    A serving table wider than the console first leaves out figure columns in
    :data:`SERVING_DROP_ORDER` (naming them in its caption); a table still wider is printed
    at its natural width (the terminal wraps its lines) rather than with truncated cells.
    """
    serving = bool(results) and all(r.serving is not None for r in results)
    if not serving:
        print_whole(results_table(results, title=title), console)
        return
    hidden: list[str] = []
    table = serving_table(results, title=title)
    for head in SERVING_DROP_ORDER:
        if _natural_width(table, console) <= console.width:
            break
        hidden.append(head)
        table = serving_table(results, title=title, hidden=hidden)
    print_whole(table, console)


def _natural_width(table: Table, console: Console) -> int:
    from rich.measure import Measurement

    return Measurement.get(console, console.options.update_width(10_000), table).maximum


def print_whole(table: Table, console: Console) -> None:
    """Print ``table`` at its natural width when the console is narrower (the terminal
    wraps its lines) rather than with cells cut short."""
    needed = _natural_width(table, console)
    width = console.width
    if needed <= width:
        console.print(table)
        return
    console.width = needed
    try:
        console.print(table)
    finally:
        console.width = width


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
    from .roofline import RooflineModel
    from .serving import memory_of

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

    from .._output import replacing

    name = os.fspath(path)
    fmt = os.path.splitext(name)[1][1:].lower()
    if not fmt:
        fmt = str(rcParams["savefig.format"])
        name = f"{name}.{fmt}"
    with replacing(name, binary=True) as fh:
        fig.savefig(fh, format=fmt, dpi=dpi)
