"""Simulation results as a rich table: the planner's and the serving scheduler's columns,
the row labels and the caption."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from ..runs.results import ServingStats, SimResult


_CONFIG_COLUMNS = (
    ("chunk_size", "chunk"),
    ("token_budget", "budget"),
    ("max_prefills_per_step", "prefills"),
    ("max_decode_tokens", "decode\ncap"),
    ("max_running", "max\nrunning"),
)


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
    from ..engines.roofline import RooflineModel

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
