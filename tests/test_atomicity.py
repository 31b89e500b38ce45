"""Failure atomicity: every rejected call leaves everything exactly as it was.

Each row of the rejection matrix (every invalid call on ``Config``, ``Config.replace``,
``Scheduler``, ``Scheduler.enqueue`` / ``next_step`` / ``abort`` / ``state``,
``PrefillChunkState`` and its ``advance``, ``Chunk``, ``Step`` and ``Scheduler.from_state``)
is run on both backends against a scheduler holding waiting, started and completed requests
with non-zero counters, in the original mode and in budgeted mode. The row must raise the
documented class with the documented message (from ``_messages.json``), and afterwards:

* a full snapshot of the scheduler (``to_state()``, ``repr``, every query, every request's
  ``state()``) is identical to the one taken before the call;
* the scheduler plans exactly the same future steps as a deep copy taken before the call;
* the objects the call was given (a ``PrefillChunkState``, a ``Config``, a state dict) are
  unchanged.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, NamedTuple

import numpy as np
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
OTHER = {R: P, P: R}


def msg(key: str, /, **fields: Any) -> str:
    return MESSAGES[key].format(**fields)


def not_int(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return msg("bool_not_int", name=name, value=value)
    return msg("not_int", name=name, type_name=type(value).__name__, value_repr=repr(value))


def other_backend(name: str, class_name: str, expected: ModuleType) -> str:
    names = {"chunked_prefill._core": "rust", "chunked_prefill.pure": "pure"}
    got = OTHER[expected].__name__
    return msg(
        "other_backend",
        name=name,
        class_name=class_name,
        backend=names[expected.__name__],
        module=expected.__name__,
        other=names[got],
        other_module=got,
    )


def not_bool(name: str, value: Any) -> str:
    return msg("not_bool", name=name, type_name=type(value).__name__, value_repr=repr(value))


# --------------------------------------------------------------------------- the scheduler


def busy(mod: ModuleType, budgeted: bool) -> Any:
    """A scheduler with completed, started and waiting requests and non-zero counters."""
    if budgeted:
        config = mod.Config(
            chunk_size=4, max_decode_tokens=2, token_budget=7, max_prefills_per_step=2
        )
    else:
        config = mod.Config(chunk_size=4, max_decode_tokens=2)
    s = mod.Scheduler(config)
    s.enqueue(1, 3)
    s.enqueue(2, 10, priority=-1)
    s.enqueue(3, 9, cached_tokens=2)
    s.enqueue(4, 5, cached_tokens=5, priority=2)
    s.enqueue(U64_MAX, 6, priority=I64_MIN)
    s.enqueue(0, 8, priority=I64_MAX)
    for _ in range(3):
        s.next_step(1)
    s.enqueue(7, 4)
    return s


def classify(s: Any) -> dict[str, int]:
    """One tracked id per kind: ``completed``, ``started`` and ``waiting``."""
    kinds: dict[str, int] = {}
    for item in s.to_state()["requests"]:
        st = s.state(item["request_id"])
        start = st.total_tokens - 1 if st.cached_tokens >= st.total_tokens else st.cached_tokens
        if st.is_complete:
            kind = "completed"
        elif st.processed_tokens > start:
            kind = "started"
        else:
            kind = "waiting"
        kinds.setdefault(kind, st.request_id)
    return kinds


def snapshot(s: Any) -> tuple[Any, ...]:
    state = s.to_state()
    return (
        state,
        repr(s),
        len(s),
        s.active_count(),
        s.is_idle(),
        s.chunks_scheduled(),
        s.tokens_prefilled(),
        repr(s.config),
        [repr(s.state(item["request_id"])) for item in state["requests"]],
        [item["request_id"] in s for item in state["requests"]],
    )


def future(s: Any) -> list[str]:
    """What the scheduler does next: a fixed script of calls, as reprs."""
    out = []
    for i in range(12):
        out.append(repr(s.next_step(i % 4)))
        if i == 4:
            s.enqueue(1000, 9, priority=-5)
            out.append(repr(s.to_state()))
        if i == 8:
            out.append(repr(s.drain_completed()))
    out.append(repr(s.to_state()))
    return out


# --------------------------------------------------------------------------- the matrix


class Row(NamedTuple):
    name: str
    call: Callable[[ModuleType, Any, dict[str, int]], Any]
    exc: type[BaseException]
    message: str | Callable[[ModuleType, Any, dict[str, int]], str]


BAD_U64: list[tuple[str, Any, type[BaseException], Callable[[str], str]]] = [
    ("bool", True, TypeError, lambda n: not_int(n, True)),
    ("false", False, TypeError, lambda n: not_int(n, False)),
    ("float", 1.0, TypeError, lambda n: not_int(n, 1.0)),
    ("str", "1", TypeError, lambda n: not_int(n, "1")),
    ("none", None, TypeError, lambda n: not_int(n, None)),
    ("np_float", np.float64(2.0), TypeError, lambda n: not_int(n, np.float64(2.0))),
    ("negative", -1, ValueError, lambda n: msg("negative", name=n, value=-1)),
    ("np_negative", np.int8(-3), ValueError, lambda n: msg("negative", name=n, value=-3)),
    ("above_u64", 2**64, OverflowError, lambda n: msg("above_u64", name=n, value=2**64)),
    ("huge", 2**200, OverflowError, lambda n: msg("above_u64", name=n, value=2**200)),
]
BAD_I64: list[tuple[str, Any, type[BaseException], Callable[[str], str]]] = [
    ("bool", True, TypeError, lambda n: not_int(n, True)),
    ("float", 1.5, TypeError, lambda n: not_int(n, 1.5)),
    ("str", "0", TypeError, lambda n: not_int(n, "0")),
    ("none", None, TypeError, lambda n: not_int(n, None)),
    ("above", 2**63, OverflowError, lambda n: msg("outside_i64", name=n, value=2**63)),
    ("below", I64_MIN - 1, OverflowError, lambda n: msg("outside_i64", name=n, value=I64_MIN - 1)),
]
BAD_BOOL = [0, 1, None, "true", 1.0]


def _rows() -> list[Row]:
    rows: list[Row] = []
    add = rows.append

    # Config(...) and Config.replace(...): the scheduler and its config stay as they were.
    for field in ("chunk_size", "max_decode_tokens", "token_budget", "max_prefills_per_step"):
        for label, value, exc, text in BAD_U64:
            if field == "token_budget" and value is None:
                continue  # None is the documented "no budget"
            add(
                Row(
                    f"Config-{field}-{label}",
                    lambda m, s, ids, f=field, v=value: m.Config(**{f: v}),
                    exc,
                    text(field),
                )
            )
            add(
                Row(
                    f"replace-{field}-{label}",
                    lambda m, s, ids, f=field, v=value: s.config.replace(**{f: v}),
                    exc,
                    text(field),
                )
            )
    for value in BAD_BOOL:
        add(
            Row(
                f"Config-interleave_decode-{value!r}",
                lambda m, s, ids, v=value: m.Config(interleave_decode=v),
                TypeError,
                not_bool("interleave_decode", value),
            )
        )
    config_rules: list[tuple[str, dict[str, Any], str]] = [
        ("chunk_size_zero", {"chunk_size": 0}, msg("chunk_size_zero", value=0)),
        ("budget_zero", {"token_budget": 0}, msg("token_budget_zero", value=0)),
        (
            "budget_zero_no_interleave",
            {"token_budget": 0, "interleave_decode": False},
            msg("token_budget_zero", value=0),
        ),
        (
            "budget_equal_decode",
            {"token_budget": 128},
            msg("token_budget_too_small", max_decode_tokens=128, token_budget=128),
        ),
        (
            "budget_below_decode",
            {"token_budget": 5, "max_decode_tokens": 9},
            msg("token_budget_too_small", max_decode_tokens=9, token_budget=5),
        ),
        (
            "budget_u64_max_decode",
            {"token_budget": U64_MAX, "max_decode_tokens": U64_MAX},
            msg("token_budget_too_small", max_decode_tokens=U64_MAX, token_budget=U64_MAX),
        ),
        ("prefills_zero", {"max_prefills_per_step": 0}, msg("max_prefills_zero", value=0)),
        (
            "prefills_zero_with_budget",
            {"max_prefills_per_step": 0, "token_budget": 500},
            msg("max_prefills_zero", value=0),
        ),
        (
            "prefills_need_budget",
            {"max_prefills_per_step": 2},
            msg("max_prefills_needs_budget", value=2),
        ),
        (
            "types_before_rules",
            {"chunk_size": 0, "max_prefills_per_step": -1},
            msg("negative", name="max_prefills_per_step", value=-1),
        ),
        (
            "first_rule_wins",
            {"chunk_size": 0, "token_budget": 0, "max_prefills_per_step": 0},
            msg("chunk_size_zero", value=0),
        ),
    ]
    for label, kw, text in config_rules:
        add(Row(f"Config-{label}", lambda m, s, ids, kw=kw: m.Config(**kw), ValueError, text))
        add(
            Row(
                f"replace-{label}",
                lambda m, s, ids, kw=kw: s.config.replace(
                    **{"max_decode_tokens": 128, "token_budget": None, **kw}
                ),
                ValueError,
                text,
            )
        )
    add(
        Row(
            "Config-unknown-keyword",
            lambda m, s, ids: m.Config(chunk=5),
            TypeError,
            "Config.__new__() got an unexpected keyword argument 'chunk'",
        )
    )
    add(
        Row(
            "replace-unknown-keyword",
            lambda m, s, ids: s.config.replace(chunk=5),
            TypeError,
            msg("unexpected_keyword", owner="Config.replace", name="chunk"),
        )
    )
    for label, value in [("int", 5), ("dict", {"chunk_size": 4}), ("str", "Config()")]:
        add(
            Row(
                f"Scheduler-config-{label}",
                lambda m, s, ids, v=value: m.Scheduler(v),
                TypeError,
                msg(
                    "not_config",
                    name="config",
                    type_name=type(value).__name__,
                    value_repr=repr(value),
                ),
            )
        )
    add(
        Row(
            "Scheduler-config-other-backend",
            lambda m, s, ids: m.Scheduler(OTHER[m].Config()),
            TypeError,
            lambda m, s, ids: other_backend("config", "Config", m),
        )
    )

    # Scheduler.enqueue
    for label, value, exc, text in BAD_U64:
        add(
            Row(
                f"enqueue-request_id-{label}",
                lambda m, s, ids, v=value: s.enqueue(v, 5),
                exc,
                text("request_id"),
            )
        )
        add(
            Row(
                f"enqueue-total_tokens-{label}",
                lambda m, s, ids, v=value: s.enqueue(500, v),
                exc,
                text("total_tokens"),
            )
        )
        add(
            Row(
                f"enqueue-cached_tokens-{label}",
                lambda m, s, ids, v=value: s.enqueue(500, 5, cached_tokens=v),
                exc,
                text("cached_tokens"),
            )
        )
    for label, value, exc, text in BAD_I64:
        add(
            Row(
                f"enqueue-priority-{label}",
                lambda m, s, ids, v=value: s.enqueue(500, 5, priority=v),
                exc,
                text("priority"),
            )
        )
    add(
        Row(
            "enqueue-zero-tokens",
            lambda m, s, ids: s.enqueue(500, 0),
            ValueError,
            msg("total_tokens_zero", value=0),
        )
    )
    add(
        Row(
            "enqueue-cached-above-total",
            lambda m, s, ids: s.enqueue(500, 5, cached_tokens=6),
            ValueError,
            msg("cached_exceeds_total", total_tokens=5, cached_tokens=6),
        )
    )
    add(
        Row(
            "enqueue-cached-u64-max",
            lambda m, s, ids: s.enqueue(500, 2**63, cached_tokens=U64_MAX),
            ValueError,
            msg("cached_exceeds_total", total_tokens=2**63, cached_tokens=U64_MAX),
        )
    )
    for kind in ("waiting", "started", "completed"):
        add(
            Row(
                f"enqueue-duplicate-{kind}",
                lambda m, s, ids, k=kind: s.enqueue(ids[k], 5),
                ValueError,
                lambda m, s, ids, k=kind: msg("duplicate_request", request_id=ids[k]),
            )
        )
    add(
        Row(
            "enqueue-duplicate-checked-after-prompt",
            lambda m, s, ids: s.enqueue(ids["waiting"], 0),
            ValueError,
            msg("total_tokens_zero", value=0),
        )
    )
    add(
        Row(
            "enqueue-duplicate-checked-after-cached",
            lambda m, s, ids: s.enqueue(ids["started"], 4, cached_tokens=5),
            ValueError,
            msg("cached_exceeds_total", total_tokens=4, cached_tokens=5),
        )
    )
    add(
        Row(
            "enqueue-signature-order",
            lambda m, s, ids: s.enqueue(ids["waiting"], True, cached_tokens=-1, priority=2**63),
            TypeError,
            not_int("total_tokens", True),
        )
    )
    add(
        Row(
            "enqueue-id-first",
            lambda m, s, ids: s.enqueue(-1, 0, cached_tokens=2**64),
            ValueError,
            msg("negative", name="request_id", value=-1),
        )
    )
    add(
        Row(
            "enqueue-missing-total",
            lambda m, s, ids: s.enqueue(500),
            TypeError,
            "Scheduler.enqueue() missing 1 required positional argument: 'total_tokens'",
        )
    )
    add(
        Row(
            "enqueue-unknown-keyword",
            lambda m, s, ids: s.enqueue(500, 5, cached=1),
            TypeError,
            "Scheduler.enqueue() got an unexpected keyword argument 'cached'",
        )
    )

    # Scheduler.next_step: a rejected call plans no step (the step index does not move).
    for label, value, exc, text in BAD_U64:
        add(
            Row(
                f"next_step-{label}",
                lambda m, s, ids, v=value: s.next_step(v),
                exc,
                text("active_decode_count"),
            )
        )
    add(
        Row(
            "next_step-keyword-none",
            lambda m, s, ids: s.next_step(active_decode_count=None),
            TypeError,
            not_int("active_decode_count", None),
        )
    )

    # Scheduler.abort and Scheduler.state
    for method in ("abort", "state"):
        for label, value, exc, text in BAD_U64:
            add(
                Row(
                    f"{method}-{label}",
                    lambda m, s, ids, v=value, f=method: getattr(s, f)(v),
                    exc,
                    text("request_id"),
                )
            )
        for rid in (5, 999, U64_MAX - 1):
            add(
                Row(
                    f"{method}-unknown-{rid}",
                    lambda m, s, ids, r=rid, f=method: getattr(s, f)(r),
                    KeyError,
                    msg("unknown_request", request_id=rid),
                )
            )
        add(
            Row(
                f"{method}-missing-argument",
                lambda m, s, ids, f=method: getattr(s, f)(),
                TypeError,
                f"Scheduler.{method}() missing 1 required positional argument: 'request_id'",
            )
        )

    # PrefillChunkState(...)
    for label, value, exc, text in BAD_U64:
        for field in ("request_id", "total_tokens"):
            args: list[Any] = [1, 5]
            args[0 if field == "request_id" else 1] = value
            add(
                Row(
                    f"PrefillChunkState-{field}-{label}",
                    lambda m, s, ids, a=tuple(args): m.PrefillChunkState(*a),
                    exc,
                    text(field),
                )
            )
        if value is None:
            continue  # processed_tokens=None is the documented default
        for field in ("cached_tokens", "processed_tokens"):
            add(
                Row(
                    f"PrefillChunkState-{field}-{label}",
                    lambda m, s, ids, f=field, v=value: m.PrefillChunkState(1, 5, **{f: v}),
                    exc,
                    text(field),
                )
            )
    for label, value, exc, text in BAD_I64:
        add(
            Row(
                f"PrefillChunkState-priority-{label}",
                lambda m, s, ids, v=value: m.PrefillChunkState(1, 5, priority=v),
                exc,
                text("priority"),
            )
        )
    state_rules: list[tuple[str, dict[str, Any], str]] = [
        ("zero-total", {"total_tokens": 0}, msg("total_tokens_zero", value=0)),
        (
            "cached-above-total",
            {"cached_tokens": 6},
            msg("cached_exceeds_total", total_tokens=5, cached_tokens=6),
        ),
        (
            "processed-above-total",
            {"processed_tokens": 6},
            msg("processed_out_of_range", start=0, total_tokens=5, processed_tokens=6),
        ),
        (
            "processed-below-cached",
            {"cached_tokens": 3, "processed_tokens": 2},
            msg("processed_out_of_range", start=3, total_tokens=5, processed_tokens=2),
        ),
        (
            "processed-below-fully-cached-start",
            {"cached_tokens": 5, "processed_tokens": 3},
            msg("processed_out_of_range", start=4, total_tokens=5, processed_tokens=3),
        ),
    ]
    for label, kw, text in state_rules:
        add(
            Row(
                f"PrefillChunkState-{label}",
                lambda m, s, ids, kw=kw: m.PrefillChunkState(
                    1,
                    kw.get("total_tokens", 5),
                    **{k: v for k, v in kw.items() if k != "total_tokens"},
                ),
                ValueError,
                text,
            )
        )

    # PrefillChunkState.advance on a copy from the scheduler: the copy and the scheduler stay.
    for label, value, exc, text in BAD_U64:
        add(
            Row(
                f"advance-{label}",
                lambda m, s, ids, v=value: s._probe.advance(v),
                exc,
                text("n"),
            )
        )

    # Chunk(...) and Step(...)
    for label, value, exc, text in BAD_U64:
        add(
            Row(
                f"Chunk-start-{label}",
                lambda m, s, ids, v=value: m.Chunk(1, v, 1, True),
                exc,
                text("start"),
            )
        )
        add(
            Row(
                f"Step-decode_tokens-{label}",
                lambda m, s, ids, v=value: m.Step(step_index=0, decode_tokens=v),
                exc,
                text("decode_tokens"),
            )
        )
    add(
        Row(
            "Chunk-is_last-int",
            lambda m, s, ids: m.Chunk(1, 0, 1, 1),
            TypeError,
            not_bool("is_last", 1),
        )
    )
    add(
        Row(
            "Step-step_index-above-u128",
            lambda m, s, ids: m.Step(step_index=2**128, decode_tokens=0),
            OverflowError,
            msg("above_u128", name="step_index", value=2**128),
        )
    )
    add(
        Row(
            "Step-chunks-not-chunk",
            lambda m, s, ids: m.Step(step_index=0, decode_tokens=0, chunks=[(1, 0, 1, True)]),
            TypeError,
            msg("not_chunk", type_name="tuple", value_repr=repr((1, 0, 1, True))),
        )
    )
    add(
        Row(
            "Step-prefill-overflow",
            lambda m, s, ids: m.Step(
                step_index=0,
                decode_tokens=0,
                chunks=[m.Chunk(1, 0, U64_MAX, True), m.Chunk(2, 0, 1, True)],
            ),
            OverflowError,
            msg("above_u64", name="prefill_tokens", value=2**64),
        )
    )

    # Scheduler.from_state of a corrupted copy of this scheduler's own state.
    def corrupt(edit: Callable[[dict[str, Any]], Any]) -> Callable[..., Any]:
        def call(m: ModuleType, s: Any, ids: dict[str, int]) -> Any:
            state = s.to_state()
            edit(state)
            s._probe_state = copy.deepcopy(state)
            s._probe_given = state
            return m.Scheduler.from_state(state)

        return call

    def dup(state: dict[str, Any]) -> None:
        state["requests"].append(dict(state["requests"][0]))

    def over(state: dict[str, Any]) -> None:
        state["requests"][1]["processed_tokens"] = state["requests"][1]["total_tokens"] + 1

    add(
        Row(
            "from_state-version",
            corrupt(lambda st: st.update(version=2)),
            ValueError,
            msg("state_version", value_repr="2"),
        )
    )
    add(
        Row(
            "from_state-missing",
            corrupt(lambda st: st.pop("tokens_prefilled")),
            ValueError,
            msg("state_missing_key", path="state", key="tokens_prefilled"),
        )
    )
    add(
        Row(
            "from_state-counter-above-counter-max",
            corrupt(lambda st: st.update(step_index=2**127)),
            OverflowError,
            msg("above_counter", name="state['step_index']", value=2**127),
        )
    )
    add(
        Row(
            "from_state-duplicate",
            corrupt(dup),
            ValueError,
            lambda m, s, ids: msg(
                "state_rule",
                path=f"state['requests'][{len(s.to_state()['requests'])}]",
                message=msg(
                    "duplicate_request", request_id=s.to_state()["requests"][0]["request_id"]
                ),
            ),
        )
    )
    add(
        Row(
            "from_state-processed-above-total",
            corrupt(over),
            ValueError,
            lambda m, s, ids: msg(
                "state_rule",
                path="state['requests'][1]",
                message=msg(
                    "processed_out_of_range",
                    start=_start(s.to_state()["requests"][1]),
                    total_tokens=s.to_state()["requests"][1]["total_tokens"],
                    processed_tokens=s.to_state()["requests"][1]["total_tokens"] + 1,
                ),
            ),
        )
    )
    add(
        Row(
            "from_state-config-rule",
            corrupt(lambda st: st["config"].update(chunk_size=0)),
            ValueError,
            msg("state_rule", path="state['config']", message=msg("chunk_size_zero", value=0)),
        )
    )
    return rows


def _start(req: dict[str, int]) -> int:
    total, cached = req["total_tokens"], req["cached_tokens"]
    return total - 1 if cached >= total else cached


ROWS = _rows()


@pytest.mark.parametrize("budgeted", [False, True], ids=["original", "budgeted"])
@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_rejected_call_changes_nothing(backend: ModuleType, row: Row, budgeted: bool) -> None:
    s = busy(backend, budgeted)
    ids = classify(s)
    assert sorted(ids) == ["completed", "started", "waiting"]
    twin = copy.deepcopy(s)
    probe = s.state(ids["started"])
    probe_repr = repr(probe)
    config = s.config
    config_view = (repr(config), config.to_dict(), hash(config))
    before = snapshot(s)
    holder = _Holder(s, probe)
    message = row.message(backend, s, ids) if callable(row.message) else row.message
    with pytest.raises(row.exc) as info:
        row.call(backend, holder, ids)
    assert type(info.value) is row.exc
    assert info.value.args == (message,)
    assert snapshot(s) == before
    assert repr(probe) == probe_repr
    assert (repr(config), config.to_dict(), hash(config)) == config_view
    if holder._probe_state is not None:
        assert holder._probe_given == holder._probe_state  # from_state did not edit its input
    assert future(s) == future(twin)


class _Holder:
    """The scheduler as the rows see it, plus the extra objects some rows act on."""

    def __init__(self, s: Any, probe: Any) -> None:
        self._s = s
        self._probe = probe
        self._probe_state: Any = None
        self._probe_given: Any = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._s, name)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)


@pytest.mark.parametrize("budgeted", [False, True], ids=["original", "budgeted"])
def test_both_backends_run_the_same_matrix(budgeted: bool) -> None:
    """The two backends give the same exception (class and args) for every row."""
    for row in ROWS:
        outcomes = []
        for mod in (R, P):
            s = busy(mod, budgeted)
            holder = _Holder(s, s.state(classify(s)["started"]))
            try:
                row.call(mod, holder, classify(s))
            except Exception as exc:
                outcomes.append((type(exc), exc.args))
            else:
                outcomes.append(None)
        assert outcomes[0] is not None, row.name
        if row.name.endswith("-other-backend"):
            # Each backend names itself and the other: mirror images, same class.
            assert outcomes[1] is not None and outcomes[0][0] is outcomes[1][0], row.name
            continue
        assert outcomes[0] == outcomes[1], row.name


def test_matrix_covers_every_entry_point() -> None:
    names = {r.name.split("-")[0] for r in ROWS}
    assert names == {
        "Config",
        "replace",
        "Scheduler",
        "enqueue",
        "next_step",
        "abort",
        "state",
        "PrefillChunkState",
        "advance",
        "Chunk",
        "Step",
        "from_state",
    }
    assert len(ROWS) > 250


def test_rejections_in_a_row_change_nothing(backend: ModuleType) -> None:
    """Many rejected calls in sequence, interleaved with valid ones, on one scheduler: the
    result equals the valid calls alone."""
    s = busy(backend, True)
    clean = busy(backend, True)
    ids = classify(s)
    for i, row in enumerate(ROWS):
        holder = _Holder(s, s.state(ids["started"]))
        with pytest.raises(row.exc):
            row.call(backend, holder, ids)
        if i % 25 == 0:
            assert repr(s.next_step(i % 3)) == repr(clean.next_step(i % 3))
    assert snapshot(s) == snapshot(clean)
    assert future(s) == future(clean)


# --------------------------------------------------------------------------- known gaps


SIGNATURE_CALLS: list[tuple[str, Callable[[ModuleType, Any], Any]]] = [
    ("Config-positional", lambda m, s: m.Config(512)),
    ("Scheduler-two-positional", lambda m, s: m.Scheduler(None, 1)),
    ("enqueue-three-positional", lambda m, s: s.enqueue(500, 5, 1)),
    ("next_step-two-positional", lambda m, s: s.next_step(1, 2)),
]


@pytest.mark.parametrize("name,call", SIGNATURE_CALLS, ids=[c[0] for c in SIGNATURE_CALLS])
def test_signature_errors_are_atomic(
    backend: ModuleType, name: str, call: Callable[[ModuleType, Any], Any]
) -> None:
    s = busy(backend, False)
    before = snapshot(s)
    with pytest.raises(TypeError):
        call(backend, s)
    assert snapshot(s) == before


class _RaisingIndex:
    def __index__(self) -> int:
        raise RuntimeError("boom")


def test_raising_index_propagates_from_every_argument(backend: ModuleType) -> None:
    """An ``__index__`` that raises propagates its own exception, atomically."""
    s = busy(backend, True)
    before = snapshot(s)
    for call in (
        lambda: s.enqueue(_RaisingIndex(), 5),
        lambda: s.enqueue(500, _RaisingIndex()),
        lambda: s.next_step(_RaisingIndex()),
        lambda: s.abort(_RaisingIndex()),
        lambda: s.state(_RaisingIndex()),
    ):
        with pytest.raises(RuntimeError, match=r"^boom$"):
            call()
    assert snapshot(s) == before


def test_contains_with_raising_index_agrees() -> None:
    outcomes = []
    for mod in (R, P):
        s = busy(mod, False)
        try:
            outcomes.append(_RaisingIndex() in s)
        except RuntimeError as exc:
            outcomes.append(repr(exc))
    assert outcomes[0] == outcomes[1]
