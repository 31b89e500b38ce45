"""Copies and restarts: pickle, copy, deepcopy, ``to_state`` / ``from_state`` across backends,
and corrupted states rejected with the documented class and identical messages.
"""

from __future__ import annotations

import copy
import json
import pickle
import random
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import pytest

import chunked_prefill._core as R
import chunked_prefill.pure as P

U64_MAX = 2**64 - 1
U128_MAX = 2**128 - 1
I64_MIN = -(2**63)
I64_MAX = 2**63 - 1
MESSAGES: dict[str, str] = json.loads(
    Path(P.__file__).with_name("_messages.json").read_text(encoding="utf-8")
)
PROTOCOLS = list(range(pickle.HIGHEST_PROTOCOL + 1))
CONFIGS = [
    {},
    {"chunk_size": 3, "max_decode_tokens": 2},
    {"chunk_size": 4, "max_decode_tokens": 0, "interleave_decode": False},
    {"chunk_size": 4, "max_decode_tokens": 2, "token_budget": 9, "max_prefills_per_step": 3},
    {"chunk_size": 5, "interleave_decode": False, "token_budget": 3, "max_prefills_per_step": 9},
    {"chunk_size": U64_MAX, "token_budget": U64_MAX, "max_prefills_per_step": U64_MAX},
]


def msg(key: str, /, **fields: Any) -> str:
    return MESSAGES[key].format(**fields)


def busy(mod: ModuleType, cfg: dict[str, Any], seed: int = 0, ops: int = 60) -> Any:
    """A scheduler after a random but reproducible history (enqueues with cached tokens and
    priorities, steps, aborts, drains)."""
    rng = random.Random(seed)
    s = mod.Scheduler(mod.Config(**cfg))
    for i in range(ops):
        r = rng.random()
        if r < 0.45:
            total = rng.randint(1, 20)
            cached = rng.choice([0, 0, 0, rng.randint(0, total), total])
            s.enqueue(1000 + i, total, cached_tokens=cached, priority=rng.randint(-2, 2))
        elif r < 0.85:
            s.next_step(rng.randint(0, 5))
        elif r < 0.93 and len(s):
            rid = rng.choice(s.to_state()["requests"])["request_id"]
            s.abort(rid)
        else:
            s.drain_completed()
    return s


def run(s: Any, seed: int, n: int = 80) -> list[str]:
    """The scheduler's future under a fixed script, as reprs."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        r = rng.random()
        if r < 0.2:
            s.enqueue(5000 + i, rng.randint(1, 15), priority=rng.randint(-1, 1))
        elif r < 0.25:
            out.append(f"drain {s.drain_completed()}")
        elif r < 0.3 and len(s):
            rid = rng.choice(s.to_state()["requests"])["request_id"]
            out.append(repr(s.abort(rid)))
        out.append(repr(s.next_step(rng.randint(0, 4))))
    out.append(repr(s.to_state()))
    out.append(repr(s))
    return out


# --------------------------------------------------------------------------- value types


def values(mod: ModuleType) -> list[Any]:
    chunk = mod.Chunk(U64_MAX, 3, 4, True)
    return [
        mod.Config(),
        mod.Config(chunk_size=7, max_decode_tokens=0, interleave_decode=False),
        mod.Config(chunk_size=U64_MAX, token_budget=U64_MAX, max_prefills_per_step=U64_MAX),
        chunk,
        mod.Chunk(0, 0, 1, False),
        mod.Step(step_index=0, decode_tokens=0),
        mod.Step(step_index=2**100, decode_tokens=U64_MAX, chunks=[chunk]),
        mod.Step(step_index=5, decode_tokens=1, chunks=[chunk, mod.Chunk(1, 0, 2, False)]),
        mod.PrefillChunkState(1, 10),
        mod.PrefillChunkState(
            U64_MAX, U64_MAX, cached_tokens=5, priority=I64_MIN, processed_tokens=U64_MAX - 1
        ),
        mod.PrefillChunkState(0, 5, cached_tokens=5, priority=I64_MAX),
        mod.PrefillChunkState(0, 5, processed_tokens=5),
    ]


COPIERS: list[tuple[str, Callable[[Any], Any]]] = [
    *[(f"pickle{p}", lambda v, p=p: pickle.loads(pickle.dumps(v, protocol=p))) for p in PROTOCOLS],
    ("copy", copy.copy),
    ("deepcopy", copy.deepcopy),
]


# Protocols 0 and 1 are covered by test_value_types_pickle_with_old_protocols (a known gap).
VALUE_COPIERS = [c for c in COPIERS if c[0] not in ("pickle0", "pickle1")]


@pytest.mark.parametrize("how,copier", VALUE_COPIERS, ids=[c[0] for c in VALUE_COPIERS])
def test_value_types_round_trip(backend: ModuleType, how: str, copier: Callable) -> None:
    for value in values(backend):
        other = copier(value)
        assert type(other) is type(value)
        assert other == value
        assert repr(other) == repr(value)
        if type(value).__name__ == "PrefillChunkState":
            assert other.to_dict() == value.to_dict()
            assert other.is_complete is value.is_complete
            # A copy of a mutable state is independent of the original.
            assert other is not value
            before = repr(value)
            other.advance(1)
            assert repr(value) == before
        else:
            assert hash(other) == hash(value)
        if type(value).__name__ == "Step":
            assert other.chunks == value.chunks
            assert other.prefill_tokens == value.prefill_tokens
            assert other.step_index == value.step_index


def test_value_types_pickle_with_old_protocols() -> None:
    outcomes = []
    for mod in (R, P):
        for value in values(mod):
            for protocol in (0, 1):
                try:
                    outcomes.append(repr(pickle.loads(pickle.dumps(value, protocol=protocol))))
                except TypeError as exc:
                    outcomes.append(f"TypeError: {exc}")
    half = len(outcomes) // 2
    assert outcomes[:half] == outcomes[half:]


def test_value_types_repr_identical_across_backends() -> None:
    for a, b in zip(values(R), values(P)):
        assert repr(a) == repr(b)
        assert pickle.loads(pickle.dumps(a)) == a


def test_pickle_restores_on_the_backend_that_pickled_it() -> None:
    for mod in (R, P):
        for value in [*values(mod), busy(mod, CONFIGS[3])]:
            assert type(pickle.loads(pickle.dumps(value))).__module__ == mod.__name__


# --------------------------------------------------------------------------- schedulers


@pytest.mark.parametrize("cfg", CONFIGS, ids=[str(i) for i in range(len(CONFIGS))])
@pytest.mark.parametrize("how,copier", COPIERS, ids=[c[0] for c in COPIERS])
def test_restored_scheduler_continues_exactly(
    backend: ModuleType, cfg: dict[str, Any], how: str, copier: Callable
) -> None:
    for seed in range(4):
        original = busy(backend, cfg, seed)
        restored = copier(original)
        assert type(restored) is backend.Scheduler
        assert restored is not original
        assert restored.to_state() == original.to_state()
        assert repr(restored) == repr(original)
        assert restored.config == original.config
        assert run(restored, seed) == run(original, seed)


def test_copies_are_independent(backend: ModuleType) -> None:
    s = busy(backend, CONFIGS[3], 1)
    before = s.to_state()
    for copier in (copy.copy, copy.deepcopy, lambda x: pickle.loads(pickle.dumps(x))):
        other = copier(s)
        run(other, 9)
        other.enqueue(99999, 5)
        assert s.to_state() == before


@pytest.mark.parametrize("cfg", CONFIGS, ids=[str(i) for i in range(len(CONFIGS))])
def test_cross_backend_restore(cfg: dict[str, Any]) -> None:
    for seed in range(6):
        rust, pure = busy(R, cfg, seed), busy(P, cfg, seed)
        assert rust.to_state() == pure.to_state()
        rust_from_pure = R.Scheduler.from_state(pure.to_state())
        pure_from_rust = P.Scheduler.from_state(rust.to_state())
        assert type(rust_from_pure) is R.Scheduler
        assert type(pure_from_rust) is P.Scheduler
        expected = run(busy(P, cfg, seed), seed)
        assert run(rust_from_pure, seed) == expected
        assert run(pure_from_rust, seed) == expected
        assert run(rust, seed) == expected


def test_restore_at_every_point_of_a_history(backend: ModuleType) -> None:
    """Restoring after any number of operations gives the same future as going on."""
    cfg = CONFIGS[3]
    for ops in range(0, 61, 3):
        original = busy(backend, cfg, 7, ops)
        again = backend.Scheduler.from_state(json.loads(json.dumps(original.to_state())))
        assert run(again, ops, 40) == run(original, ops, 40)


def _plain(value: Any, path: str = "state") -> None:
    """Only dicts with str keys, lists, ints, bools and None (no subclasses)."""
    if isinstance(value, dict):
        assert type(value) is dict, path
        for k, v in value.items():
            assert type(k) is str, path
            _plain(v, f"{path}[{k!r}]")
    elif isinstance(value, list):
        assert type(value) is list, path
        for i, v in enumerate(value):
            _plain(v, f"{path}[{i}]")
    else:
        assert value is None or type(value) in (int, bool), (path, type(value))


def test_state_format(backend: ModuleType) -> None:
    s = busy(backend, CONFIGS[3], 3)
    s.enqueue(U64_MAX, U64_MAX, cached_tokens=7, priority=I64_MIN)
    state = s.to_state()
    _plain(state)
    assert list(state) == [
        "version",
        "config",
        "step_index",
        "chunks_scheduled",
        "tokens_prefilled",
        "requests",
    ]
    assert state["version"] == backend.STATE_VERSION == 1
    assert state["config"] == s.config.to_dict()
    assert state["step_index"] == int(repr(s).rsplit("next_step_index=", 1)[1].rstrip(")"))
    assert state["chunks_scheduled"] == s.chunks_scheduled()
    assert state["tokens_prefilled"] == s.tokens_prefilled()
    assert len(state["requests"]) == len(s)
    for item in state["requests"]:
        assert list(item) == [
            "request_id",
            "total_tokens",
            "processed_tokens",
            "cached_tokens",
            "priority",
        ]
        assert item == s.state(item["request_id"]).to_dict()
    # Started requests first, then waiting ones in scheduling order, then completed ones.
    kinds = []
    for item in state["requests"]:
        total, cached = item["total_tokens"], item["cached_tokens"]
        start = total - 1 if cached >= total else cached
        if item["processed_tokens"] == total:
            kinds.append(2)
        elif item["processed_tokens"] > start:
            kinds.append(0)
        else:
            kinds.append(1)
    assert kinds == sorted(kinds)
    waiting = [i for i, k in zip(state["requests"], kinds) if k == 1]
    assert [w["priority"] for w in waiting] == sorted(w["priority"] for w in waiting)
    assert json.loads(json.dumps(state)) == state


def test_from_state_does_not_alias_its_input(backend: ModuleType) -> None:
    s = busy(backend, CONFIGS[1], 2)
    state = s.to_state()
    kept = copy.deepcopy(state)
    restored = backend.Scheduler.from_state(state)
    state["requests"].clear()
    state["config"]["chunk_size"] = 1
    assert restored.to_state() == kept
    run(restored, 1)
    assert s.to_state() == kept


# --------------------------------------------------------------------------- corrupted states


def base_state(mod: ModuleType) -> dict[str, Any]:
    s = mod.Scheduler(mod.Config(chunk_size=4, max_decode_tokens=2))
    s.enqueue(1, 10)
    s.enqueue(2, 6, cached_tokens=2, priority=-1)
    s.enqueue(3, 5, cached_tokens=5)
    s.enqueue(4, 3)
    for _ in range(3):
        s.next_step(1)
    state = s.to_state()
    assert [r["request_id"] for r in state["requests"]] == [1, 3, 4, 2]
    return state


def _not_int(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return msg("bool_not_int", name=name, value=value)
    return msg("not_int", name=name, type_name=type(value).__name__, value_repr=repr(value))


Edit = Callable[[dict[str, Any]], Any]
REQ0 = "state['requests'][0]"


def _set(*path: Any, value: Any) -> Edit:
    def edit(state: dict[str, Any]) -> Any:
        target: Any = state
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        return state

    return edit


def _del(*path: Any) -> Edit:
    def edit(state: dict[str, Any]) -> Any:
        target: Any = state
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]
        return state

    return edit


def _replace(value: Any) -> Edit:
    return lambda state: value


def _rule(path: str, key: str, **fields: Any) -> str:
    return msg("state_rule", path=path, message=msg(key, **fields))


CORRUPT: list[tuple[str, Edit, type[BaseException], str]] = [
    # not a dict / not a list
    *[
        (
            f"state-{type(v).__name__}",
            _replace(v),
            TypeError,
            msg("state_not_dict", path="state", type_name=type(v).__name__, value_repr=repr(v)),
        )
        for v in (None, [], 5, "state", (1,))
    ],
    (
        "config-not-dict",
        _set("config", value=[4, 2]),
        TypeError,
        msg("state_not_dict", path="state['config']", type_name="list", value_repr="[4, 2]"),
    ),
    (
        "requests-tuple",
        _set("requests", value=()),
        TypeError,
        msg("state_not_list", path="state['requests']", type_name="tuple", value_repr="()"),
    ),
    (
        "requests-dict",
        _set("requests", value={}),
        TypeError,
        msg("state_not_list", path="state['requests']", type_name="dict", value_repr="{}"),
    ),
    (
        "request-not-dict",
        _set("requests", 2, value=(3, 5)),
        TypeError,
        msg("state_not_dict", path="state['requests'][2]", type_name="tuple", value_repr="(3, 5)"),
    ),
    # versions
    *[
        (
            f"version-{v!r}",
            _set("version", value=v),
            ValueError,
            msg("state_version", value_repr=repr(v)),
        )
        for v in (0, 2, -1, True, False, 1.0, "1", None, 2**64)
    ],
    # missing and unknown keys
    *[
        (
            f"missing-{key}",
            _del(key),
            ValueError,
            msg("state_missing_key", path="state", key=key),
        )
        for key in (
            "version",
            "config",
            "step_index",
            "chunks_scheduled",
            "tokens_prefilled",
            "requests",
        )
    ],
    *[
        (
            f"missing-config-{key}",
            _del("config", key),
            ValueError,
            msg("state_missing_key", path="state['config']", key=key),
        )
        for key in (
            "chunk_size",
            "max_decode_tokens",
            "interleave_decode",
            "token_budget",
            "max_prefills_per_step",
        )
    ],
    *[
        (
            f"missing-request-{key}",
            _del("requests", 0, key),
            ValueError,
            msg("state_missing_key", path=REQ0, key=key),
        )
        for key in ("request_id", "total_tokens", "processed_tokens", "cached_tokens", "priority")
    ],
    (
        "unknown-key",
        _set("extra", value=1),
        ValueError,
        msg("state_unknown_key", path="state", key="extra"),
    ),
    (
        "unknown-config-key",
        _set("config", "chunk", value=1),
        ValueError,
        msg("state_unknown_key", path="state['config']", key="chunk"),
    ),
    (
        "unknown-request-key",
        _set("requests", 0, "is_complete", value=False),
        ValueError,
        msg("state_unknown_key", path=REQ0, key="is_complete"),
    ),
    # wrong types
    (
        "chunk_size-str",
        _set("config", "chunk_size", value="4"),
        TypeError,
        _not_int("state['config']['chunk_size']", "4"),
    ),
    (
        "chunk_size-bool",
        _set("config", "chunk_size", value=True),
        TypeError,
        _not_int("state['config']['chunk_size']", True),
    ),
    (
        "interleave-int",
        _set("config", "interleave_decode", value=1),
        TypeError,
        msg(
            "not_bool",
            name="state['config']['interleave_decode']",
            type_name="int",
            value_repr="1",
        ),
    ),
    (
        "token_budget-float",
        _set("config", "token_budget", value=9.0),
        TypeError,
        _not_int("state['config']['token_budget']", 9.0),
    ),
    (
        "step_index-float",
        _set("step_index", value=3.0),
        TypeError,
        _not_int("state['step_index']", 3.0),
    ),
    (
        "tokens_prefilled-none",
        _set("tokens_prefilled", value=None),
        TypeError,
        _not_int("state['tokens_prefilled']", None),
    ),
    (
        "request_id-str",
        _set("requests", 0, "request_id", value="1"),
        TypeError,
        _not_int(f"{REQ0}['request_id']", "1"),
    ),
    (
        "priority-float",
        _set("requests", 1, "priority", value=0.5),
        TypeError,
        _not_int("state['requests'][1]['priority']", 0.5),
    ),
    (
        "processed-bool",
        _set("requests", 0, "processed_tokens", value=True),
        TypeError,
        _not_int(f"{REQ0}['processed_tokens']", True),
    ),
    # negative and too large
    (
        "step_index-negative",
        _set("step_index", value=-1),
        ValueError,
        msg("negative", name="state['step_index']", value=-1),
    ),
    (
        "total-negative",
        _set("requests", 0, "total_tokens", value=-10),
        ValueError,
        msg("negative", name=f"{REQ0}['total_tokens']", value=-10),
    ),
    (
        "max_decode-negative",
        _set("config", "max_decode_tokens", value=-2),
        ValueError,
        msg("negative", name="state['config']['max_decode_tokens']", value=-2),
    ),
    (
        "chunk_size-too-large",
        _set("config", "chunk_size", value=2**64),
        OverflowError,
        msg("above_u64", name="state['config']['chunk_size']", value=2**64),
    ),
    (
        "request_id-too-large",
        _set("requests", 0, "request_id", value=2**64),
        OverflowError,
        msg("above_u64", name=f"{REQ0}['request_id']", value=2**64),
    ),
    (
        "priority-too-large",
        _set("requests", 0, "priority", value=2**63),
        OverflowError,
        msg("outside_i64", name=f"{REQ0}['priority']", value=2**63),
    ),
    (
        "priority-too-small",
        _set("requests", 0, "priority", value=I64_MIN - 1),
        OverflowError,
        msg("outside_i64", name=f"{REQ0}['priority']", value=I64_MIN - 1),
    ),
    *[
        (
            f"{name}-above-counter-max-{value}",
            _set(name, value=value),
            OverflowError,
            msg("above_counter", name=f"state[{name!r}]", value=value),
        )
        for name in ("step_index", "chunks_scheduled", "tokens_prefilled")
        for value in (2**127, 2**128 - 1, 2**128)
    ],
    # the scheduler's rules
    (
        "processed-above-total",
        _set("requests", 0, "processed_tokens", value=11),
        ValueError,
        _rule(REQ0, "processed_out_of_range", start=0, total_tokens=10, processed_tokens=11),
    ),
    (
        "processed-below-cached",
        _set("requests", 3, "processed_tokens", value=1),
        ValueError,
        _rule(
            "state['requests'][3]",
            "processed_out_of_range",
            start=2,
            total_tokens=6,
            processed_tokens=1,
        ),
    ),
    (
        "processed-below-fully-cached-start",
        _set("requests", 2, "cached_tokens", value=3),
        ValueError,
        _rule(
            "state['requests'][2]",
            "processed_out_of_range",
            start=2,
            total_tokens=3,
            processed_tokens=0,
        ),
    ),
    (
        "total-zero",
        _set("requests", 2, "total_tokens", value=0),
        ValueError,
        _rule("state['requests'][2]", "total_tokens_zero", value=0),
    ),
    (
        "cached-above-total",
        _set("requests", 0, "cached_tokens", value=11),
        ValueError,
        _rule(REQ0, "cached_exceeds_total", total_tokens=10, cached_tokens=11),
    ),
    (
        "duplicate-id",
        _set("requests", 3, "request_id", value=1),
        ValueError,
        _rule("state['requests'][3]", "duplicate_request", request_id=1),
    ),
    (
        "duplicate-id-appended",
        lambda st: st["requests"].append(dict(st["requests"][1])) or st,
        ValueError,
        _rule("state['requests'][4]", "duplicate_request", request_id=3),
    ),
    (
        "config-chunk-zero",
        _set("config", "chunk_size", value=0),
        ValueError,
        _rule("state['config']", "chunk_size_zero", value=0),
    ),
    (
        "config-budget-zero",
        _set("config", "token_budget", value=0),
        ValueError,
        _rule("state['config']", "token_budget_zero", value=0),
    ),
    (
        "config-budget-too-small",
        _set("config", "token_budget", value=2),
        ValueError,
        _rule("state['config']", "token_budget_too_small", max_decode_tokens=2, token_budget=2),
    ),
    (
        "config-prefills-zero",
        _set("config", "max_prefills_per_step", value=0),
        ValueError,
        _rule("state['config']", "max_prefills_zero", value=0),
    ),
    (
        "config-prefills-need-budget",
        _set("config", "max_prefills_per_step", value=3),
        ValueError,
        _rule("state['config']", "max_prefills_needs_budget", value=3),
    ),
]


@pytest.mark.parametrize("name,edit,exc,message", CORRUPT, ids=[c[0] for c in CORRUPT])
def test_corrupted_state_rejected(
    backend: ModuleType, name: str, edit: Edit, exc: type[BaseException], message: str
) -> None:
    state = edit(base_state(backend))
    given = copy.deepcopy(state)
    with pytest.raises(exc) as info:
        backend.Scheduler.from_state(state)
    assert type(info.value) is exc
    assert info.value.args == (message,)
    assert state == given  # the input is not modified


@pytest.mark.parametrize("name,edit,exc,message", CORRUPT, ids=[c[0] for c in CORRUPT])
def test_corrupted_state_same_error_on_both_backends(
    name: str, edit: Edit, exc: type[BaseException], message: str
) -> None:
    errors = []
    for mod in (R, P):
        try:
            mod.Scheduler.from_state(edit(base_state(mod)))
        except Exception as err:
            errors.append((type(err), err.args))
    assert errors == [(exc, (message,))] * 2


def test_base_state_restores() -> None:
    for mod in (R, P):
        state = base_state(mod)
        assert mod.Scheduler.from_state(state).to_state() == state
    assert base_state(R) == base_state(P)


def test_hand_edited_state_is_accepted_when_consistent(backend: ModuleType) -> None:
    """A hand-written state in the documented form restores: waiting ones by list order within
    a priority, a started one before them, completed ones drained."""
    state = {
        "version": 1,
        "config": {
            "chunk_size": 4,
            "max_decode_tokens": 2,
            "interleave_decode": True,
            "token_budget": None,
            "max_prefills_per_step": 1,
        },
        "step_index": 2**70,
        "chunks_scheduled": 5,
        "tokens_prefilled": 17,
        "requests": [
            {"request_id": 9, "total_tokens": 5, "processed_tokens": 5, "cached_tokens": 0,
             "priority": 0},
            {"request_id": 8, "total_tokens": 6, "processed_tokens": 0, "cached_tokens": 0,
             "priority": 1},
            {"request_id": 7, "total_tokens": 6, "processed_tokens": 3, "cached_tokens": 1,
             "priority": 5},
            {"request_id": 6, "total_tokens": 2, "processed_tokens": 0, "cached_tokens": 0,
             "priority": 1},
        ],
    }  # fmt: skip
    s = backend.Scheduler.from_state(state)
    assert [r["request_id"] for r in s.to_state()["requests"]] == [7, 8, 6, 9]
    plan = [(x.step_index, x.prefill_request_id, x.prefill_start, x.prefill_tokens) for x in
            (s.next_step() for _ in range(5))]  # fmt: skip
    assert plan == [
        (2**70, 7, 3, 3),
        (2**70 + 1, 8, 0, 4),
        (2**70 + 2, 8, 4, 2),
        (2**70 + 3, 6, 0, 2),
        (2**70 + 4, None, 0, 0),
    ]
    assert s.drain_completed() == 4
    assert s.tokens_prefilled() == 17 + 11
    assert s.chunks_scheduled() == 5 + 4
