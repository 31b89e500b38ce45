"""Stateful differential test of the serving scheduler: Rust and pure side by side.

A hypothesis ``RuleBasedStateMachine`` draws one ``ServingConfig`` per run (small pools, so
that admission waits for blocks and running requests get preempted; prefix caching on or off;
watermarks) and then applies random calls to both backends: ``add_request`` with prompts drawn
from a small alphabet (so prefixes repeat and the cache hits), int prompts, salts and
priorities, and invalid arguments; ``schedule``; ``update`` with aligned or mapped token ids,
``finished`` lists and stale batches; ``abort``; every query; and ``to_state`` /
``from_state`` / pickle / copy round trips, crossing backends. After every rule both backends
must return identical values (field by field and by ``repr``) or raise the identical exception
class and message, export identical states, and hold the block-pool invariants.

Size: ``HYPOTHESIS_PROFILE=long`` runs 1000 machines of up to 200 steps; otherwise 100 machines
of up to 60 steps (``SERVING_STATEFUL_EXAMPLES`` and ``SERVING_STATEFUL_STEP_COUNT`` override).
"""

from __future__ import annotations

import copy
import os
import pickle
from dataclasses import dataclass
from typing import Any, Callable

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
import chunked_prefill.pure_serving as P
from serving_invariants import check_invariants

_PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "dev")
_DEFAULT_SIZE = (1000, 200) if _PROFILE == "long" else (100, 60)
EXAMPLES = int(os.environ.get("SERVING_STATEFUL_EXAMPLES", _DEFAULT_SIZE[0]))
STEP_COUNT = int(os.environ.get("SERVING_STATEFUL_STEP_COUNT", _DEFAULT_SIZE[1]))

#: What the last run did, printed by the test (for the closing note).
STATS: dict[str, int] = dict.fromkeys(
    (
        "machines",
        "steps",
        "rejected",
        "batches",
        "items",
        "preempted",
        "cached_tokens",
        "finished",
        "restores",
    ),
    0,
)


def norm(value: Any) -> Any:
    """A comparable, type-strict form of a return value of either backend."""
    name = type(value).__name__
    if name == "Batch":
        return (
            "Batch",
            value.step_index,
            tuple(norm(i) for i in value.items),
            tuple(value.preempted),
            tuple(value.sampling_ids),
            value.num_prefill_tokens,
            value.num_decode_tokens,
            value.num_free_blocks,
            tuple(value.request_ids),
            tuple(value.starts),
            tuple(value.token_counts),
            len(value),
            repr(value),
        )
    if name == "BatchItem":
        fields = ("request_id", "start", "tokens", "is_prefill", "samples", "cached_tokens")
        return ("BatchItem", *(getattr(value, f) for f in fields), tuple(value.new_blocks))
    if name == "RequestView":
        return ("RequestView", repr(value))
    if name in ("ServingConfig", "ServingScheduler"):
        return (name, repr(value))
    if isinstance(value, dict):
        return ("dict", tuple((norm(k), norm(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(norm(v) for v in value))
    if value is None or isinstance(value, (bool, int, float, str)):
        return (type(value).__name__, value)
    raise AssertionError(f"unexpected return type {name}: {value!r}")


@dataclass(frozen=True)
class Outcome:
    """What one call did on one backend: its normalised value, or its exception."""

    ok: bool
    value: Any = None
    error: tuple[str, tuple[Any, ...]] | None = None

    @classmethod
    def of(cls, fn: Callable[[], Any]) -> tuple[Outcome, Any]:
        try:
            result = fn()
        except Exception as exc:
            return cls(False, None, (type(exc).__name__, exc.args)), None
        return cls(True, norm(result)), result


# A small alphabet and a few fixed prefixes, so prompts share whole blocks.
PREFIXES = [[1, 2, 3, 4, 5, 6, 7, 8], [9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9]]
token_lists = st.tuples(
    st.sampled_from([None, 0, 1]),
    st.lists(st.integers(0, 3), min_size=0, max_size=12),
).map(lambda t: ([] if t[0] is None else PREFIXES[t[0]]) + t[1])
bad_prompts = st.sampled_from([[], "abc", 0, -1, True, [1, -1], [1, 2**32], [1.5], 2**64])


def mostly(
    valid: st.SearchStrategy[Any], invalid: st.SearchStrategy[Any]
) -> st.SearchStrategy[Any]:
    """``valid`` nine times in ten, else ``invalid``: rejections stay common, but most calls
    go through, so that the machines reach full pools, preemption and finishing."""
    # Not k == 0: hypothesis draws bounds (and shrinks towards 0) far more often than 1 in 10.
    return st.integers(0, 9).flatmap(lambda k: invalid if k == 7 else valid)


prompts = mostly(st.one_of(token_lists.filter(bool), st.integers(1, 16)), bad_prompts)


class ServingMachine(RuleBasedStateMachine):
    """Both backends, driven by the same calls; every outcome must agree."""

    def __init__(self) -> None:
        super().__init__()
        self.rust: Any = None
        self.pure: Any = None
        self.pending: tuple[Any, Any] | None = None
        self.last: tuple[Any, Any] | None = None
        self.ids: list[int] = []
        STATS["machines"] += 1

    @initialize(
        num_blocks=st.integers(1, 24),
        block_size=st.sampled_from([1, 2, 4, 8]),
        token_budget=st.integers(2, 40),
        chunk_size=st.integers(1, 32),
        max_prefills=st.integers(1, 4),
        max_running=st.integers(1, 8),
        watermark=st.sampled_from([0.0, 0.1, 0.25]),
        prefix_caching=st.booleans(),
    )
    def make(self, **kw: Any) -> None:
        kw["max_running"] = min(kw["max_running"], kw["token_budget"] - 1)
        kw["max_prefills_per_step"] = kw.pop("max_prefills")
        self.rust = R.ServingScheduler(R.ServingConfig(**kw))
        self.pure = P.ServingScheduler(P.ServingConfig(**kw))

    def both(self, call: Callable[[Any], Any]) -> tuple[Any, Any]:
        """Apply ``call`` to both backends and check that they agree."""
        STATS["steps"] += 1
        out_r, res_r = Outcome.of(lambda: call(self.rust))
        out_p, res_p = Outcome.of(lambda: call(self.pure))
        assert out_r == out_p
        if not out_r.ok:
            STATS["rejected"] += 1
        return res_r, res_p

    @rule(
        request_id=mostly(st.integers(0, 12), st.sampled_from([-1, 2**64, True])),
        prompt=prompts,
        max_new_tokens=mostly(st.integers(1, 12), st.just(0)),
        priority=st.integers(-2, 2),
        cache_salt=st.sampled_from([0, 0, 1]),
    )
    def add(
        self, request_id: Any, prompt: Any, max_new_tokens: int, priority: int, cache_salt: int
    ) -> None:
        r, _ = self.both(
            lambda s: s.add_request(
                request_id, prompt, max_new_tokens, priority=priority, cache_salt=cache_salt
            )
        )
        if r is None and isinstance(request_id, int) and request_id in self.rust:
            self.ids.append(request_id)

    @precondition(lambda self: self.pending is None)
    @rule(
        prompts=st.lists(
            st.one_of(st.integers(1, 6), st.lists(st.integers(0, 3), min_size=1, max_size=6)),
            min_size=2,
            max_size=5,
        ),
        max_new_tokens=st.integers(4, 12),
        steps=st.integers(0, 8),
    )
    def add_many(self, prompts: list[Any], max_new_tokens: int, steps: int) -> None:
        """Several short valid requests at once, then whole steps while they generate long
        enough to outgrow a small pool together: the source of preemptions."""
        for prompt in prompts:
            request_id = next((i for i in range(13) if i not in self.rust), None)
            if request_id is None:
                break
            self.add(request_id, prompt, max_new_tokens, 0, 0)
        self.steps(steps)

    @precondition(lambda self: self.pending is None)
    @rule(prefix=st.sampled_from(PREFIXES), tails=st.lists(token_lists, min_size=2, max_size=3))
    def add_sharing(self, prefix: list[int], tails: list[list[int]]) -> None:
        """Requests with one prefix, a step apart, so that each later one can find the
        earlier ones' computed prefix blocks in the cache: the source of cache hits."""
        for tail in tails:
            request_id = next((i for i in range(13) if i not in self.rust), None)
            if request_id is None:
                return
            self.add(request_id, prefix + tail[:4], 4, 0, 0)
            self.steps(1)

    @precondition(lambda self: self.pending is None)
    @rule()
    def schedule(self) -> None:
        r, p = self.both(lambda s: s.schedule())
        if r is not None:
            self.pending = (r, p)
            STATS["batches"] += 1
            STATS["items"] += len(r)
            STATS["preempted"] += len(r.preempted)

    @precondition(lambda self: self.pending is not None)
    @rule(
        mode=st.sampled_from(["aligned", "mapping", "none", "short"]),
        data=st.data(),
    )
    def update(self, mode: str, data: st.DataObject) -> None:
        assert self.pending is not None
        batch_r, batch_p = self.pending
        sampling = list(batch_r.sampling_ids)
        tokens = [data.draw(st.integers(0, 3)) for _ in sampling]
        # Mostly nothing finished early; else tracked ids, sometimes an untracked one (99)
        # or a repeat.
        tracked = [i for i in self.ids if i in self.rust]
        finished = data.draw(
            mostly(st.just([]), st.lists(st.sampled_from([*tracked, 99]), max_size=2))
        )
        if mode == "aligned":
            token_ids: Any = tokens
        elif mode == "mapping":
            token_ids = dict(zip(sampling, tokens))
        elif mode == "short":
            token_ids = tokens[:-1] if tokens else [5]
        else:
            token_ids = None

        def call(s: Any) -> Any:
            batch = batch_r if s is self.rust else batch_p
            return s.update(batch, token_ids=token_ids, finished=finished)

        r, _ = self.both(call)
        if r is not None:
            self.last, self.pending = self.pending, None
            STATS["finished"] += len(r)

    @precondition(lambda self: self.pending is None)
    @rule(steps=st.integers(1, 6))
    def steps(self, steps: int) -> None:
        """Whole engine steps, schedule then update with every token given (the common case,
        so that requests grow, fill the pool and run to completion between other rules)."""
        for _ in range(steps):
            self.schedule()
            assert self.pending is not None
            batches = dict(zip((id(self.rust), id(self.pure)), self.pending))
            tokens = [i % 4 for i in range(len(self.pending[0].sampling_ids))]
            r, _ = self.both(lambda s, b=batches, t=tokens: s.update(b[id(s)], token_ids=t))
            self.last, self.pending = self.pending, None
            STATS["finished"] += len(r)

    @rule(which=st.sampled_from(["stale", "not a batch"]))
    def update_refused(self, which: str) -> None:
        # The previous step's batch (already reported), or no batch at all: refused on both.
        if which == "stale" and self.last is not None:
            last_r, last_p = self.last
            self.both(lambda s: s.update(last_r if s is self.rust else last_p))
        else:
            self.both(lambda s: s.update(which))

    @rule(request_id=st.integers(0, 13))
    def abort(self, request_id: int) -> None:
        self.both(lambda s: s.abort(request_id))

    @rule(request_id=st.integers(0, 13))
    def query(self, request_id: int) -> None:
        self.both(lambda s: s.request(request_id))
        self.both(lambda s: s.block_table(request_id))
        self.both(lambda s: request_id in s)

    @rule()
    def counters(self) -> None:
        self.both(
            lambda s: (
                s.num_free_blocks,
                s.num_running,
                s.num_waiting,
                s.num_preemptions,
                s.num_cached_tokens,
                s.step_index,
                len(s),
                repr(s),
            )
        )

    @precondition(lambda self: self.pending is None)
    @rule(how=st.sampled_from(["pickle", "copy", "cross", "self"]))
    def round_trip(self, how: str) -> None:
        STATS["restores"] += 1
        if how == "pickle":
            self.rust = pickle.loads(pickle.dumps(self.rust))
            self.pure = pickle.loads(pickle.dumps(self.pure))
        elif how == "copy":
            self.rust, self.pure = copy.deepcopy(self.rust), copy.copy(self.pure)
        elif how == "cross":
            # Each backend restored from the other's export.
            state_r, state_p = self.rust.to_state(), self.pure.to_state()
            self.rust = R.ServingScheduler.from_state(state_p)
            self.pure = P.ServingScheduler.from_state(state_r)
        else:
            self.rust = R.ServingScheduler.from_state(self.rust.to_state())

    @invariant()
    def agree(self) -> None:
        if self.rust is None:
            return
        if self.pending is None:
            assert self.rust.to_state() == self.pure.to_state()
            # The invariants are read from the state, which a pending batch withholds.
            check_invariants(self.rust)
            check_invariants(self.pure)
        else:
            self.both(lambda s: s.to_state())
        STATS["cached_tokens"] = max(STATS["cached_tokens"], self.rust.num_cached_tokens)


_SETTINGS = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEP_COUNT,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def test_serving_backends_agree_under_random_use(capsys: pytest.CaptureFixture[str]) -> None:
    for key in STATS:
        STATS[key] = 0
    run_state_machine_as_test(ServingMachine, settings=_SETTINGS)
    with capsys.disabled():
        print("\n[serving-stateful] " + " ".join(f"{k}={v}" for k, v in STATS.items()))
    # The run reached the interesting parts of the state space, not only rejections.
    assert STATS["steps"] >= EXAMPLES * STEP_COUNT // 2
    assert STATS["rejected"] > 0
    assert STATS["finished"] > 0
    assert STATS["preempted"] > 0
    assert STATS["cached_tokens"] > 0
