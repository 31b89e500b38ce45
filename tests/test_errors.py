"""The rejection matrix: every invalid input, its exception class and its message.

Messages come from the one table (``_messages.json``) that both backends use; each row runs
on both backends, and a last test checks the Rust core's own texts against the table.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from chunked_prefill._validate import message

BIG = 2**64

Row = tuple[str, Callable[[ModuleType], Any], type[Exception], str]


def _sched(b: ModuleType, **config: Any) -> Any:
    s = b.Scheduler(b.Config(**config))
    s.enqueue(1, 100)
    return s


def _int_rows(name: str, call: Callable[[ModuleType, Any], Any]) -> list[Row]:
    """The four ways an integer argument can be wrong."""
    return [
        (
            f"{name}-bool",
            lambda b: call(b, True),
            TypeError,
            message("bool_not_int", name=name, value=True),
        ),
        (
            f"{name}-float",
            lambda b: call(b, 2.0),
            TypeError,
            message("not_int", name=name, type_name="float", value_repr="2.0"),
        ),
        (
            f"{name}-str",
            lambda b: call(b, "3"),
            TypeError,
            message("not_int", name=name, type_name="str", value_repr="'3'"),
        ),
        (
            f"{name}-none",
            lambda b: call(b, None),
            TypeError,
            message("not_int", name=name, type_name="NoneType", value_repr="None"),
        ),
        (
            f"{name}-negative",
            lambda b: call(b, -1),
            ValueError,
            message("negative", name=name, value=-1),
        ),
        (
            f"{name}-overflow",
            lambda b: call(b, BIG),
            OverflowError,
            message("above_u64", name=name, value=BIG),
        ),
    ]


ROWS: list[Row] = [
    # Config: types and ranges of each field, then its rules.
    *_int_rows("chunk_size", lambda b, v: b.Config(chunk_size=v)),
    *_int_rows("max_decode_tokens", lambda b, v: b.Config(max_decode_tokens=v)),
    *[
        r
        for r in _int_rows("token_budget", lambda b, v: b.Config(token_budget=v))
        if not r[0].endswith("-none")
    ],
    *_int_rows("max_prefills_per_step", lambda b, v: b.Config(max_prefills_per_step=v)),
    (
        "interleave-int",
        lambda b: b.Config(interleave_decode=1),
        TypeError,
        message("not_bool", name="interleave_decode", type_name="int", value_repr="1"),
    ),
    (
        "interleave-none",
        lambda b: b.Config(interleave_decode=None),
        TypeError,
        message("not_bool", name="interleave_decode", type_name="NoneType", value_repr="None"),
    ),
    (
        "chunk-zero",
        lambda b: b.Config(chunk_size=0),
        ValueError,
        message("chunk_size_zero", value=0),
    ),
    (
        "budget-zero",
        lambda b: b.Config(token_budget=0),
        ValueError,
        message("token_budget_zero", value=0),
    ),
    (
        "budget-small",
        lambda b: b.Config(token_budget=128),
        ValueError,
        message("token_budget_too_small", max_decode_tokens=128, token_budget=128),
    ),
    (
        "prefills-zero",
        lambda b: b.Config(max_prefills_per_step=0, token_budget=1000),
        ValueError,
        message("max_prefills_zero", value=0),
    ),
    (
        "prefills-need-budget",
        lambda b: b.Config(max_prefills_per_step=2),
        ValueError,
        message("max_prefills_needs_budget", value=2),
    ),
    (
        "types-before-rules",
        lambda b: b.Config(chunk_size=0, max_decode_tokens=-1),
        ValueError,
        message("negative", name="max_decode_tokens", value=-1),
    ),
    (
        "replace-unknown",
        lambda b: b.Config().replace(chunk=1),
        TypeError,
        message("unexpected_keyword", owner="Config.replace", name="chunk"),
    ),
    (
        "replace-rule",
        lambda b: b.Config().replace(chunk_size=0),
        ValueError,
        message("chunk_size_zero", value=0),
    ),
    (
        "scheduler-config",
        lambda b: b.Scheduler({"chunk_size": 1}),
        TypeError,
        message("not_config", name="config", type_name="dict", value_repr="{'chunk_size': 1}"),
    ),
    # enqueue: each argument in signature order, then the rules.
    *_int_rows("request_id", lambda b, v: _sched(b).enqueue(v, 10)),
    *_int_rows("total_tokens", lambda b, v: _sched(b).enqueue(2, v)),
    *_int_rows("cached_tokens", lambda b, v: _sched(b).enqueue(2, 10, cached_tokens=v)),
    (
        "priority-float",
        lambda b: _sched(b).enqueue(2, 10, priority=1.0),
        TypeError,
        message("not_int", name="priority", type_name="float", value_repr="1.0"),
    ),
    (
        "priority-low",
        lambda b: _sched(b).enqueue(2, 10, priority=-(2**63) - 1),
        OverflowError,
        message("outside_i64", name="priority", value=-(2**63) - 1),
    ),
    (
        "priority-high",
        lambda b: _sched(b).enqueue(2, 10, priority=2**63),
        OverflowError,
        message("outside_i64", name="priority", value=2**63),
    ),
    (
        "total-zero",
        lambda b: _sched(b).enqueue(2, 0),
        ValueError,
        message("total_tokens_zero", value=0),
    ),
    (
        "cached-above-total",
        lambda b: _sched(b).enqueue(2, 10, cached_tokens=11),
        ValueError,
        message("cached_exceeds_total", total_tokens=10, cached_tokens=11),
    ),
    (
        "duplicate",
        lambda b: _sched(b).enqueue(1, 10),
        ValueError,
        message("duplicate_request", request_id=1),
    ),
    (
        "args-before-rules",
        lambda b: _sched(b).enqueue(1, 0, priority="x"),
        TypeError,
        message("not_int", name="priority", type_name="str", value_repr="'x'"),
    ),
    (
        "rule-order",
        lambda b: _sched(b).enqueue(1, 0),
        ValueError,
        message("total_tokens_zero", value=0),
    ),
    # next_step, abort, state.
    *_int_rows("active_decode_count", lambda b, v: _sched(b).next_step(v)),
    *_int_rows("request_id", lambda b, v: _sched(b).abort(v)),
    *_int_rows("request_id", lambda b, v: _sched(b).state(v)),
    (
        "abort-unknown",
        lambda b: _sched(b).abort(2),
        KeyError,
        message("unknown_request", request_id=2),
    ),
    (
        "state-unknown",
        lambda b: _sched(b).state(2),
        KeyError,
        message("unknown_request", request_id=2),
    ),
    # PrefillChunkState.
    *_int_rows("request_id", lambda b, v: b.PrefillChunkState(v, 10)),
    *_int_rows("total_tokens", lambda b, v: b.PrefillChunkState(1, v)),
    *_int_rows("n", lambda b, v: b.PrefillChunkState(1, 10).advance(v)),
    (
        "state-total-zero",
        lambda b: b.PrefillChunkState(1, 0),
        ValueError,
        message("total_tokens_zero", value=0),
    ),
    (
        "state-processed",
        lambda b: b.PrefillChunkState(1, 10, cached_tokens=4, processed_tokens=3),
        ValueError,
        message("processed_out_of_range", start=4, total_tokens=10, processed_tokens=3),
    ),
    (
        "next-chunk-config",
        lambda b: b.PrefillChunkState(1, 10).next_chunk_size(512),
        TypeError,
        message("not_config", name="config", type_name="int", value_repr="512"),
    ),
    # Step and Chunk constructors.
    *_int_rows("decode_tokens", lambda b, v: b.Step(step_index=0, decode_tokens=v)),
    *_int_rows("tokens", lambda b, v: b.Chunk(1, 0, v, False)),
    (
        "step-chunks",
        lambda b: b.Step(step_index=0, decode_tokens=0, chunks=[(1, 0, 5, True)]),
        TypeError,
        message("not_chunk", type_name="tuple", value_repr="(1, 0, 5, True)"),
    ),
    (
        "chunk-is-last",
        lambda b: b.Chunk(1, 0, 5, 1),
        TypeError,
        message("not_bool", name="is_last", type_name="int", value_repr="1"),
    ),
]


@pytest.mark.parametrize(("row_id", "call", "exc", "text"), ROWS, ids=[r[0] for r in ROWS])
def test_rejection(
    backend: ModuleType,
    row_id: str,
    call: Callable[[ModuleType], Any],
    exc: type[Exception],
    text: str,
) -> None:
    with pytest.raises(exc) as info:
        call(backend)
    assert type(info.value) is exc
    assert info.value.args == (text,)


def test_numpy_integers_are_ints(backend: ModuleType) -> None:
    scheduler = backend.Scheduler(backend.Config(chunk_size=np.uint16(256)))
    scheduler.enqueue(np.int64(7), np.int32(300), cached_tokens=np.uint8(4), priority=np.int8(-2))
    step = scheduler.next_step(np.int64(3))
    assert (step.prefill_request_id, step.prefill_start, step.prefill_tokens) == (7, 4, 256)
    assert step.decode_tokens == 3
    assert np.int64(7) in scheduler
    assert scheduler.state(np.uint64(7)).priority == -2


def test_membership_never_raises(backend: ModuleType) -> None:
    scheduler = _sched(backend)
    assert 1 in scheduler
    for value in (True, -1, BIG, 1.0, "1", None, object()):
        assert value not in scheduler


def test_numpy_bools_are_bools_not_counts(backend: ModuleType) -> None:
    # A numpy bool is no ``bool`` but is just as little a count; the message says the rule
    # instead of showing "got bool: np.True_".
    with pytest.raises(TypeError) as info:
        backend.Config(chunk_size=np.True_)
    assert info.value.args == (message("bool_not_int", name="chunk_size", value=True),)
    assert "np." not in str(info.value)
    assert backend.Config(interleave_decode=np.False_).interleave_decode is False


def test_config_of_the_other_backend_is_named_as_such(backend: ModuleType) -> None:
    import chunked_prefill._core as rust
    import chunked_prefill.pure as pure

    other = pure if backend is rust else rust
    names = {rust: "rust", pure: "pure"}
    text = message(
        "other_backend",
        name="config",
        class_name="Config",
        backend=names[backend],
        module=backend.__name__,
        other=names[other],
        other_module=other.__name__,
    )
    for call in (
        lambda: backend.Scheduler(other.Config()),
        lambda: backend.PrefillChunkState(0, 10).next_chunk_size(other.Config()),
    ):
        with pytest.raises(TypeError) as info:
            call()
        assert info.value.args == (text,)
    assert f"Config of the {names[backend]} backend" in text


def test_chunk_of_the_other_backend_is_named_as_such(backend: ModuleType) -> None:
    import chunked_prefill._core as rust
    import chunked_prefill.pure as pure

    other = pure if backend is rust else rust
    with pytest.raises(TypeError) as info:
        backend.Step(step_index=0, decode_tokens=0, chunks=[other.Chunk(1, 0, 5, True)])
    names = {rust: "rust", pure: "pure"}
    assert str(info.value) == (
        f"each item of chunks must be a Chunk of the {names[backend]} backend"
        f" ({backend.__name__}), got a Chunk of the {names[other]} backend ({other.__name__})"
    )
