"""Reports of a capacity search: the ranked table and the plot (capacity per configuration,
latency and attainment against the rate for the best few)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from rich.table import Table

__all__ = ["item_label", "plot_search", "search_figure", "search_table"]

_OPTIONS = (
    ("engine", "engine"),
    ("replicas", "repl"),
    ("router", "router"),
    ("chunk_size", "chunk"),
    ("token_budget", "budget"),
    ("max_prefills_per_step", "prefills"),
    ("max_running", "max\nrunning"),
    ("block_size", "block"),
    ("num_blocks", "blocks"),
    ("watermark", "water\nmark"),
    ("prefix_caching", "prefix\ncache"),
)


def _shown(items: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """The options that differ between items (the chunk size always)."""
    dicts = [it["config"] for it in items]
    return [
        (key, head)
        for key, head in _OPTIONS
        if key == "chunk_size" or len({str(d[key]) for d in dicts} - {"None"}) > 1
    ]


def _option(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def item_label(item: dict[str, Any], items: Sequence[dict[str, Any]]) -> str:
    """A short label naming the options of ``item`` that differ among ``items``."""
    heads = {"engine": "", "replicas": "x", "router": ""}
    parts = []
    for key, head in _shown(items):
        value = _option(item["config"][key])
        prefix = heads.get(key, head.replace("\n", " ") + "=")
        parts.append(prefix + value)
    return " ".join(parts)


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    ms = value * 1e3
    return f"{ms:.0f}" if ms >= 100 else f"{ms:.1f}"


def _rate(value: float) -> str:
    return f"{value:#.3g}" if value < 100 else f"{value:.0f}"


def search_table(items: Sequence[dict[str, Any]], *, title: str | None = None) -> Table:
    """One row per grid point, in the order given (best first): the options that differ,
    the capacity (total, per GPU, per dollar when costed), the probes run, and the run at
    capacity (TTFT and TBT p99, attainment)."""
    from rich import box
    from rich.table import Table

    costed = any("requests_per_dollar" in it for it in items)
    table = Table(
        title=title,
        caption="capacity: highest rate meeting the SLOs, req/s (>= : every probe met);"
        " TTFT, TBT p99 in ms at capacity; SLO %: requests meeting every SLO",
        header_style="bold",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    shown = _shown(items)
    table.add_column("#", justify="right")
    for _key, head in shown:
        table.add_column(head, justify="right", style="cyan")
    table.add_column("capacity\nreq/s", justify="right", style="bold green")
    table.add_column("per GPU\nreq/s", justify="right", style="green")
    if costed:
        table.add_column("req per\n$", justify="right", style="green")
    table.add_column("probes", justify="right")
    table.add_column("TTFT\np99", justify="right")
    table.add_column("TBT\np99", justify="right", style="magenta")
    table.add_column("SLO\n%", justify="right")
    for column in table.columns:
        column.no_wrap = True
    for rank, it in enumerate(items, 1):
        run = it["at_capacity"] or {}
        cap = ">=" + _rate(it["capacity_rps"]) if it["capped"] else _rate(it["capacity_rps"])
        row = [str(rank), *(_option(it["config"][key]) for key, _ in shown), cap]
        row.append(_rate(it["capacity_per_gpu_rps"]))
        if costed:
            row.append(f"{it['requests_per_dollar']:.0f}")
        row.append(str(len(it["probes"])))
        row.append(_ms(run.get("ttft_s", {}).get("p99")))
        row.append(_ms(run.get("tbt_s", {}).get("p99")))
        att = run.get("slo_attainment")
        row.append("-" if att is None else f"{att * 100:.1f}")
        table.add_row(*row)
    return table


def search_figure(items: Sequence[dict[str, Any]], *, top: int = 4, title: str = "") -> Figure:
    """Capacity per configuration (bars, best on top) and, for the ``top`` best, the
    fraction of requests meeting the SLOs, TTFT p99 and TBT p99 against the probed rate
    (items need ``keep_runs``); a dotted line marks each one's capacity."""
    from ..report.plots import plain_log_ticks, require_matplotlib

    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(13, max(7.0, 2 + 0.25 * len(items))))
    grid = fig.add_gridspec(3, 2, width_ratios=(1, 1.2))
    bars = fig.add_subplot(grid[:, 0])
    labels = [item_label(it, items) for it in items]
    drawn = bars.barh(range(len(items)), [it["capacity_rps"] for it in items], color="tab:green")
    values = [(">=" if it["capped"] else "") + f"{it['capacity_rps']:.3g}" for it in items]
    bars.bar_label(drawn, labels=values, padding=3, fontsize="small")
    bars.margins(x=0.15)  # room for the value past the longest bar
    bars.set_yticks(range(len(items)), labels, fontsize="small")
    bars.invert_yaxis()
    bars.set_xlabel("capacity, requests/s (SLOs met)")
    bars.set_title("Capacity per configuration (best on top)")
    bars.grid(True, axis="x", alpha=0.3)
    panels = [fig.add_subplot(grid[i, 1]) for i in range(3)]
    figures: tuple[tuple[str, Callable[[dict[str, Any]], float]], ...] = (
        ("met the SLOs", lambda r: float(r["slo_attainment"])),
        ("TTFT p99, ms", lambda r: float(r["ttft_s"]["p99"]) * 1e3),
        ("TBT p99, ms", lambda r: float(r["tbt_s"]["p99"]) * 1e3),
    )
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, (it, label) in enumerate(list(zip(items, labels))[:top]):
        color = colors[index % len(colors)]
        probes = sorted((p for p in it["probes"] if "run" in p), key=lambda p: p["rate_rps"])
        rates = [p["rate_rps"] for p in probes]
        over = [bool(p["run"].get("overloaded")) for p in probes]
        for ax, (_name, get) in zip(panels, figures):
            ys = [get(p["run"]) for p in probes]
            ax.plot(rates, ys, marker="o", color=color, label=label)
            # An overloaded probe's figures describe the run's length, not the rate.
            hit = [(r, y) for r, y, o in zip(rates, ys, over) if o]
            if hit:
                ax.plot(*zip(*hit), linestyle="", marker="x", markersize=11, color="black")
            if it["capacity_rps"] > 0:
                ax.axvline(it["capacity_rps"], color=color, linestyle=":", linewidth=0.8)
    for ax, (name, _get) in zip(panels, figures):
        ax.set_ylabel(name)
        ax.set_xscale("log")
        plain_log_ticks(ax.xaxis)
        ax.grid(True, which="both", alpha=0.3)
    panels[0].set_title(
        f"The best {min(top, len(items))} against the rate (dotted: capacity; x: overloaded)"
    )
    for ax in panels[1:]:
        ax.set_yscale("log")
        plain_log_ticks(ax.yaxis)
    panels[2].set_xlabel("arrival rate, requests/s (log scale)")
    panels[0].legend(fontsize="small", loc="lower left")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_search(
    items: Sequence[dict[str, Any]], path: str, *, top: int = 4, title: str = ""
) -> None:
    """Draw :func:`search_figure` into the image file ``path``."""
    fig = search_figure(items, top=top, title=title)
    import matplotlib.pyplot as plt

    from ..report.plots import save_figure

    try:
        save_figure(fig, path, dpi=110)
    finally:
        plt.close(fig)
