"""Soak: many ``next_step`` calls with enqueue/drain/abort churn keep memory flat.

Each backend runs ``SOAK_STEPS`` steps (200 000 by default, the short form CI runs; set
``SOAK_STEPS=10000000`` for the full ten-million form of issue 5) with a steady stream of
prompts (cached prefixes, three priority levels, an abort now and then) so that the number of
tracked requests stays bounded while millions of ids pass through. Memory is measured after
a warm-up (a tenth of the run) and at the end, at the same phase of the churn cycle:

* resident set size (``/proc/self/statm``), which sees the Rust heap as well as Python's;
* ``sys.getallocatedblocks()``, the number of live Python memory blocks;
* ``tracemalloc``: tracing runs over the last ``SOAK_TRACE_STEPS`` steps of the run (10 000
  by default, a tenth of the run in the long form; tracing slows each call twenty- to
  eighty-fold, so it cannot cover the whole short form in CI time), and whatever those steps
  allocated must be freed again by the end (the traced size stays flat). It sees every
  Python object: the pure twin's structures and the Step/Chunk objects the Rust binding hands
  out.

All three must stay within fixed bounds however long the run, which a leak of even a few
bytes per step would break in the long form. The run also checks the counters exactly.
"""

from __future__ import annotations

import gc
import os
import resource
import sys
import time
import tracemalloc
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SOAK_STEPS = int(os.environ.get("SOAK_STEPS", "200000"))
# Steps traced by tracemalloc at the end of the run: 10 000 in the short form, a tenth of the
# run in the long form (tracing costs several microseconds per Python allocation here).
_TRACE_DEFAULT = SOAK_STEPS // 10 if SOAK_STEPS > 10**6 else 10000
SOAK_TRACE_STEPS = int(os.environ.get("SOAK_TRACE_STEPS", str(_TRACE_DEFAULT)))
CYCLE = 48  # the churn pattern repeats every CYCLE steps
RSS_BOUND = 2 * 2**20  # bytes of RSS growth allowed between warm-up and end
TRACED_BOUND = 64 * 2**10  # bytes of traced Python memory left over by the traced steps
BLOCKS_BOUND = 2000  # live Python memory blocks gained between warm-up and end
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    statm = Path("/proc/self/statm")
    if statm.exists():
        return int(statm.read_text().split()[1]) * PAGE
    # Elsewhere: the peak RSS, which can only over-report growth.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def measure() -> tuple[int, int, int]:
    """RSS, live Python blocks, traced bytes (0 while tracemalloc is off)."""
    gc.collect()
    return rss_bytes(), sys.getallocatedblocks(), tracemalloc.get_traced_memory()[0]


def churn(mod: ModuleType, steps: int) -> dict[str, Any]:
    s = mod.Scheduler(
        mod.Config(chunk_size=32, max_decode_tokens=8, token_budget=100, max_prefills_per_step=4)
    )
    warm = max(CYCLE, (steps // 10) // CYCLE * CYCLE)
    trace_from = max(warm, (steps - SOAK_TRACE_STEPS) // CYCLE * CYCLE)
    next_id = 0
    prefilled = 0
    chunks = 0
    drained = 0
    aborted = 0
    peak_tracked = 0
    marks: dict[str, tuple[int, int, int]] = {}
    t0 = time.perf_counter()
    for i in range(steps):
        phase = i % CYCLE
        if i == warm:
            marks["warm"] = measure()
        if i == trace_from:
            tracemalloc.start()
            marks["trace"] = measure()
        if phase % 2 == 0:
            total = 1 + (next_id * 7919) % 120
            cached = (0, 0, 5, total)[next_id % 4] if total > 5 else 0
            s.enqueue(next_id, total, cached_tokens=cached, priority=next_id % 3 - 1)
            next_id += 1
        step = s.next_step(phase % 11)
        prefilled += step.prefill_tokens
        chunks += len(step.chunks)
        if phase == 13:
            try:
                s.abort(next_id - 2)
                aborted += 1
            except KeyError:
                pass
        if phase == CYCLE - 1:
            peak_tracked = max(peak_tracked, len(s))
            drained += s.drain_completed()
    marks["end"] = measure()
    tracemalloc.stop()
    elapsed = time.perf_counter() - t0
    state = s.to_state()
    assert state["step_index"] == steps
    assert s.tokens_prefilled() == prefilled
    assert s.chunks_scheduled() == chunks
    return {
        "marks": marks,
        "elapsed": elapsed,
        "enqueued": next_id,
        "drained": drained,
        "aborted": aborted,
        "tracked": len(s),
        "peak_tracked": peak_tracked,
    }


def test_memory_stays_flat(backend: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    assert not tracemalloc.is_tracing()
    try:
        result = churn(backend, SOAK_STEPS)
    finally:
        tracemalloc.stop()
    marks = result["marks"]
    (rss0, blocks0, _), (_, _, traced0), (rss1, blocks1, traced1) = (
        marks["warm"],
        marks["trace"],
        marks["end"],
    )
    with capsys.disabled():
        print(
            f"\n[soak] {backend.__name__}: {SOAK_STEPS} next_step calls"
            f" ({SOAK_TRACE_STEPS} traced), {result['enqueued']} enqueued,"
            f" {result['drained']} drained, {result['aborted']} aborted,"
            f" peak tracked {result['peak_tracked']}, {result['elapsed']:.1f} s;"
            f" RSS {rss0 / 2**20:.1f} -> {rss1 / 2**20:.1f} MiB,"
            f" blocks {blocks0} -> {blocks1}, traced {traced0} -> {traced1} B"
        )
    # The churn kept the scheduler small while many requests passed through it.
    assert result["peak_tracked"] < 200
    assert result["enqueued"] == (SOAK_STEPS + 1) // 2
    # Every request enqueued was drained, aborted, or is still tracked: none was lost.
    assert result["drained"] + result["aborted"] + result["tracked"] == result["enqueued"]
    assert rss1 - rss0 < RSS_BOUND, f"RSS grew by {(rss1 - rss0) / 2**20:.1f} MiB"
    assert blocks1 - blocks0 < BLOCKS_BOUND, f"{blocks1 - blocks0} more live Python blocks"
    assert traced1 - traced0 < TRACED_BOUND, f"traced memory grew by {traced1 - traced0} bytes"
