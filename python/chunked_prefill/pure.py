"""The pure-Python twin of the Rust scheduler.

Same classes, same results, same errors as :mod:`chunked_prefill._core`, and the same data
structures (a map of request states, an ordered set of started requests, priority buckets of
waiting requests, a list of completed ones), so it is both the reference of the differential
tests and the baseline of the benchmarks. No Rust is involved.
"""

from __future__ import annotations

import heapq
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterator
from types import FrameType
from typing import Any

from . import _state
from ._validate import (
    I64_MAX,
    I64_MIN,
    U64_MAX,
    as_i64,
    as_u64,
    make_final,
    message,
    type_error,
)
from .pure_planner_values import (
    Chunk,
    Config,
    PrefillChunkState,
    Step,
    _advance,
    _check_prompt,
    _new_step,
    _object_new,
    _prefill_start,
)

__all__ = [
    "I64_MAX",
    "I64_MIN",
    "STATE_VERSION",
    "U64_MAX",
    "Chunk",
    "Config",
    "PrefillChunkState",
    "Scheduler",
    "Step",
]

__version__ = _state.package_version()
STATE_VERSION = _state.STATE_VERSION


# The Scheduler calls that change it: a same-thread re-entry is refused if either call is one.
_UPDATES = frozenset({"enqueue", "next_step", "abort", "drain_completed"})


class Scheduler:
    """Plans engine steps: splits prompts into chunks and counts decode tokens.

    Requests are tracked from :meth:`enqueue` until :meth:`drain_completed` (or
    :meth:`abort`) removes them. Each :meth:`next_step` plans one engine step and advances
    the scheduled requests at once; the caller does not report completion back.

    Calls from several threads are serialised by an internal lock. Arguments are converted
    before the lock is taken, so an ``__index__`` that calls back into this scheduler runs
    its call whole before this one, as on the Rust backend. A call made by a finalizer, a
    ``gc`` callback or a signal handler that runs while another call of this scheduler holds
    the lock on the same thread is refused with ``RuntimeError`` and changes nothing, unless
    both calls only read; the Rust backend never runs Python code while it holds its lock,
    so there the same call runs whole before or after the interrupted one. If an exception
    (say, ``KeyboardInterrupt`` from a signal handler) interrupts an update half done, the
    scheduler refuses every later call with ``RuntimeError`` rather than plan from a corrupt
    state.
    """

    __slots__ = (
        "_call",
        "_chunks",
        "_completed",
        "_config",
        "_incomplete",
        "_lock",
        "_mutating",
        "_priorities",
        "_running",
        "_states",
        "_step",
        "_tokens",
        "_waiting",
    )
    _config: Config
    # Every tracked request by id.
    _states: dict[int, PrefillChunkState]
    # Started, incomplete requests in the order they started.
    _running: OrderedDict[int, None]
    # Waiting requests: one FIFO bucket per priority, and a min-heap of the bucket keys
    # (a key leaves the heap lazily, once its bucket is gone).
    _waiting: dict[int, OrderedDict[int, None]]
    _priorities: list[int]
    # Completed requests, as the state objects they completed with; an entry whose id was
    # aborted (or aborted and enqueued again) is skipped at drain time.
    _completed: list[PrefillChunkState]
    _incomplete: int
    _step: int
    _chunks: int
    _tokens: int
    # Every call runs holding `_lock`; `_call` names the call running and its frame (so a
    # same-thread re-entry, which the reentrant lock lets in, can be recognised), and
    # `_mutating` names the update in progress: still set after it returns only if an
    # exception cut it short.
    _lock: threading.RLock
    _call: tuple[str, FrameType] | None
    _mutating: str | None

    def __new__(cls, config: Config | None = None) -> Scheduler:
        self = object.__new__(cls)
        if config is None:
            config = Config()
        elif not isinstance(config, Config):
            raise type_error("not_config", "config", config)
        self._config = config
        self._states = {}
        self._running = OrderedDict()
        self._waiting = {}
        self._priorities = []
        self._completed = []
        self._incomplete = 0
        self._step = 0
        self._chunks = 0
        self._tokens = 0
        self._lock = threading.RLock()
        self._call = None
        self._mutating = None
        return self

    def _locked(self) -> threading.RLock:
        """The lock, for a ``with`` statement. It is written in C, so no Python code (no
        signal handler) runs between taking it and entering the block, nor (CPython 3.10
        and later) between leaving the block and releasing it. Held already by this thread
        with no call of this scheduler on the stack, it was left by an interrupt that landed
        in the one instruction CPython 3.9 runs between a ``with`` block and its release:
        let go, or every other thread would wait for it."""
        lock = self._lock
        if lock._is_owned():  # type: ignore[attr-defined]
            frame: FrameType | None = sys._getframe(2)
            while frame is not None:
                if frame.f_code in _LOCKED_CODES and frame.f_locals.get("self") is self:
                    return lock
                frame = frame.f_back
            while lock._is_owned():  # type: ignore[attr-defined]
                lock.release()
        return lock

    def _enter(self, name: str) -> tuple[str, FrameType] | None:
        """Mark the call ``name`` as running and return the call it interrupts, if any.

        Holding the lock, so a call found running is on this thread: a finalizer or signal
        handler interrupted it. Refuse ``name`` unless both only read, since an update would
        break the running call's loops and a read would see its half-done update. A marker
        whose call is no longer on the stack was left by an exception (a signal handler's
        can land on any line) that cut a call short outside its ``try``: nothing runs then.
        """
        running = self._call
        if running is not None:
            frame: FrameType | None = sys._getframe(1)
            while frame is not None and frame is not running[1]:
                frame = frame.f_back
            if frame is None:
                running = None
            elif name in _UPDATES or running[0] in _UPDATES:
                raise RuntimeError(message("reentered", method=name, running=running[0]))
        if self._mutating is not None:
            raise RuntimeError(message("scheduler_broken", method=self._mutating))
        self._call = (name, sys._getframe(1))
        return running

    @property
    def config(self) -> Config:
        """The scheduler's configuration."""
        return self._config

    def enqueue(
        self,
        request_id: int,
        total_tokens: int,
        *,
        cached_tokens: int = 0,
        priority: int = 0,
    ) -> None:
        """Track ``request_id`` with a prompt of ``total_tokens`` tokens.

        ``cached_tokens`` prompt tokens are already in the engine's prefix cache, so
        prefill starts there. Lower ``priority`` starts first; ties keep enqueue order.
        """
        rid = as_u64("request_id", request_id)
        total = as_u64("total_tokens", total_tokens)
        cached = as_u64("cached_tokens", cached_tokens)
        prio = as_i64("priority", priority)
        _check_prompt(total, cached)
        with self._locked():
            outer = self._enter("enqueue")
            try:
                if rid in self._states:
                    raise ValueError(message("duplicate_request", request_id=rid))
                state = _object_new(PrefillChunkState)
                state._request_id = rid
                state._total = total
                state._processed = _prefill_start(total, cached)
                state._cached = cached
                state._priority = prio
                self._mutating = "enqueue"
                self._states[rid] = state
                self._push_waiting(rid, prio)
                self._incomplete += 1
                self._mutating = None
            finally:
                self._call = outer

    def _push_waiting(self, rid: int, prio: int) -> None:
        bucket = self._waiting.get(prio)
        if bucket is None:
            bucket = self._waiting[prio] = OrderedDict()
            heapq.heappush(self._priorities, prio)
        bucket[rid] = None

    def _pop_waiting(self) -> int | None:
        """The first waiting request in scheduling order, removed from its bucket."""
        heap = self._priorities
        waiting = self._waiting
        while heap:
            prio = heap[0]
            bucket = waiting.get(prio)
            if bucket is None:
                heapq.heappop(heap)
                continue
            rid, _ = bucket.popitem(last=False)
            if not bucket:
                del waiting[prio]
                heapq.heappop(heap)
            return rid
        return None

    def next_step(self, active_decode_count: int = 0) -> Step:
        """Plan the next engine step given ``active_decode_count`` decoding requests.

        Decodes first: ``decode_tokens = min(active_decode_count, max_decode_tokens)``
        (and at most ``token_budget``) when ``interleave_decode``, else 0. Then prefill
        chunks in scheduling order: started requests first, in the order they started,
        then waiting ones by priority and enqueue order.
        """
        n = active_decode_count
        if type(n) is not int or n < 0 or n > U64_MAX:
            n = as_u64("active_decode_count", n)
        with self._locked():
            outer = self._enter("next_step")
            try:
                self._mutating = "next_step"
                cfg = self._config
                budget = cfg._token_budget
                chunk_size = cfg._chunk_size
                decode = min(n, cfg._max_decode_tokens) if cfg._interleave_decode else 0
                if budget is None:
                    left = chunk_size
                else:
                    decode = min(decode, budget)
                    left = budget - decode
                cap = cfg._max_prefills_per_step
                states = self._states
                chunks: list[Chunk] = []
                total = 0
                running = self._running
                # Started requests first, in the order they started.
                if running and left:
                    finished: list[int] = []
                    for rid in running:
                        if len(chunks) == cap or not left:
                            break
                        chunk = _advance(states[rid], chunk_size, left)
                        chunks.append(chunk)
                        total += chunk._tokens
                        left -= chunk._tokens
                        if chunk._is_last:
                            finished.append(rid)
                    for rid in finished:
                        del running[rid]
                        self._completed.append(states[rid])
                    self._incomplete -= len(finished)
                # Then requests not yet started, by priority and enqueue order.
                while len(chunks) < cap and left:
                    waiting_id = self._pop_waiting()
                    if waiting_id is None:
                        break
                    st = states[waiting_id]
                    chunk = _advance(st, chunk_size, left)
                    chunks.append(chunk)
                    total += chunk._tokens
                    left -= chunk._tokens
                    if chunk._is_last:
                        self._completed.append(st)
                        self._incomplete -= 1
                    else:
                        running[waiting_id] = None
                index = self._step
                self._step = index + 1
                self._chunks += len(chunks)
                self._tokens += total
                self._mutating = None
                return _new_step(index, decode, tuple(chunks), total)
            finally:
                self._call = outer

    def abort(self, request_id: int) -> PrefillChunkState:
        """Stop tracking ``request_id`` wherever it is and return its last state."""
        rid = as_u64("request_id", request_id)
        with self._locked():
            outer = self._enter("abort")
            try:
                state = self._states.get(rid)
                if state is None:
                    raise KeyError(message("unknown_request", request_id=rid))
                self._mutating = "abort"
                del self._states[rid]
                if state._processed < state._total:
                    self._incomplete -= 1
                    if rid in self._running:
                        del self._running[rid]
                    else:
                        bucket = self._waiting[state._priority]
                        del bucket[rid]
                        if not bucket:
                            del self._waiting[state._priority]
                            if len(self._priorities) > 2 * len(self._waiting) + 16:
                                self._priorities = list(self._waiting)
                                heapq.heapify(self._priorities)
                self._mutating = None
                return state
            finally:
                self._call = outer

    def state(self, request_id: int) -> PrefillChunkState:
        """A copy of ``request_id``'s progress; ``KeyError`` if it is not tracked."""
        rid = as_u64("request_id", request_id)
        with self._locked():
            outer = self._enter("state")
            try:
                state = self._states.get(rid)
                if state is None:
                    raise KeyError(message("unknown_request", request_id=rid))
                return state._copy()
            finally:
                self._call = outer

    def is_idle(self) -> bool:
        """Whether no tracked request has prefill work left (an empty scheduler is idle)."""
        with self._locked():
            outer = self._enter("is_idle")
            try:
                return self._incomplete == 0
            finally:
                self._call = outer

    def drain_completed(self) -> int:
        """Stop tracking every completed request; return how many were removed."""
        with self._locked():
            outer = self._enter("drain_completed")
            try:
                self._mutating = "drain_completed"
                states = self._states
                removed = 0
                for state in self._completed:
                    if states.get(state._request_id) is state:
                        del states[state._request_id]
                        removed += 1
                self._completed = []
                self._mutating = None
                return removed
            finally:
                self._call = outer

    def active_count(self) -> int:
        """Requests tracked, completed-but-undrained ones included."""
        with self._locked():
            outer = self._enter("active_count")
            try:
                return len(self._states)
            finally:
                self._call = outer

    def chunks_scheduled(self) -> int:
        """Prefill chunks planned since the scheduler was made."""
        with self._locked():
            outer = self._enter("chunks_scheduled")
            try:
                return self._chunks
            finally:
                self._call = outer

    def tokens_prefilled(self) -> int:
        """Prompt tokens planned since the scheduler was made (cached ones excluded)."""
        with self._locked():
            outer = self._enter("tokens_prefilled")
            try:
                return self._tokens
            finally:
                self._call = outer

    def _requests(self) -> Iterator[PrefillChunkState]:
        """Every tracked request: started ones in start order, waiting ones in scheduling
        order, then completed ones in completion order."""
        states = self._states
        for rid in self._running:
            yield states[rid]
        for prio in sorted(self._waiting):
            for rid in self._waiting[prio]:
                yield states[rid]
        for state in self._completed:
            if states.get(state._request_id) is state:
                yield state

    def to_state(self) -> dict[str, Any]:
        """The whole scheduler as plain Python values (see ``chunked_prefill._state``)."""
        with self._locked():
            outer = self._enter("to_state")
            try:
                return _state.build(
                    self._config.to_dict(),
                    self._step,
                    self._chunks,
                    self._tokens,
                    [s.to_dict() for s in self._requests()],
                )
            finally:
                self._call = outer

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Scheduler:
        """Rebuild a scheduler from :meth:`to_state`'s form (of either backend)."""
        parsed = _state.parse(state)
        try:
            config = Config(**parsed.config)
        except ValueError as err:
            raise ValueError(message("state_rule", path="state['config']", message=err)) from None
        sched = cls(config)
        for i, fields in enumerate(parsed.requests):
            path = f"state['requests'][{i}]"
            try:
                sched._restore_request(*fields)
            except ValueError as err:
                raise ValueError(message("state_rule", path=path, message=err)) from None
        sched._step, sched._chunks, sched._tokens = parsed.counters
        return sched

    def _restore_request(
        self, rid: int, total: int, processed: int, cached: int, priority: int
    ) -> None:
        state = PrefillChunkState(
            rid, total, cached_tokens=cached, priority=priority, processed_tokens=processed
        )
        if rid in self._states:
            raise ValueError(message("duplicate_request", request_id=rid))
        self._states[rid] = state
        if processed == total:
            self._completed.append(state)
        elif processed > _prefill_start(total, cached):
            self._running[rid] = None
            self._incomplete += 1
        else:
            self._push_waiting(rid, priority)
            self._incomplete += 1

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any]]]:
        return (Scheduler.from_state, (self.to_state(),))

    def _clone(self) -> Scheduler:
        """A structural copy (the Rust backend clones its core the same way)."""
        with self._locked():
            outer = self._enter("__copy__")
            try:
                other = Scheduler(self._config)
                states = {rid: st._copy() for rid, st in self._states.items()}
                other._states = states
                other._running = OrderedDict(self._running)
                other._waiting = {p: OrderedDict(b) for p, b in self._waiting.items()}
                other._priorities = list(self._priorities)
                other._completed = [
                    states[st._request_id]
                    for st in self._completed
                    if self._states.get(st._request_id) is st
                ]
                other._incomplete = self._incomplete
                other._step, other._chunks, other._tokens = self._step, self._chunks, self._tokens
                return other
            finally:
                self._call = outer

    def __copy__(self) -> Scheduler:
        return self._clone()

    def __deepcopy__(self, memo: Any) -> Scheduler:
        return self._clone()

    def __len__(self) -> int:
        with self._locked():
            outer = self._enter("__len__")
            try:
                return len(self._states)
            finally:
                self._call = outer

    def __contains__(self, request_id: object) -> bool:
        try:
            rid = as_u64("request_id", request_id)
        except (TypeError, ValueError, OverflowError):
            return False
        with self._locked():
            outer = self._enter("__contains__")
            try:
                return rid in self._states
            finally:
                self._call = outer

    def __repr__(self) -> str:
        with self._locked():
            outer = self._enter("__repr__")
            try:
                return (
                    f"Scheduler(config={self._config!r}, tracked={len(self._states)},"
                    f" incomplete={self._incomplete}, next_step_index={self._step})"
                )
            finally:
                self._call = outer


# The Scheduler methods that take its lock (a frame of one on the stack may hold it).
_LOCKED_CODES = frozenset(
    code
    for f in vars(Scheduler).values()
    if (code := getattr(f, "__code__", None)) and "_locked" in code.co_names
)
make_final(Scheduler)
