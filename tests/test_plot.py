"""The ``--plot`` figure: a title naming the workload and the engine, and log-scaled tails."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from chunked_prefill.sim import SimResult, default_workload, expand_configs, simulate
from chunked_prefill.sim.report import PLOT_HINT, PlotUnavailable, latency_figure, plot_cdfs

WORKLOAD = default_workload(200, rate=6.0, seed=3)


@pytest.fixture(scope="module")
def results() -> list[SimResult]:
    return simulate(WORKLOAD, expand_configs(chunk_sizes=[256, None]), backend="pure")


def test_figure_has_title_and_log_tails(results: list[SimResult]) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    fig = latency_figure(results, workload=WORKLOAD.source)
    try:
        title = fig.get_suptitle()
        assert WORKLOAD.source in title
        assert results[0].engine.name in title
        axes = fig.get_axes()
        assert len(axes) == 4
        tails = [ax for ax in axes if ax.get_yscale() == "log"]
        assert {ax.get_title() for ax in tails} == {
            "TTFT tail (dot: the maximum)",
            "TBT tail (dot: the maximum)",
        }
        for ax in tails:
            assert ax.get_xscale() == "log"
            low, high = ax.get_ylim()
            # p99 (1e-2) and the maximum (1/samples) both lie inside the tail axis.
            assert low <= 1e-2 <= high
            assert "p99" in [t.get_text() for t in ax.get_legend().get_texts()]
        tbt_tail = next(ax for ax in tails if ax.get_title().startswith("TBT"))
        legend = [t.get_text() for t in tbt_tail.get_legend().get_texts()]
        assert "stall > 100 ms" in legend
        # The last point of every tail curve is the maximum, with its fraction of samples.
        for r, line in zip(results, [ln for ln in tbt_tail.get_lines() if ln.get_marker() == "o"]):
            xs, ys = line.get_data()
            assert list(xs) == [pytest.approx(r.tbt_s.max * 1e3)]
            assert 0 < ys[0] <= 1e-2
    finally:
        plt.close(fig)


def test_title_without_workload_names_the_requests(results: list[SimResult]) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    fig = latency_figure(results)
    try:
        assert fig.get_suptitle() == (
            "200 requests\nengine: llama2-7b-a100 (Llama-2-7B on A100-80GB);"
            " scheduler: planner, no memory limit"
        )
    finally:
        plt.close(fig)


def test_plot_is_written(results: list[SimResult], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "latency.png"
    plot_cdfs(results, str(png), workload=WORKLOAD.source)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_without_matplotlib_the_hint_names_the_extra(
    results: list[SimResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails as if not installed
    with pytest.raises(PlotUnavailable, match=r"pip install '\.\[plot\]'"):
        plot_cdfs(results, str(tmp_path / "x.png"))
    assert "pip install '.[plot]'" in PLOT_HINT


def test_serving_figure_adds_kv_usage_and_names_model_gpu_scheduler() -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from chunked_prefill.sim import expand_serving_configs, simulate_serving

    wl = default_workload(150, rate=30.0, seed=3)
    results = simulate_serving(wl, expand_serving_configs(chunk_sizes=[256, None]), num_blocks=700)
    fig = latency_figure(results, workload=wl.source)
    try:
        title = fig.get_suptitle()
        assert wl.source in title and "Llama-2-7B on A100-80GB" in title
        assert "serving scheduler, 700 KV blocks" in title
        axes = fig.get_axes()
        assert len(axes) == 5
        (kv,) = [ax for ax in axes if ax.get_title() == "KV-cache usage over time"]
        lines = kv.get_lines()
        assert len(lines) == 2
        for r, line in zip(results, lines):
            assert r.serving is not None
            ys = line.get_ydata()
            assert max(ys) <= 1.0 and f"{r.serving.preemptions} preemptions" in line.get_label()
    finally:
        plt.close(fig)
    planner = latency_figure(simulate(wl, expand_configs(chunk_sizes=[256])))
    try:
        assert "planner, no memory limit" in planner.get_suptitle()
    finally:
        plt.close(planner)
