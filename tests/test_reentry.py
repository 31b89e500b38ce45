"""Re-entry and threads: code that runs in the middle of a call and uses the same object.

A finalizer, a signal handler or an argument's ``__index__`` can run on the calling thread
while ``PrefillChunkState.advance`` is in progress and use that same state; other threads can
use it too. Whatever they do, no update is lost and no call fails with a borrow error: an
``__index__`` runs before the update on both backends; on the Rust backend any other inner
call runs whole before or after it (no Python code runs while the binding holds a lock); on
the pure twin it does that too, or, if it lands mid-update, it is refused with
``RuntimeError`` and changes nothing.

The hook that runs the inner call is ``sys.settrace``: it fires at every Python line, call and
return while the outer call runs, which is exactly where a signal handler or a collection can
run, so each test tries every such point, deterministically.

``Step(chunks=...)`` draws its iterable item by item on both backends, so an endless iterator
fails at its first item that is not a ``Chunk``.
"""

from __future__ import annotations

import copy
import itertools
import json
import pickle
import re
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


class Idx:
    """An int that runs ``hook`` when converted, and always takes the binding's slow path."""

    def __init__(self, value: int, hook: Callable[[], object] | None = None) -> None:
        self.value = value
        self.hook = hook

    def __index__(self) -> int:
        if self.hook is not None:
            self.hook()
        return self.value


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
        assert not re.search(r"fn \w+(<[^>]*>)?\(\s*&mut self", text), path.name
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
    with pytest.raises(TypeError, match=r"^'int' object is not iterable$"):
        backend.Step(step_index=0, decode_tokens=0, chunks=5)
