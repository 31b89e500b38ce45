"""Threads: one scheduler shared by several Python threads never corrupts state or crashes.

Every thread hammers the same scheduler with enqueues (some of them duplicates), steps,
drains, aborts of random ids, lookups, exports and copies, while the interpreter switches
threads as often as it can. Afterwards the scheduler is run to the end and the whole history
is checked: the steps' indices are exactly ``0 .. n-1``, the counters equal the sums over the
steps, every enqueued request's prompt was prefilled exactly once (or up to the point where
it was aborted), and the only exceptions were the expected ``ValueError`` (a duplicate id)
and ``KeyError`` (an unknown id).

On a free-threaded CPython (``python3.13t``) the same tests run without the GIL, and one more
checks that importing the extension leaves the GIL off (``gil_used = false``).
"""

from __future__ import annotations

import copy
import pickle
import random
import sys
import sysconfig
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import chunked_prefill._core as R

THREADS = 6
OPS = 5000
ID_SPACE = 10**6  # thread t owns the ids t * ID_SPACE + i
CONFIGS = {
    "original": {"chunk_size": 8, "max_decode_tokens": 4},
    "budgeted": {
        "chunk_size": 8,
        "max_decode_tokens": 4,
        "token_budget": 21,
        "max_prefills_per_step": 3,
    },
}
ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Log:
    """What one thread saw."""

    steps: list[Any] = field(default_factory=list)
    enqueued: Counter[int] = field(default_factory=Counter)  # successful enqueues per id
    params: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    aborted: list[Any] = field(default_factory=list)  # the states abort returned
    drained: int = 0
    expected_errors: Counter[str] = field(default_factory=Counter)
    unexpected: list[BaseException] = field(default_factory=list)
    snapshots: list[dict[str, Any]] = field(default_factory=list)


def worker(s: Any, tid: int, start: threading.Barrier, log: Log) -> None:
    rng = random.Random(tid)
    mine: list[int] = []
    start.wait()
    try:
        for i in range(OPS):
            r = rng.random()
            try:
                if r < 0.22:
                    rid = tid * ID_SPACE + i
                    total = rng.randint(1, 20)
                    cached = rng.choice([0, 0, 0, rng.randint(0, total), total])
                    prio = rng.randint(-2, 2)
                    s.enqueue(rid, total, cached_tokens=cached, priority=prio)
                    log.enqueued[rid] += 1
                    log.params[rid] = (total, cached, prio)
                    mine.append(rid)
                elif r < 0.28 and mine:
                    # Enqueue one of its ids again, with the same prompt: a ValueError while
                    # it is tracked, a new enqueue once it has been drained or aborted.
                    rid = rng.choice(mine)
                    total, cached, prio = log.params[rid]
                    s.enqueue(rid, total, cached_tokens=cached, priority=prio)
                    log.enqueued[rid] += 1
                elif r < 0.70:
                    log.steps.append(s.next_step(rng.randint(0, 6)))
                elif r < 0.76:
                    log.drained += s.drain_completed()
                elif r < 0.82:
                    if mine and rng.random() < 0.5:
                        victim = rng.choice(mine[-10:])  # likely still tracked
                    else:
                        victim = rng.randrange(THREADS) * ID_SPACE + rng.randrange(OPS)
                    log.aborted.append(s.abort(victim))
                elif r < 0.90:
                    victim = rng.randrange(THREADS) * ID_SPACE + rng.randrange(OPS)
                    _ = victim in s
                    s.state(victim)
                elif r < 0.95:
                    _ = (len(s), s.is_idle(), s.active_count(), repr(s))
                    _ = (s.chunks_scheduled(), s.tokens_prefilled(), s.config)
                elif r < 0.98:
                    log.snapshots.append(s.to_state())
                else:
                    other = copy.copy(s) if rng.random() < 0.5 else pickle.loads(pickle.dumps(s))
                    other.next_step(1)
            except ValueError as exc:
                assert "is already tracked" in str(exc), exc
                log.expected_errors["ValueError"] += 1
            except KeyError as exc:
                assert "is not tracked" in str(exc.args[0]), exc
                log.expected_errors["KeyError"] += 1
    except BaseException as exc:
        log.unexpected.append(exc)


def prefill_start(total: int, cached: int) -> int:
    return total - 1 if cached >= total else cached


def hammer(mod: ModuleType, cfg: dict[str, Any]) -> tuple[Any, list[Log], list[Any]]:
    s = mod.Scheduler(mod.Config(**cfg))
    logs = [Log() for _ in range(THREADS)]
    start = threading.Barrier(THREADS)
    threads = [
        threading.Thread(target=worker, args=(s, t, start, logs[t]), daemon=True)
        for t in range(THREADS)
    ]
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    finally:
        sys.setswitchinterval(old)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    # Run the scheduler to the end on this thread.
    tail = []
    limit = 10 * THREADS * OPS
    while not s.is_idle():
        tail.append(s.next_step(0))
        assert len(tail) < limit, f"still not idle after {limit} steps: {s!r}"
    return s, logs, tail


@pytest.mark.parametrize("mode", sorted(CONFIGS))
def test_threads_hammering_one_scheduler(backend: ModuleType, mode: str) -> None:
    cfg = CONFIGS[mode]
    s, logs, tail = hammer(backend, cfg)
    for log in logs:
        assert log.unexpected == [], log.unexpected[:3]
    steps = sorted([x for log in logs for x in log.steps] + tail, key=lambda x: x.step_index)

    # Step indices: every one of 0 .. n-1 exactly once.
    assert [x.step_index for x in steps] == list(range(len(steps)))
    assert s.to_state()["step_index"] == len(steps)  # the copies' steps are their own

    # Counters equal the sums over the steps.
    assert s.tokens_prefilled() == sum(x.prefill_tokens for x in steps)
    assert s.chunks_scheduled() == sum(len(x.chunks) for x in steps)

    # Every step obeys the step rule's bounds.
    for x in steps:
        ids = [c.request_id for c in x.chunks]
        assert len(ids) == len(set(ids))
        assert x.prefill_tokens == sum(c.tokens for c in x.chunks)
        assert all(1 <= c.tokens <= cfg["chunk_size"] for c in x.chunks)
        assert x.decode_tokens <= cfg["max_decode_tokens"]
        if cfg.get("token_budget") is None:
            assert len(x.chunks) <= 1
        else:
            assert x.decode_tokens + x.prefill_tokens <= cfg["token_budget"]
            assert len(x.chunks) <= cfg["max_prefills_per_step"]

    # Every request's prompt was prefilled exactly once per enqueue, or up to its abort.
    enqueued: Counter[int] = Counter()
    params: dict[int, tuple[int, int, int]] = {}
    aborted: dict[int, list[int]] = defaultdict(list)
    for log in logs:
        enqueued.update(log.enqueued)
        params.update(log.params)
        for st_ in log.aborted:
            aborted[st_.request_id].append(st_.processed_tokens)
    chunks: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for x in steps:
        for c in x.chunks:
            chunks[c.request_id].append((c.start, c.tokens))
    assert set(chunks) <= set(enqueued)
    assert set(aborted) <= set(enqueued)
    completed = 0
    aborted_complete = 0
    for rid, count in enqueued.items():
        total, cached, _ = params[rid]
        start = prefill_start(total, cached)
        runs: list[int] = []  # where each enqueue's run of chunks ended
        pos = None
        for c_start, size in chunks[rid]:
            if c_start == start:
                if pos is not None:
                    runs.append(pos)
                pos = start
            assert c_start == pos, (rid, chunks[rid])
            pos += size
            assert pos <= total
        if pos is not None:
            runs.append(pos)
        ends = aborted[rid]
        # Runs cut short end exactly where an abort found them; enqueues aborted before
        # their first chunk have no run.
        assert sorted(e for e in runs if e < total) == sorted(p for p in ends if start < p < total)
        assert count == len(runs) + sum(1 for p in ends if p == start and p < total)
        done = sum(1 for e in runs if e == total)
        done_aborts = sum(1 for p in ends if p == total)
        assert done_aborts <= done
        completed += done
        aborted_complete += done_aborts

    # Everything completed was drained or aborted; nothing is left.
    drained = sum(log.drained for log in logs) + s.drain_completed()
    assert drained == completed - aborted_complete
    assert len(s) == 0
    assert s.is_idle()

    # The threads did run into each other: duplicates and unknown ids were rejected.
    errors: Counter[str] = Counter()
    for log in logs:
        errors.update(log.expected_errors)
    assert errors["ValueError"] > 0
    assert errors["KeyError"] > 0
    assert sum(len(log.aborted) for log in logs) > 0

    # Every snapshot taken under contention is a consistent, restorable state.
    for log in logs:
        for snap in log.snapshots[::5]:
            assert backend.Scheduler.from_state(snap).to_state() == snap


def test_readers_see_consistent_states(backend: ModuleType) -> None:
    """Readers running beside a stepping thread always see a state the scheduler could have
    been in: counters never go backwards, tracked requests never exceed their prompt."""
    s = backend.Scheduler(
        backend.Config(chunk_size=3, max_decode_tokens=2, token_budget=10, max_prefills_per_step=4)
    )
    stop = threading.Event()
    problems: list[str] = []

    def writer() -> None:
        rng = random.Random(1)
        rid = 0
        while not stop.is_set():
            # About 3.5 prompt tokens a step against a budget of 8: the queue stays short.
            s.enqueue(rid, rng.randint(1, 6), cached_tokens=rng.choice([0, 1]))
            rid += 1
            s.next_step(2)
            s.drain_completed()

    def reader() -> None:
        last = (-1, -1, -1)
        for _ in range(400):
            state = s.to_state()
            now = (state["step_index"], state["chunks_scheduled"], state["tokens_prefilled"])
            if any(a < b for a, b in zip(now, last)):
                problems.append(f"counters went back: {last} -> {now}")
            last = now
            for item in state["requests"]:
                if not 0 <= item["processed_tokens"] <= item["total_tokens"]:
                    problems.append(repr(item))
            try:
                backend.Scheduler.from_state(state)
            except Exception as exc:
                problems.append(repr(exc))

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        w = threading.Thread(target=writer, daemon=True)
        readers = [threading.Thread(target=reader, daemon=True) for _ in range(3)]
        w.start()
        for t in readers:
            t.start()
        for t in readers:
            t.join(timeout=120)
        stop.set()
        w.join(timeout=120)
    finally:
        sys.setswitchinterval(old)
    assert problems == []
    assert not w.is_alive()


# --------------------------------------------------------------------------- free threading


def _free_threaded() -> bool:
    return bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def test_free_threading_stance_is_declared() -> None:
    """The extension declares ``gil_used = false``: calls are serialised by its own lock."""
    src = ROOT / "rust" / "python" / "src"
    assert "#[pymodule(gil_used = false)]" in (src / "lib.rs").read_text(encoding="utf-8")
    assert "Mutex<ChunkedPrefillScheduler>" in (src / "scheduler.rs").read_text(encoding="utf-8")
    assert isinstance(R.Scheduler(), R.Scheduler)


@pytest.mark.skipif(not _free_threaded(), reason="needs a free-threaded CPython (3.13t+)")
def test_importing_the_extension_keeps_the_gil_off() -> None:  # pragma: no cover
    import chunked_prefill._core  # noqa: F401

    assert not sys._is_gil_enabled()  # type: ignore[attr-defined]
