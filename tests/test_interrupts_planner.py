"""Interrupts in the planner: an exception that escapes from a signal handler in the middle
of a call of ``Scheduler`` or ``PrefillChunkState`` (the serving scheduler's twin of this is
``test_interrupts.py``).

The rule (docs/guarantees.md, **Interrupts**): landing before a call's first change, the
exception leaves the object as it was; after its last change, the call is done (its result is
lost); in between (the pure twin only) every later call raises ``RuntimeError``
``scheduler_broken``. No lock or marker is left behind: a later call, on this thread or
another, is never refused or blocked because an interrupt landed in an earlier one.
"""

from __future__ import annotations

import copy
import pickle
import random
import signal
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

import chunked_prefill.pure as P
from alarm import Alarm
from chunked_prefill._validate import message
from conftest import BACKENDS

pytestmark = pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs setitimer")


def other(mod: ModuleType) -> ModuleType:
    return next(m for m in BACKENDS.values() if m is not mod)


def outcome(fn: Callable[[], Any]) -> Any:
    try:
        return ("ok", fn())
    except (ValueError, KeyError) as exc:
        return (type(exc).__name__, str(exc))


CONFIG = {"chunk_size": 5, "max_decode_tokens": 3, "token_budget": 9, "max_prefills_per_step": 2}
READS = (
    "to_state",
    "copy",
    "deepcopy",
    "pickle",
    "state",
    "len",
    "contains",
    "repr",
    "is_idle",
    "active_count",
    "counters",
)


class Op:
    """One call of the run, drawn from the reference's state, run on either backend."""

    def __init__(self, rng: random.Random, ref: Any, next_id: int) -> None:
        tracked = sorted(r["request_id"] for r in ref.to_state()["requests"])
        self.kind = rng.choice(["enqueue", "enqueue", "step", "step", "abort", "drain", "read"])
        self.rid = rng.choice(tracked) if tracked and rng.random() < 0.8 else next_id
        if self.kind == "enqueue" and rng.random() < 0.9:
            self.rid = next_id
        self.total = rng.randrange(1, 20)
        self.cached = rng.randrange(0, self.total + 1) if rng.random() < 0.3 else 0
        self.priority = rng.randrange(-1, 2)
        self.decodes = rng.randrange(0, 6)
        self.read = rng.choice(READS)

    @property
    def method(self) -> str:
        return {"step": "next_step", "drain": "drain_completed"}.get(self.kind, self.kind)

    def run(self, s: Any) -> Any:
        if self.kind == "enqueue":
            return outcome(
                lambda: s.enqueue(
                    self.rid, self.total, cached_tokens=self.cached, priority=self.priority
                )
            )
        if self.kind == "step":
            return repr(s.next_step(self.decodes))
        if self.kind == "abort":
            return outcome(lambda: s.abort(self.rid).to_dict())
        if self.kind == "drain":
            return s.drain_completed()
        return outcome(self.reads(s)[self.read])

    def reads(self, s: Any) -> dict[str, Callable[[], Any]]:
        return {
            "to_state": s.to_state,
            "copy": lambda: copy.copy(s).to_state(),
            "deepcopy": lambda: copy.deepcopy(s).to_state(),
            "pickle": lambda: pickle.loads(pickle.dumps(s)).to_state(),
            "state": lambda: s.state(self.rid).to_dict(),
            "len": lambda: len(s),
            "contains": lambda: self.rid in s,
            "repr": lambda: repr(s).split("(", 1)[1].split(", tracked=")[1],
            "is_idle": s.is_idle,
            "active_count": s.active_count,
            "counters": lambda: (s.chunks_scheduled(), s.tokens_prefilled()),
        }


def every_call(s: Any) -> dict[str, Callable[[], Any]]:
    return {
        "enqueue": lambda: s.enqueue(10**9, 3),
        "next_step": s.next_step,
        "abort": lambda: s.abort(1),
        "drain_completed": s.drain_completed,
        "state": lambda: s.state(1),
        "is_idle": s.is_idle,
        "active_count": s.active_count,
        "chunks_scheduled": s.chunks_scheduled,
        "tokens_prefilled": s.tokens_prefilled,
        "to_state": s.to_state,
        "pickle": lambda: pickle.dumps(s),
        "copy": lambda: copy.copy(s),
        "deepcopy": lambda: copy.deepcopy(s),
        "len": lambda: len(s),
        "contains": lambda: 1 in s,
        "repr": lambda: repr(s),
    }


def assert_refuses_everything(s: Any, method: str) -> None:
    text = message("scheduler_broken", method=method)
    for name, call in every_call(s).items():
        with pytest.raises(RuntimeError) as info:
            call()
        assert str(info.value) == text, name


class Run:
    """A run of ``mod``'s planner under interrupts, checked against the other backend's."""

    def __init__(self, mod: ModuleType, seed: int, max_delay: float) -> None:
        self.mod, self.ref_mod = mod, other(mod)
        self.rng = random.Random(seed)
        self.alarm = Alarm(random.Random(seed + 1), max_delay)
        self.s = mod.Scheduler(mod.Config(**CONFIG))
        self.ref = self.ref_mod.Scheduler(self.ref_mod.Config(**CONFIG))
        self.next_id = 1
        self.interrupts = self.broken = 0

    def go(self, interrupts: int, min_broken: int, max_ops: int) -> None:
        with self.alarm.installed():
            for _ in range(max_ops):
                if self.interrupts >= interrupts and self.broken >= min_broken:
                    return
                self.one()

    def one(self) -> None:
        op = Op(self.rng, self.ref, self.next_id)
        self.next_id += 1
        done, got = self.alarm.run(lambda: op.run(self.s))
        if done:
            assert got == op.run(self.ref), op.kind
            return
        self.interrupts += 1
        s, ref = self.s, self.ref
        if hasattr(s, "_lock"):
            assert not s._lock._is_owned(), "an interrupt left the lock held"
        try:
            state = s.to_state()
        except RuntimeError as exc:
            assert self.mod is P, str(exc)
            assert_refuses_everything(s, op.method)
            self.broken += 1
            op.run(ref)
            self.s = self.mod.Scheduler.from_state(ref.to_state())
            return
        if state != ref.to_state():  # the call was done when the interrupt landed
            op.run(ref)
        assert state == ref.to_state()
        assert self.mod.Scheduler.from_state(state).to_state() == state
        assert repr(s) == repr(self.mod.Scheduler.from_state(state))
        # From here the other backend, restored from this state, must do exactly the same.
        self.ref = self.ref_mod.Scheduler.from_state(state)


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_an_interrupt_leaves_a_usable_or_refusing_planner(name: str) -> None:
    mod = BACKENDS[name]
    run = Run(mod, seed=21, max_delay=100e-6 if mod is P else 30e-6)
    # A cap, not a target: a loaded machine lands fewer of its interrupts inside the calls.
    run.go(interrupts=300, min_broken=3 if mod is P else 0, max_ops=400_000)
    assert run.interrupts >= 300
    if mod is P:
        assert run.broken >= 3
    else:
        assert run.broken == 0


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_an_interrupted_advance_is_done_or_not_and_leaves_nothing_behind(name: str) -> None:
    # The twin marked a state as "inside advance()" and an interrupt that landed between
    # setting and clearing the mark left it set: every later advance() of that state was
    # refused as a re-entry, for good.
    mod = BACKENDS[name]
    alarm = Alarm(random.Random(7), 30e-6 if mod is P else 10e-6)
    state = mod.PrefillChunkState(1, 10**12)
    interrupts = 0
    with alarm.installed():
        # Until 300 interrupts landed inside advance(): between 1 try in 15 and 1 in 100 on
        # this 2-core VM (a CI run stopped at 256 in 20 000, the cap until then).
        for _ in range(400_000):
            before = state.processed_tokens
            done, _ = alarm.run(lambda: state.advance(3))
            after = state.processed_tokens
            if done:
                assert after == before + 3
                continue
            interrupts += 1
            assert after in (before, before + 3)
            state.advance(1)  # neither refused nor blocked
            assert state.processed_tokens == after + 1
            worker = threading.Thread(target=state.advance, args=(1,))
            worker.start()
            worker.join(10)
            assert not worker.is_alive()
            assert state.processed_tokens == after + 2
            if interrupts >= 300:
                break
    assert interrupts >= 300


def test_a_hold_left_by_cpython_3_9_is_let_go() -> None:
    # On CPython 3.9 an interrupt can land in the one instruction between a `with` block and
    # the lock's release, leaving the lock held by this thread with no call in progress: the
    # next call on this thread lets it go, so other threads are not locked out.
    s = P.Scheduler(P.Config(**CONFIG))
    s._lock.acquire()
    s._lock.acquire()
    s.enqueue(1, 3)
    assert not s._lock._is_owned()
    worker = threading.Thread(target=s.next_step)
    worker.start()
    worker.join(10)
    assert not worker.is_alive()
    assert s.is_idle()


def test_a_hold_of_the_advance_lock_left_by_cpython_3_9_is_let_go() -> None:
    from chunked_prefill.pure_planner_values import _ADVANCE_LOCK

    state = P.PrefillChunkState(1, 10)
    _ADVANCE_LOCK.acquire()
    state.advance(2)
    assert not _ADVANCE_LOCK._is_owned()  # type: ignore[attr-defined]
    worker = threading.Thread(target=P.PrefillChunkState(2, 10).advance, args=(1,))
    worker.start()
    worker.join(10)
    assert not worker.is_alive()
    assert state.processed_tokens == 2
