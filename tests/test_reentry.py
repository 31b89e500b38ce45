"""Re-entry and threads: code that runs in the middle of a call and uses the same object.

A finalizer (``__del__`` of cyclic garbage, run by the garbage collector), a signal handler or
an argument's ``__index__`` can run on the calling thread while a ``Scheduler`` or
``PrefillChunkState`` call is in progress and call that same object; other threads can call
it too. Whatever they do, the object is never corrupted and no call fails with a borrow error:

* an ``__index__`` runs while arguments are converted, before the call touches anything, on
  both backends: its calls run whole before the call;
* anywhere else, on the Rust backend the inner call runs whole before or after the outer one
  (no Python code runs while the binding holds a lock); on the pure twin it does that too,
  or, if it lands while the outer call holds the lock (and one of the two calls updates), it
  is refused with ``RuntimeError`` and changes nothing;
* concurrent ``advance`` calls on one state never lose an update.

The hook that runs the inner call is ``sys.settrace``: it fires at every Python line, call and
return while the outer call runs (in the twin's own code, in ``_validate`` and ``_state``
when the binding calls them, in ``copy`` and ``pickle``), which is exactly where a signal
handler or a collection can run, so each test tries every such point, deterministically.

``Step(chunks=...)`` draws its iterable item by item on both backends, so an endless iterator
fails at its first item that is not a ``Chunk``.
"""

from __future__ import annotations

import copy
import gc
import itertools
import json
import pickle
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

import numpy as np
import pytest

import chunked_prefill.pure as P

MESSAGES: dict[str, str] = json.loads(
    Path(P.__file__).with_name("_messages.json").read_text(encoding="utf-8")
)
SRC = Path(__file__).resolve().parents[1] / "rust" / "python" / "src"


def msg(key: str, /, **fields: Any) -> str:
    return MESSAGES[key].format(**fields)


REENTERED = re.compile(
    re.escape(MESSAGES["reentered"])
    .replace(re.escape("{method}"), r"(?P<method>\w+)")
    .replace(re.escape("{running}"), r"(?P<running>\w+)")
)


class Idx:
    """An int that runs ``hook`` when converted, and always takes the binding's slow path."""

    def __init__(self, value: int, hook: Callable[[], object] | None = None) -> None:
        self.value = value
        self.hook = hook

    def __index__(self) -> int:
        if self.hook is not None:
            self.hook()
        return self.value


def busy(mod: ModuleType) -> Any:
    """A scheduler with completed (1), started (2, 3) and waiting (4, 5) requests."""
    s = mod.Scheduler(
        mod.Config(chunk_size=4, max_decode_tokens=2, token_budget=9, max_prefills_per_step=3)
    )
    for rid, total in [(1, 3), (2, 10), (3, 7)]:
        s.enqueue(rid, total)
    s.next_step(1)
    s.enqueue(4, 6, priority=1)
    s.enqueue(5, 5, cached_tokens=2)
    return s


def norm(value: Any) -> Any:
    """A result in a comparable form (a state's fields, a step's repr)."""
    if hasattr(value, "to_dict") and hasattr(value, "advance"):
        return ("state", value.to_dict())
    if hasattr(value, "chunks"):
        return ("step", repr(value))
    return value


def outcome(call: Callable[[], Any]) -> tuple[Any, ...]:
    try:
        return ("ok", norm(call()))
    except (KeyError, ValueError) as exc:
        return ("error", type(exc).__name__, str(exc))


Op = Callable[[Any], Any]

# The outer calls: every Scheduler method, with arguments that run Python when converted.
OUTER: dict[str, Op] = {
    "enqueue": lambda s: s.enqueue(Idx(8), Idx(5), cached_tokens=Idx(1), priority=Idx(-1)),
    "next_step": lambda s: s.next_step(Idx(1)),
    "next_step_numpy": lambda s: s.next_step(np.int64(2)),
    "abort_started": lambda s: s.abort(Idx(2)),
    "abort_waiting": lambda s: s.abort(np.uint32(5)),
    "abort_completed": lambda s: s.abort(Idx(1)),
    "drain_completed": lambda s: s.drain_completed(),
    "state": lambda s: s.state(Idx(3)),
    "to_state": lambda s: s.to_state(),
    "is_idle": lambda s: s.is_idle(),
    "active_count": lambda s: s.active_count(),
    "chunks_scheduled": lambda s: s.chunks_scheduled(),
    "tokens_prefilled": lambda s: s.tokens_prefilled(),
    "repr": repr,
    "len": len,
    "contains": lambda s: Idx(3) in s,
    "copy": lambda s: copy.copy(s).to_state(),
    "pickle": lambda s: pickle.loads(pickle.dumps(s)).to_state(),
}

# The inner calls a finalizer or signal handler makes.
INNER: dict[str, Op] = {
    "abort_started": lambda s: s.abort(2),
    "abort_waiting": lambda s: s.abort(5),
    "next_step": lambda s: s.next_step(1),
    "enqueue": lambda s: s.enqueue(9, 4),
    "drain_completed": lambda s: s.drain_completed(),
    "to_state": lambda s: s.to_state(),
    "len": len,
}


def serial(mod: ModuleType, first: Op, second: Op) -> tuple[Any, ...]:
    s = busy(mod)
    a = outcome(lambda: first(s))
    b = outcome(lambda: second(s))
    return a, b, s.to_state()


def fire_at(point: int, hook: Callable[[], None]) -> list[int]:
    """Trace this thread and run ``hook`` at the ``point``-th trace event (from 0); the
    caller stops with ``sys.settrace(None)`` (a C call: no event of its own). Returns the
    list whose one item counts the events."""
    count = [0]

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        if count[0] == point:
            hook()
        count[0] += 1
        return tracer

    sys.settrace(tracer)
    return count


def points(call: Callable[[], Any]) -> range:
    """Every trace point of ``call``, counted in a run where no hook fires (a run with a hook
    may take another path and have fewer or more; the extra ones are then never reached)."""
    count = fire_at(-1, lambda: None)
    try:
        outcome(call)
    finally:
        sys.settrace(None)
    return range(count[0] + 8)


def run_with_hook(outer: Op, s: Any, point: int, hook: Callable[[], None]) -> tuple[Any, ...]:
    fire_at(point, hook)
    try:
        return outcome(lambda: outer(s))
    finally:
        sys.settrace(None)


class Garbage:
    """A reference cycle whose finalizer runs ``action`` when the collector frees it."""

    def __init__(self, action: Callable[[], None]) -> None:
        self.action = action
        self.me = self

    def __del__(self) -> None:
        self.action()


def check_points(mod: ModuleType, outer_name: str, inner_name: str, via: str) -> set[str]:
    """Run the outer call with the inner one fired at each of its trace points and check
    each result; return how the inner calls ended: ``"before/after"``, ``"refused"`` (pure
    twin only) or ``"not run"`` (the point was not reached)."""
    outer, inner = OUTER[outer_name], INNER[inner_name]
    alone = serial(mod, outer, lambda s: None)[::2]
    before = serial(mod, inner, outer)
    after = serial(mod, outer, inner)
    after = (after[1], after[0], after[2])
    s0 = busy(mod)
    return {
        check_point(mod, outer, inner, point, via, alone, [before, after])
        for point in points(lambda: outer(s0))
    }


def check_point(
    mod: ModuleType,
    outer: Op,
    inner: Op,
    point: int,
    via: str,
    alone: tuple[Any, ...],
    serial_runs: list[tuple[Any, ...]],
) -> str:
    s = busy(mod)
    inner_result: list[tuple[Any, ...]] = []

    def call_inner() -> None:
        try:
            inner_result.append(outcome(lambda: inner(s)))
        except RuntimeError as exc:
            inner_result.append(("refused", str(exc)))

    if via == "finalizer":

        def hook() -> None:
            Garbage(call_inner)
            gc.collect(0)

    else:
        hook = call_inner
    got = run_with_hook(outer, s, point, hook)
    final = s.to_state()
    if not inner_result:
        assert (got, final) == alone
        return "not run"
    (inner_got,) = inner_result
    if inner_got[0] == "refused":
        assert mod is P, f"the Rust backend refused a re-entrant call: {inner_got}"
        match = REENTERED.fullmatch(inner_got[1])
        assert match is not None, inner_got[1]
        # Refused: the scheduler is as if only the outer call had run.
        assert (got, final) == alone
        return "refused"
    assert (inner_got, got, final) in serial_runs, point
    return "before/after"


@pytest.mark.parametrize("inner_name", sorted(INNER))
@pytest.mark.parametrize("outer_name", sorted(OUTER))
def test_a_reentrant_call_runs_whole_or_is_refused(
    backend: ModuleType, outer_name: str, inner_name: str
) -> None:
    """At every point of every call, a signal handler's call into the same scheduler runs
    whole before or after it, or (pure twin only) is refused and changes nothing."""
    seen = check_points(backend, outer_name, inner_name, "handler")
    assert "before/after" in seen
    if backend is not P:
        assert "refused" not in seen


@pytest.mark.parametrize("outer_name", ["next_step", "abort_started", "to_state", "enqueue"])
def test_a_finalizer_mid_call_never_corrupts(backend: ModuleType, outer_name: str) -> None:
    """The issue's case: ``__del__`` of cyclic garbage, collected in the middle of a call,
    aborts a request or plans a step on the same scheduler."""
    for inner_name in ["abort_started", "abort_waiting", "next_step"]:
        seen = check_points(backend, outer_name, inner_name, "finalizer")
        # Every inner call here updates: the twin refuses it while the outer call runs its
        # locked part; Rust runs it before or after.
        assert "before/after" in seen
        assert ("refused" in seen) == (backend is P), seen


def test_the_issue_example(backend: ModuleType) -> None:
    """A finalizer that aborts a started request while ``next_step`` plans: no chunk for the
    aborted request after its abort, and ``to_state``/``next_step`` keep working."""
    s = busy(backend)
    refused: list[str] = []

    def abort() -> None:
        try:
            s.abort(2)
        except RuntimeError as exc:
            refused.append(str(exc))

    def collect() -> None:
        Garbage(abort)
        gc.collect(0)

    # The collection runs while the argument is converted: before the call, on both.
    step = s.next_step(Idx(1, collect))
    assert 2 not in [c.request_id for c in step.chunks]
    assert 2 not in s
    assert refused == []
    ref = busy(backend)
    ref.abort(2)
    assert step == ref.next_step(1)
    assert s.to_state() == ref.to_state()
    while not s.is_idle():
        s.next_step(0)
    assert backend.Scheduler.from_state(s.to_state()).to_state() == s.to_state()


def test_index_calls_back_before_the_call(backend: ModuleType) -> None:
    """An ``__index__`` that uses the scheduler runs before the call on both backends."""
    s = busy(backend)
    ref = busy(backend)
    s.enqueue(Idx(20, lambda: s.next_step(1)), Idx(4, lambda: s.abort(3)), priority=Idx(-3))
    ref.next_step(1)
    ref.abort(3)
    ref.enqueue(20, 4, priority=-3)
    assert s.to_state() == ref.to_state()
    step = s.next_step(Idx(0, lambda: s.enqueue(21, 2)))
    ref.enqueue(21, 2)
    assert step == ref.next_step(0)
    state = s.abort(Idx(21, lambda: s.drain_completed()))
    ref.drain_completed()
    assert state.to_dict() == ref.abort(21).to_dict()
    assert s.to_state() == ref.to_state()


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="needs SIGUSR1")
def test_a_signal_handler_calling_the_scheduler(backend: ModuleType) -> None:
    """A real signal handler, raised while the argument is converted: it runs before."""
    s = busy(backend)
    old = signal.signal(signal.SIGUSR1, lambda signum, frame: s.abort(2))
    try:
        step = s.next_step(Idx(1, lambda: signal.raise_signal(signal.SIGUSR1)))
    finally:
        signal.signal(signal.SIGUSR1, old)
    ref = busy(backend)
    ref.abort(2)
    assert step == ref.next_step(1)
    assert s.to_state() == ref.to_state()


def test_an_escaping_exception_never_leaves_a_corrupt_scheduler(backend: ModuleType) -> None:
    """A handler that lets its exception escape (say ``KeyboardInterrupt``, or a refused
    call's ``RuntimeError``) into a running call: afterwards the scheduler is in a state a
    serial run could reach, or (pure twin, cut mid-update) refuses every call."""
    states = [
        serial(backend, first, second)[2]
        for first, second in [
            (lambda s: None, lambda s: None),
            (INNER["abort_started"], lambda s: None),
            (OUTER["next_step"], lambda s: None),
            (INNER["abort_started"], OUTER["next_step"]),
            (OUTER["next_step"], INNER["abort_started"]),
        ]
    ]
    broken = 0
    s0 = busy(backend)
    for point in points(lambda: OUTER["next_step"](s0)):
        s = busy(backend)

        def hook(s: Any = s) -> None:
            s.abort(2)
            raise KeyboardInterrupt

        fire_at(point, hook)
        try:
            OUTER["next_step"](s)
        except (KeyboardInterrupt, RuntimeError):
            pass
        finally:
            sys.settrace(None)
        try:
            final = s.to_state()
        except RuntimeError as exc:  # cut short mid-update
            assert backend is P
            assert str(exc) == msg("scheduler_broken", method="next_step")
            for call in (s.next_step, s.__len__, s.drain_completed):
                with pytest.raises(RuntimeError, match="the scheduler is unusable"):
                    call()
            broken += 1
        else:
            assert final in states, point
    assert (broken > 0) == (backend is P)


# --------------------------------------------------------------------------- PrefillChunkState


def test_advance_reentered_at_every_point(backend: ModuleType) -> None:
    """``advance`` interrupted by a handler that advances the same state: both updates land,
    or (pure twin, mid-update) the inner one is refused and changes nothing."""
    seen = set()
    st0 = backend.PrefillChunkState(1, 100)
    for point in points(lambda: st0.advance(Idx(10))):
        st = backend.PrefillChunkState(1, 100)
        result: list[str] = []

        def hook(st: Any = st, result: list[str] = result) -> None:
            try:
                st.advance(1)
                result.append("ran")
            except RuntimeError as exc:
                assert str(exc) == msg("state_reentered")
                result.append("refused")

        fire_at(point, hook)
        try:
            st.advance(Idx(10))
        finally:
            sys.settrace(None)
        expected = {(): 10, ("ran",): 11, ("refused",): 10}[tuple(result)]
        assert st.processed_tokens == expected
        seen.update(result)
    assert "ran" in seen
    assert ("refused" in seen) == (backend is P)


def test_index_that_uses_the_state_during_advance(backend: ModuleType) -> None:
    """An ``__index__`` that pickles, copies, reads and advances the very state being
    advanced: no borrow error, no panic, both updates land (the inner one first)."""
    st = backend.PrefillChunkState(7, 50, cached_tokens=3)
    seen: list[Any] = []

    def use() -> None:
        seen.append(pickle.loads(pickle.dumps(st)).processed_tokens)
        seen.append((copy.copy(st) == st, repr(st), st.to_dict(), st.remaining(), st.progress()))
        st.advance(np.int64(2))

    st.advance(Idx(5, use))
    assert st.processed_tokens == 10
    assert seen[0] == 3


def test_advance_from_threads_never_loses_an_update(backend: ModuleType) -> None:
    """Several threads advance one state (numpy counts run Python code while converted)
    while others read, copy and pickle it: every update lands, no call fails."""
    threads, ops = 6, 1500
    st = backend.PrefillChunkState(1, 10**12, cached_tokens=5)
    errors: list[BaseException] = []
    start = threading.Barrier(threads + 2)

    def writer(t: int) -> None:
        start.wait()
        try:
            for i in range(ops):
                st.advance(np.int64(1) if (i + t) % 2 else 1)
        except BaseException as exc:  # pragma: no cover - the failure being tested
            errors.append(exc)

    def reader() -> None:
        start.wait()
        try:
            for _ in range(ops // 3):
                _ = (repr(st), st.to_dict(), st == st, st.remaining(), st.is_complete)
                assert pickle.loads(pickle.dumps(st)).total_tokens == 10**12
                copy.deepcopy(st)
        except BaseException as exc:  # pragma: no cover - the failure being tested
            errors.append(exc)

    workers = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
    workers += [threading.Thread(target=reader) for _ in range(2)]
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for w in workers:
            w.start()
        for w in workers:
            w.join(timeout=120)
    finally:
        sys.setswitchinterval(old)
    assert errors == []
    assert st.processed_tokens == 5 + threads * ops


def test_every_binding_class_is_frozen() -> None:
    """PyO3 checks a borrow flag on every call into a non-frozen class; a frozen class has
    none, so no call order or thread interleaving can raise "Already borrowed" or panic."""
    found = 0
    for path in sorted(SRC.glob("*.rs")):
        text = path.read_text(encoding="utf-8")
        for attrs in re.findall(r"#\[pyclass\(([^\]]*)\)\]", text):
            found += 1
            assert re.search(r"\bfrozen\b", attrs), f"{path.name}: #[pyclass({attrs})]"
        # No method of a Python class takes `&mut self` (plain Rust state behind a lock may).
        for methods in re.findall(r"#\[pymethods\]\s*impl[^{]*\{(.*?)\n\}\n", text, re.S):
            assert not re.search(r"fn \w+(<[^>]*>)?\(\s*&mut self", methods), path.name
        assert not re.search(r"\.borrow(_mut)?\(\)", text), path.name
    assert found >= 5


# --------------------------------------------------------------------------- Step(chunks=...)


def test_step_refuses_an_endless_iterator_at_its_first_bad_item(backend: ModuleType) -> None:
    with pytest.raises(TypeError) as info:
        backend.Step(step_index=0, decode_tokens=0, chunks=itertools.count())
    assert str(info.value) == msg("not_chunk", name="chunks", type_name="int", value_repr="0")

    def endless() -> Iterator[Any]:
        yield backend.Chunk(1, 0, 2, False)
        yield backend.Chunk(2, 4, 1, True)
        yield "three"
        while True:
            yield backend.Chunk(3, 0, 1, False)

    items = endless()
    with pytest.raises(TypeError) as info:
        backend.Step(step_index=1, decode_tokens=1, chunks=items)
    assert str(info.value) == msg("not_chunk", name="chunks", type_name="str", value_repr="'three'")
    # Nothing past the bad item was drawn.
    assert next(items) == backend.Chunk(3, 0, 1, False)


def test_step_takes_any_finite_iterable(backend: ModuleType) -> None:
    chunks = [backend.Chunk(1, 0, 2, False), backend.Chunk(2, 4, 1, True)]
    for given in (chunks, tuple(chunks), iter(chunks), (c for c in chunks)):
        step = backend.Step(step_index=3, decode_tokens=1, chunks=given)
        assert step.chunks == tuple(chunks)
        assert step.prefill_tokens == 3
    with pytest.raises(
        TypeError, match=r"^chunks must be an iterable of Chunk values, got int: 5$"
    ):
        backend.Step(step_index=0, decode_tokens=0, chunks=5)
