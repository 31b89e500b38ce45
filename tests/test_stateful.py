"""Stateful differential test: a Rust-backed and a pure scheduler driven side by side.

A hypothesis ``RuleBasedStateMachine`` draws one config per run (every option: chunk size,
decode cap, interleaving, token budget, several prefills per step) and then applies random
calls (valid and invalid enqueues with cached tokens and priorities, ``next_step`` with random
decode counts, drains, aborts, lookups, every read-only query, pickle/copy round trips and
cross-backend restores) to both backends *and* to an independent reference model written
here from the rules of issues 3 and 4. After every rule both backends must give identical
return values (compared field by field and by ``repr``), identical exception classes and
messages, the reference model's values, and the invariants of issue 5.

Size: ``HYPOTHESIS_PROFILE=long`` runs 1000 machines of up to 200 steps; every other profile
(the default ``dev`` and ``ci``) runs 100 machines of up to 50 steps. ``STATEFUL_EXAMPLES``
and ``STATEFUL_STEP_COUNT`` override either number. The test prints how many rules ran and
how many inputs were rejected.
"""

from __future__ import annotations

import copy
import json
import math
import operator
import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import chunked_prefill._core as R
import chunked_prefill.pure as P

U64_MAX = 2**64 - 1
I64_MIN = -(2**63)
I64_MAX = 2**63 - 1
MESSAGES: dict[str, str] = json.loads(
    Path(P.__file__).with_name("_messages.json").read_text(encoding="utf-8")
)

_PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "dev")
_DEFAULT_SIZE = (1000, 200) if _PROFILE == "long" else (100, 50)
EXAMPLES = int(os.environ.get("STATEFUL_EXAMPLES", _DEFAULT_SIZE[0]))
STEP_COUNT = int(os.environ.get("STATEFUL_STEP_COUNT", _DEFAULT_SIZE[1]))

#: What the last run did, for the closing note (printed by the test).
STATS: dict[str, int] = {
    "machines": 0,
    "steps": 0,
    "calls": 0,
    "rejected": 0,
    "next_step": 0,
    "chunks": 0,
    "completed": 0,
    "restores": 0,
}


def msg(key: str, /, **fields: Any) -> str:
    return MESSAGES[key].format(**fields)


# --------------------------------------------------------------------------- outcomes


def norm(value: Any) -> Any:
    """A comparable, type-strict form of a return value of either backend."""
    name = type(value).__name__
    if name == "Step":
        return (
            "Step",
            norm(value.step_index),
            norm(value.decode_tokens),
            norm(value.prefill_tokens),
            norm(value.prefill_request_id),
            norm(value.prefill_start),
            norm(value.is_last_chunk),
            tuple(norm(c) for c in value.chunks),
            repr(value),
        )
    if name == "Chunk":
        return (
            "Chunk",
            norm(value.request_id),
            norm(value.start),
            norm(value.tokens),
            norm(value.is_last),
            repr(value),
        )
    if name == "PrefillChunkState":
        return (
            "PrefillChunkState",
            norm(value.to_dict()),
            norm(value.is_complete),
            norm(value.remaining()),
            norm(value.progress()),
            repr(value),
        )
    if name == "Config":
        return ("Config", norm(value.to_dict()), repr(value))
    if isinstance(value, dict):
        return ("dict", tuple((norm(k), norm(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (name, tuple(norm(v) for v in value))
    if value is None or isinstance(value, (bool, int, float, str)):
        return (name, value)
    raise AssertionError(f"unexpected return type {name}: {value!r}")


@dataclass(frozen=True)
class Outcome:
    ok: bool
    value: Any = None
    exc_type: str | None = None
    exc_args: tuple[Any, ...] = ()

    @classmethod
    def of(cls, fn: Callable[[], Any]) -> tuple[Outcome, Any]:
        try:
            result = fn()
        except Exception as exc:
            return cls(False, None, type(exc).__name__, exc.args), None
        return cls(True, norm(result)), result


def raised(exc_type: type[BaseException], message: str) -> Outcome:
    return Outcome(False, None, exc_type.__name__, (message,))


# --------------------------------------------------------------------------- argument checks


def u64_error(name: str, value: Any) -> Outcome | None:
    """The documented error for ``value`` as an unsigned 64-bit argument, or None."""
    if isinstance(value, bool):
        return raised(TypeError, msg("bool_not_int", name=name, value=value))
    if not hasattr(type(value), "__index__"):
        return raised(
            TypeError,
            msg("not_int", name=name, type_name=type(value).__name__, value_repr=repr(value)),
        )
    v = operator.index(value)
    if v < 0:
        return raised(ValueError, msg("negative", name=name, value=v))
    if v > U64_MAX:
        return raised(OverflowError, msg("above_u64", name=name, value=v))
    return None


def i64_error(name: str, value: Any) -> Outcome | None:
    if isinstance(value, bool):
        return raised(TypeError, msg("bool_not_int", name=name, value=value))
    if not hasattr(type(value), "__index__"):
        return raised(
            TypeError,
            msg("not_int", name=name, type_name=type(value).__name__, value_repr=repr(value)),
        )
    v = operator.index(value)
    if not I64_MIN <= v <= I64_MAX:
        return raised(OverflowError, msg("outside_i64", name=name, value=v))
    return None


def bool_error(name: str, value: Any) -> Outcome | None:
    if isinstance(value, bool):
        return None
    return raised(
        TypeError,
        msg("not_bool", name=name, type_name=type(value).__name__, value_repr=repr(value)),
    )


def config_error(kw: dict[str, Any]) -> Outcome | None:
    """The documented error of ``Config(**kw)``: types in signature order, then the rules."""
    checks = [
        ("chunk_size", u64_error),
        ("max_decode_tokens", u64_error),
        ("interleave_decode", bool_error),
        ("token_budget", u64_error),
        ("max_prefills_per_step", u64_error),
    ]
    for name, check in checks:
        if name in kw and not (name == "token_budget" and kw[name] is None):
            err = check(name, kw[name])
            if err is not None:
                return err
    chunk = operator.index(kw.get("chunk_size", 512))
    max_decode = operator.index(kw.get("max_decode_tokens", 128))
    interleave = kw.get("interleave_decode", True)
    budget = kw.get("token_budget")
    budget = None if budget is None else operator.index(budget)
    prefills = operator.index(kw.get("max_prefills_per_step", 1))
    if chunk == 0:
        return raised(ValueError, msg("chunk_size_zero", value=0))
    if budget is not None:
        if budget == 0:
            return raised(ValueError, msg("token_budget_zero", value=0))
        if interleave and budget <= max_decode:
            return raised(
                ValueError,
                msg("token_budget_too_small", max_decode_tokens=max_decode, token_budget=budget),
            )
    if prefills == 0:
        return raised(ValueError, msg("max_prefills_zero", value=0))
    if prefills > 1 and budget is None:
        return raised(ValueError, msg("max_prefills_needs_budget", value=prefills))
    return None


# --------------------------------------------------------------------------- reference model


def prefill_start(total: int, cached: int) -> int:
    return total - 1 if cached >= total else cached


@dataclass(eq=False)
class Req:
    """One enqueue of a request (an id enqueued again is a new ``Req``)."""

    rid: int
    total: int
    cached: int
    priority: int
    seq: int
    processed: int
    chunks: list[tuple[int, int]] = field(default_factory=list)
    started_at: int | None = None  # the step in which it got its first chunk

    @property
    def start(self) -> int:
        return prefill_start(self.total, self.cached)

    @property
    def complete(self) -> bool:
        return self.processed == self.total

    def as_dict(self) -> dict[str, int]:
        return {
            "request_id": self.rid,
            "total_tokens": self.total,
            "processed_tokens": self.processed,
            "cached_tokens": self.cached,
            "priority": self.priority,
        }

    def expected_state(self) -> Any:
        return norm(
            P.PrefillChunkState(
                self.rid,
                self.total,
                cached_tokens=self.cached,
                priority=self.priority,
                processed_tokens=self.processed,
            )
        )


class Model:
    """The scheduler of issues 3 and 4, written plainly (lists and sorts, no cleverness)."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.tracked: dict[int, Req] = {}
        self.running: list[Req] = []  # started, incomplete, in start order
        self.completed: list[Req] = []  # in completion order, until drained
        self.seq = 0
        self.step_index = 0
        self.chunks_scheduled = 0
        self.tokens_prefilled = 0
        # For the original mode's ordering invariants.
        self.start_order: list[Req] = []
        self.completion_order: list[Req] = []
        self.aborted: set[int] = set()  # id() of aborted Req objects

    def waiting(self) -> list[Req]:
        reqs = [
            r
            for r in self.tracked.values()
            if not r.complete and r.processed == r.start and r not in self.running
        ]
        return sorted(reqs, key=lambda r: (r.priority, r.seq))

    def incomplete(self) -> int:
        return sum(1 for r in self.tracked.values() if not r.complete)

    def enqueue(self, rid: int, total: int, cached: int, priority: int) -> Outcome | None:
        if total == 0:
            return raised(ValueError, msg("total_tokens_zero", value=0))
        if cached > total:
            return raised(
                ValueError, msg("cached_exceeds_total", total_tokens=total, cached_tokens=cached)
            )
        if rid in self.tracked:
            return raised(ValueError, msg("duplicate_request", request_id=rid))
        req = Req(rid, total, cached, priority, self.seq, prefill_start(total, cached))
        self.seq += 1
        self.tracked[rid] = req
        return None

    def plan(self, n: int) -> tuple[int, list[tuple[Req, int, int, bool]]]:
        """The decode tokens and chunks ``(req, start, tokens, is_last)`` of the next step."""
        cfg = self.cfg
        decode = min(n, cfg["max_decode_tokens"]) if cfg["interleave_decode"] else 0
        budget = cfg["token_budget"]
        if budget is None:
            left = cfg["chunk_size"]
        else:
            decode = min(decode, budget)
            left = budget - decode
        chunks = []
        for req in self.running + self.waiting():
            if len(chunks) == cfg["max_prefills_per_step"] or left == 0:
                break
            take = min(req.total - req.processed, cfg["chunk_size"], left)
            left -= take
            chunks.append((req, req.processed, take, req.processed + take == req.total))
        return decode, chunks

    def apply(self, chunks: list[tuple[Req, int, int, bool]]) -> None:
        for req, start, tokens, last in chunks:
            if req.started_at is None:
                req.started_at = self.step_index
                self.start_order.append(req)
            req.processed = start + tokens
            req.chunks.append((start, tokens))
            if last:
                if req in self.running:
                    self.running.remove(req)
                self.completed.append(req)
                self.completion_order.append(req)
            elif req not in self.running:
                self.running.append(req)  # keeps its place in start order from now on
        self.step_index += 1
        self.chunks_scheduled += len(chunks)
        self.tokens_prefilled += sum(t for _, _, t, _ in chunks)

    def drain(self) -> int:
        removed = 0
        for req in self.completed:
            if self.tracked.get(req.rid) is req:
                del self.tracked[req.rid]
                removed += 1
        self.completed = []
        return removed

    def abort(self, rid: int) -> Req:
        req = self.tracked.pop(rid)
        if req in self.running:
            self.running.remove(req)
        self.aborted.add(id(req))
        return req

    def to_state(self) -> dict[str, Any]:
        done = [r for r in self.completed if self.tracked.get(r.rid) is r]
        return {
            "version": 1,
            "config": dict(self.cfg),
            "step_index": self.step_index,
            "chunks_scheduled": self.chunks_scheduled,
            "tokens_prefilled": self.tokens_prefilled,
            "requests": [r.as_dict() for r in self.running + self.waiting() + done],
        }

    def repr(self) -> str:
        return (
            f"Scheduler(config={P.Config(**self.cfg)!r}, tracked={len(self.tracked)},"
            f" incomplete={self.incomplete()}, next_step_index={self.step_index})"
        )


# --------------------------------------------------------------------------- strategies

_BAD_U64 = [
    True,
    False,
    1.0,
    2.5,
    "3",
    None,
    b"4",
    [1],
    np.float64(2.0),
    -1,
    -(2**63),
    np.int8(-3),
    2**64,
    2**64 + 7,
    2**100,
]
_BAD_I64 = [True, 0.0, "0", None, np.float32(1.0), 2**63, -(2**63) - 1, 2**64, -(2**70)]


def _maybe_numpy(values: st.SearchStrategy[int]) -> st.SearchStrategy[Any]:
    """Plain ints mostly, sometimes as numpy integers (accepted through ``__index__``)."""
    return st.one_of(values, values, values, values.filter(lambda v: v <= U64_MAX).map(np.uint64))


def _ids() -> st.SearchStrategy[int]:
    return st.one_of(
        st.integers(0, 12), st.integers(0, 40), st.sampled_from([0, 2**63, U64_MAX - 1, U64_MAX])
    )


def _u64_arg(valid: st.SearchStrategy[int]) -> st.SearchStrategy[Any]:
    return st.one_of(*([_maybe_numpy(valid)] * 9), st.sampled_from(_BAD_U64))


def _i64_arg() -> st.SearchStrategy[Any]:
    valid = st.one_of(st.integers(-3, 3), st.sampled_from([I64_MIN, I64_MAX, -1]))
    return st.one_of(*([valid] * 9), st.sampled_from(_BAD_I64), valid.map(np.int64))


@st.composite
def configs(draw: st.DrawFn) -> dict[str, Any]:
    chunk = draw(st.one_of(st.integers(1, 48), st.integers(1, 4), st.just(U64_MAX)))
    max_decode = draw(st.one_of(st.integers(0, 16), st.just(U64_MAX - 1)))
    interleave = draw(st.booleans())
    budget = None
    prefills = 1
    if draw(st.booleans()):
        low = max_decode + 1 if interleave else 1
        budget = draw(
            st.one_of(
                st.integers(low, min(low + 80, U64_MAX)),
                st.integers(low, min(low + 4, U64_MAX)),
                st.just(U64_MAX),
            )
        )
        prefills = draw(st.one_of(st.integers(1, 5), st.just(U64_MAX)))
    return {
        "chunk_size": chunk,
        "max_decode_tokens": max_decode,
        "interleave_decode": interleave,
        "token_budget": budget,
        "max_prefills_per_step": prefills,
    }


_CONFIG_VALUES = {
    "chunk_size": _u64_arg(st.integers(0, 64) | st.just(U64_MAX)),
    "max_decode_tokens": _u64_arg(st.integers(0, 64) | st.just(U64_MAX)),
    "interleave_decode": st.one_of(st.booleans(), st.booleans(), st.sampled_from([0, 1, None])),
    "token_budget": st.one_of(st.none(), _u64_arg(st.integers(0, 130) | st.just(U64_MAX))),
    "max_prefills_per_step": _u64_arg(st.integers(0, 4) | st.just(U64_MAX)),
}


@st.composite
def config_kwargs(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.lists(st.sampled_from(sorted(_CONFIG_VALUES)), unique=True))
    return {name: draw(_CONFIG_VALUES[name]) for name in names}


# --------------------------------------------------------------------------- the machine


class DifferentialMachine(RuleBasedStateMachine):
    """Both backends and the reference model, driven by the same calls."""

    def __init__(self) -> None:
        super().__init__()
        self.rust: Any = None
        self.pure: Any = None
        self.model: Model = Model(
            {
                "chunk_size": 512,
                "max_decode_tokens": 128,
                "interleave_decode": True,
                "token_budget": None,
                "max_prefills_per_step": 1,
            }
        )

    # ----------------------------------------------------------------- helpers

    def both(self, fn: Callable[[Any, Any], Any]) -> tuple[Outcome, Any, Any]:
        """Call ``fn(module, scheduler)`` on each backend; the outcomes must be identical."""
        STATS["calls"] += 1
        rust, rust_value = Outcome.of(lambda: fn(R, self.rust))
        pure, pure_value = Outcome.of(lambda: fn(P, self.pure))
        assert rust == pure, f"backends disagree:\n rust: {rust}\n pure: {pure}"
        if not rust.ok:
            STATS["rejected"] += 1
        return rust, rust_value, pure_value

    def expect(self, fn: Callable[[Any, Any], Any], error: Outcome | None) -> Outcome:
        out, _, _ = self.both(fn)
        if error is not None:
            assert out == error, f"expected {error}, got {out}"
        else:
            assert out.ok, f"expected success, got {out}"
        return out

    # ----------------------------------------------------------------- set-up

    @initialize(
        cfg=configs(),
        reqs=st.lists(
            st.tuples(
                st.integers(0, 40),
                st.integers(1, 100),
                st.one_of(st.just(0), st.just(0), st.integers(0, 110)),
                st.integers(-2, 2),
            ),
            max_size=6,
        ),
    )
    def make(self, cfg: dict[str, Any], reqs: list[tuple[int, int, int, int]]) -> None:
        """A config, and a few requests to start from (swarm testing may switch
        ``enqueue`` off for a whole run)."""
        STATS["machines"] += 1
        STATS["steps"] -= 1  # the invariant also runs once right after set-up
        assert config_error(cfg) is None
        self.rust = R.Scheduler(R.Config(**cfg))
        self.pure = P.Scheduler(P.Config(**cfg))
        self.model = Model(cfg)
        for rid, total, cached, priority in reqs:
            error = self.model.enqueue(rid, total, cached, priority)
            args = (rid, total, cached, priority)
            self.expect(
                lambda m, s, a=args: s.enqueue(a[0], a[1], cached_tokens=a[2], priority=a[3]),
                error,
            )

    # ----------------------------------------------------------------- mutating rules

    @rule(data=st.data(), count=st.integers(1, 3))
    def enqueue(self, data: st.DataObject, count: int) -> None:
        for _ in range(count):
            self.one_enqueue(data)

    def one_enqueue(self, data: st.DataObject) -> None:
        rid = data.draw(_u64_arg(_ids()), label="request_id")
        total = data.draw(
            _u64_arg(
                st.one_of(
                    *[st.integers(1, 12)] * 4,
                    *[st.integers(1, 150)] * 4,
                    st.just(0),
                    st.sampled_from([2**63, U64_MAX]),
                )
            ),
            label="total_tokens",
        )
        t = operator.index(total) if u64_error("t", total) is None else 1
        cached = data.draw(
            st.one_of(
                st.just(0),
                st.just(0),
                st.just(t),
                _u64_arg(st.integers(0, t + 2)),
                st.sampled_from([t - 1, t + 1, U64_MAX]),
            ),
            label="cached_tokens",
        )
        priority = data.draw(_i64_arg(), label="priority")
        style = data.draw(st.sampled_from(["full", "full", "positional", "cached_only"]))
        kwargs: dict[str, Any] = {}
        if style == "full":
            kwargs = {"cached_tokens": cached, "priority": priority}
        elif style == "cached_only":
            kwargs = {"cached_tokens": cached}
        error = u64_error("request_id", rid) or u64_error("total_tokens", total)
        if error is None and "cached_tokens" in kwargs:
            error = u64_error("cached_tokens", cached)
        if error is None and "priority" in kwargs:
            error = i64_error("priority", priority)
        before = self.rust.to_state()
        if error is None:
            error = self.model.enqueue(
                operator.index(rid),
                operator.index(total),
                operator.index(kwargs.get("cached_tokens", 0)),
                operator.index(kwargs.get("priority", 0)),
            )
        self.expect(lambda m, s: s.enqueue(rid, total, **kwargs), error)
        if error is not None:
            assert self.rust.to_state() == before

    @rule(
        counts=st.lists(
            st.one_of(
                *[st.integers(0, 40)] * 6,
                st.integers(0, 300).map(np.uint32),
                st.sampled_from([U64_MAX, U64_MAX - 1, 2**63]),
                st.sampled_from(_BAD_U64),
                st.none(),  # no argument: the default of 0
            ),
            min_size=1,
            max_size=8,
        )
    )
    def next_step(self, counts: list[Any]) -> None:
        for n in counts:
            self.one_step(n)

    def one_step(self, n: Any) -> None:
        model = self.model
        default = n is None
        if default:
            n = 0
        error = u64_error("active_decode_count", n)
        if error is not None:
            self.expect(lambda m, s: s.next_step(n), error)
            return
        count = operator.index(n)
        # Everything the invariants need from before the step.
        incomplete_before = [r for r in model.tracked.values() if not r.complete]
        running_before = list(model.running)
        waiting_before = model.waiting()
        decode, planned = model.plan(count)
        call = (lambda m, s: s.next_step()) if default else (lambda m, s: s.next_step(n))
        out, step, _ = self.both(call)
        assert out.ok, out
        STATS["next_step"] += 1
        self.check_step(step, count, decode, incomplete_before, running_before, waiting_before)
        expected = P.Step(
            step_index=model.step_index,
            decode_tokens=decode,
            chunks=[P.Chunk(r.rid, s, t, last) for r, s, t, last in planned],
        )
        assert out.value == norm(expected)
        model.apply(planned)
        STATS["chunks"] += len(planned)
        for req, _, _, last in planned:
            if last:
                STATS["completed"] += 1
                self.check_completed(req)

    @rule()
    def drain_completed(self) -> None:
        removed = self.model.drain()
        out, _, _ = self.both(lambda m, s: s.drain_completed())
        assert out == Outcome(True, ("int", removed))

    @precondition(lambda self: bool(self.model.tracked))
    @rule(data=st.data())
    def abort_known(self, data: st.DataObject) -> None:
        rid = data.draw(st.sampled_from(sorted(self.model.tracked)), label="tracked id")
        req = self.model.abort(rid)
        out, _, _ = self.both(lambda m, s: s.abort(rid))
        assert out == Outcome(True, req.expected_state())

    @rule(rid=_u64_arg(_ids()))
    def abort_any(self, rid: Any) -> None:
        error = u64_error("request_id", rid)
        if error is None and operator.index(rid) not in self.model.tracked:
            error = raised(KeyError, msg("unknown_request", request_id=operator.index(rid)))
        if error is None:
            req = self.model.abort(operator.index(rid))
            out, _, _ = self.both(lambda m, s: s.abort(rid))
            assert out == Outcome(True, req.expected_state())
        else:
            self.expect(lambda m, s: s.abort(rid), error)

    @rule(data=st.data())
    def config_probe(self, data: st.DataObject) -> None:
        """``Config(**kw)`` and ``config.replace(**kw)`` with random (often invalid) values."""
        kw = data.draw(config_kwargs())
        out = self.expect(lambda m, s: m.Config(**kw), config_error(kw))
        if out.ok:
            given = {k: v if v is None or isinstance(v, bool) else operator.index(v)
                     for k, v in kw.items()}  # fmt: skip
            assert out.value[1] == norm({**P.Config().to_dict(), **given})
        merged = {**self.model.cfg, **kw}
        self.expect(lambda m, s: s.config.replace(**kw), config_error(merged))

    # ----------------------------------------------------------------- copies and restores

    @rule(
        how=st.sampled_from(["pickle", "copy", "deepcopy", "cross"]),
        protocol=st.integers(0, pickle.HIGHEST_PROTOCOL),
    )
    def restore(self, how: str, protocol: int) -> None:
        """Replace both schedulers by restored copies; the model goes on unchanged."""
        STATS["restores"] += 1
        old_rust, old_pure = self.rust, self.pure
        if how == "pickle":
            self.rust = pickle.loads(pickle.dumps(old_rust, protocol=protocol))
            self.pure = pickle.loads(pickle.dumps(old_pure, protocol=protocol))
        elif how == "copy":
            self.rust, self.pure = copy.copy(old_rust), copy.copy(old_pure)
        elif how == "deepcopy":
            self.rust, self.pure = copy.deepcopy(old_rust), copy.deepcopy(old_pure)
        else:
            # Cross-backend: each backend rebuilt from the other's exported state.
            self.rust = R.Scheduler.from_state(old_pure.to_state())
            self.pure = P.Scheduler.from_state(old_rust.to_state())
        assert self.rust is not old_rust
        assert self.pure is not old_pure
        assert type(self.rust) is R.Scheduler
        assert type(self.pure) is P.Scheduler

    # ----------------------------------------------------------------- read-only rules

    @rule(rid=st.one_of(_u64_arg(_ids()), st.sampled_from([object(), (), 1j])))
    def lookup(self, rid: Any) -> None:
        error = u64_error("request_id", rid)
        req = None
        if error is None:
            req = self.model.tracked.get(operator.index(rid))
            if req is None:
                error = raised(KeyError, msg("unknown_request", request_id=operator.index(rid)))
        out = self.expect(lambda m, s: s.state(rid), error)
        if req is not None:
            assert out.value == req.expected_state()
        contained = error is None
        out, _, _ = self.both(lambda m, s: rid in s)
        assert out == Outcome(True, ("bool", contained))

    @precondition(lambda self: bool(self.model.tracked))
    @rule(data=st.data(), n=st.integers(0, 200))
    def state_is_a_copy(self, data: st.DataObject, n: int) -> None:
        """Advancing the copy that ``state()`` returns does not touch the scheduler."""
        rid = data.draw(st.sampled_from(sorted(self.model.tracked)), label="tracked id")
        req = self.model.tracked[rid]

        def advance(m: Any, s: Any) -> Any:
            st_ = s.state(rid)
            st_.advance(n)
            return st_

        out, _, _ = self.both(advance)
        expected = P.PrefillChunkState(
            rid, req.total, cached_tokens=req.cached, priority=req.priority,
            processed_tokens=req.processed,
        )  # fmt: skip
        expected.advance(n)
        assert out == Outcome(True, norm(expected))
        out, _, _ = self.both(lambda m, s: s.state(rid))
        assert out == Outcome(True, req.expected_state())

    @rule()
    def queries(self) -> None:
        m = self.model
        expected = {
            "len": ("int", len(m.tracked)),
            "active_count": ("int", len(m.tracked)),
            "is_idle": ("bool", m.incomplete() == 0),
            "chunks_scheduled": ("int", m.chunks_scheduled),
            "tokens_prefilled": ("int", m.tokens_prefilled),
        }
        calls: dict[str, Callable[[Any, Any], Any]] = {
            "len": lambda mod, s: len(s),
            "active_count": lambda mod, s: s.active_count(),
            "is_idle": lambda mod, s: s.is_idle(),
            "chunks_scheduled": lambda mod, s: s.chunks_scheduled(),
            "tokens_prefilled": lambda mod, s: s.tokens_prefilled(),
        }
        for name, call in calls.items():
            out, _, _ = self.both(call)
            assert out == Outcome(True, expected[name]), name

    # ----------------------------------------------------------------- invariants

    @invariant()
    def same_state_everywhere(self) -> None:
        STATS["steps"] += 1
        m = self.model
        rust_state, pure_state = self.rust.to_state(), self.pure.to_state()
        assert norm(rust_state) == norm(pure_state)
        assert rust_state == m.to_state()
        assert repr(self.rust) == repr(self.pure) == m.repr()
        assert norm(self.rust.config) == norm(self.pure.config)
        assert self.rust.config.to_dict() == m.cfg
        assert len(self.rust) == len(self.pure) == len(m.tracked)
        assert self.rust.is_idle() is self.pure.is_idle() is (m.incomplete() == 0)
        tokens = sum(t for r in m.start_order for _, t in r.chunks)
        chunks = sum(len(r.chunks) for r in m.start_order)
        assert self.rust.tokens_prefilled() == self.pure.tokens_prefilled() == tokens
        assert self.rust.chunks_scheduled() == self.pure.chunks_scheduled() == chunks
        for req in m.tracked.values():
            # Each request's chunks so far are contiguous from its prefill start.
            pos = req.start
            for start, size in req.chunks:
                assert start == pos
                pos += size
            assert pos == req.processed

    # ----------------------------------------------------------------- step checks

    def check_step(
        self,
        step: Any,
        count: int,
        decode: int,
        incomplete: list[Req],
        running: list[Req],
        waiting: list[Req],
    ) -> None:
        """The rules of one step (issues 3 and 4), checked independently of the model."""
        cfg = self.model.cfg
        chunk_size, budget = cfg["chunk_size"], cfg["token_budget"]
        cap = cfg["max_prefills_per_step"]
        assert step.step_index == self.model.step_index  # consecutive
        expected_decode = min(count, cfg["max_decode_tokens"]) if cfg["interleave_decode"] else 0
        if budget is not None:
            expected_decode = min(expected_decode, budget)
        assert step.decode_tokens == expected_decode == decode
        chunks = step.chunks
        assert step.prefill_tokens == sum(c.tokens for c in chunks)
        if chunks:
            assert step.prefill_request_id == chunks[0].request_id
            assert step.prefill_start == chunks[0].start
            assert step.is_last_chunk is chunks[0].is_last
        else:
            assert (step.prefill_request_id, step.prefill_start, step.is_last_chunk) == (
                None,
                0,
                False,
            )
        by_id = {r.rid: r for r in incomplete}
        ids = [c.request_id for c in chunks]
        assert len(set(ids)) == len(ids), "a request got two chunks in one step"
        for c in chunks:
            req = by_id[c.request_id]  # only requests with prompt work left get chunks
            assert 1 <= c.tokens <= chunk_size
            assert c.start == req.processed  # contiguous with its previous chunk
            if not req.chunks:
                assert c.start == req.start  # 0, cached_tokens or total - 1
            assert c.is_last is (c.start + c.tokens == req.total)
            assert c.start + c.tokens <= req.total
        # Scheduling order: started requests first, in start order, then waiting ones by
        # priority, ties in enqueue order.
        started = [by_id[i] for i in ids if by_id[i] in running]
        fresh = [by_id[i] for i in ids if by_id[i] not in running]
        assert [by_id[i] for i in ids] == started + fresh
        assert started == running[: len(started)]
        assert fresh == waiting[: len(fresh)]
        if budget is None:
            # The original rule: one chunk of min(remaining, chunk_size) whenever there is work.
            assert len(chunks) == (1 if incomplete else 0)
            if chunks:
                first = (running + waiting)[0]
                assert chunks[0].request_id == first.rid
                assert chunks[0].tokens == min(first.total - first.processed, chunk_size)
                assert len(running) <= 1  # one prompt at a time
        else:
            used = step.decode_tokens + step.prefill_tokens
            assert used <= budget
            assert len(chunks) <= cap
            if used < budget and len(chunks) < cap:
                # Budget left over: every request with work left got a chunk, each capped by
                # chunk_size or finishing its prompt.
                assert len(chunks) == len(incomplete)
                for c in chunks:
                    assert c.tokens == chunk_size or c.is_last

    def check_completed(self, req: Req) -> None:
        """A request that just completed: its chunks cover its prompt exactly once."""
        cfg = self.model.cfg
        assert req.chunks[0][0] == req.start
        pos = req.start
        for start, size in req.chunks:
            assert start == pos
            assert 1 <= size <= cfg["chunk_size"]
            pos += size
        assert pos == req.total
        if cfg["token_budget"] is None:
            expected = math.ceil((req.total - req.start) / cfg["chunk_size"])
            assert len(req.chunks) == expected
            if req.cached == 0:
                assert len(req.chunks) == -(-req.total // cfg["chunk_size"])
            # Completion order = start (scheduling) order, aborted requests aside.
            live_starts = [r for r in self.model.start_order if id(r) not in self.model.aborted]
            live_done = [r for r in self.model.completion_order if id(r) not in self.model.aborted]
            assert live_done == live_starts[: len(live_done)]


_SETTINGS = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEP_COUNT,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.data_too_large,
    ],
)


def test_backends_agree_under_random_use(capsys: pytest.CaptureFixture[str]) -> None:
    for key in STATS:
        STATS[key] = 0
    run_state_machine_as_test(DifferentialMachine, settings=_SETTINGS)
    with capsys.disabled():
        print(
            f"\n[stateful] profile={_PROFILE} machines={STATS['machines']}"
            f" steps={STATS['steps']} calls={STATS['calls']} rejected={STATS['rejected']}"
            f" next_step={STATS['next_step']} chunks={STATS['chunks']}"
            f" completed={STATS['completed']} restores={STATS['restores']}"
        )
    # Enough state-machine steps to matter: at least half the configured maximum.
    assert STATS["steps"] >= EXAMPLES * STEP_COUNT // 2
    assert STATS["rejected"] > 0
    assert STATS["completed"] > 0
