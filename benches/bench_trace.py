"""Reading a 100 000-row trace: the Rust reader against the Python reader, in one run.

Run ``python -m pytest benches/bench_trace.py --benchmark-only`` for both readers side by
side, per format, or ``python benches/bench_trace.py [ROWS]`` for one line per format with
both times and the ratio. The trace is the one ``scripts/compare_revision.py --trace`` times
``simulate --trace`` on (the columns of ``examples/trace.csv``, 100 000 rows), and the same
rows as JSON Lines. ``load_trace`` runs in full either way
(reading the file, building the ``Workload``); the Python reader is ``load_trace`` with the
core's reader switched off, as it was before it.
"""

from __future__ import annotations

import csv
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from unittest import mock

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from chunked_prefill.sim import Workload, load_trace
from chunked_prefill.sim.workload import trace as trace_module

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from compare_revision import write_trace

ROWS = 100_000


def write(path: Path, rows: int) -> None:
    """The generated trace at ``path``: CSV, or the same rows as JSON Lines."""
    write_trace(path.with_suffix(".csv"), rows)
    if path.suffix == ".jsonl":
        with open(path.with_suffix(".csv"), newline="") as f, open(path, "w") as out:
            for row in csv.DictReader(f):
                record = {k: v if k == "prefix_id" else json.loads(v) for k, v in row.items() if v}
                out.write(json.dumps(record) + "\n")


@pytest.fixture(scope="module", params=["csv", "jsonl"])
def trace(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A generated trace of ROWS rows in one format."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"trace.{request.param}"
        write(path, ROWS)
        yield path


def reader(name: str) -> Callable[[Path], Workload]:
    """``load_trace`` with the core's reader (``"rust"``) or without it (``"python"``)."""
    if name == "rust":
        return load_trace

    def python(path: Path) -> Workload:
        with mock.patch.object(trace_module, "_read_fast", lambda *_: None):
            return load_trace(path)

    return python


@pytest.mark.parametrize("name", ["rust", "python"])
def test_load_trace(benchmark: BenchmarkFixture, trace: Path, name: str) -> None:
    """Read the whole trace into a Workload."""
    benchmark.group = f"load_trace {trace.suffix[1:]} {ROWS} rows"
    wl = benchmark.pedantic(reader(name), args=(trace,), rounds=3, iterations=1)
    assert len(wl) == ROWS
    if benchmark.stats is not None:  # None under --benchmark-disable
        benchmark.extra_info["rows_per_s"] = ROWS / benchmark.stats.stats.mean


def main(argv: list[str]) -> None:
    """One line per format: the best of three reads by each reader, and the ratio."""
    rows = int(argv[0]) if argv else ROWS
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in ("csv", "jsonl"):
            path = Path(tmp) / f"trace.{fmt}"
            write(path, rows)
            best = {}
            for name in ("rust", "python"):
                read = reader(name)
                times = []
                for _ in range(3):
                    started = time.perf_counter()
                    read(path)
                    times.append(time.perf_counter() - started)
                best[name] = min(times)
            print(
                f"{fmt:5} {rows} rows: rust {best['rust'] * 1e3:.0f} ms,"
                f" python {best['python'] * 1e3:.0f} ms,"
                f" {best['python'] / best['rust']:.1f}x"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
