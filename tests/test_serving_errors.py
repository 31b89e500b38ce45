"""The serving scheduler's rejection table: every bad input, its class and its message.

Each row runs on every backend that has ``ServingScheduler``; the message comes from the
shared table (``_messages.json``). A refused call changes nothing: the scheduler's repr and
``to_state()`` are the same afterwards, and with a batch pending, the views are the same and
the scheduler then behaves exactly like one that never saw the refused call.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from chunked_prefill._validate import message
from serving_invariants import SERVING_BACKENDS, check_invariants

BIG = 2**64


@pytest.fixture(params=sorted(SERVING_BACKENDS))
def serving_backend(request: pytest.FixtureRequest) -> ModuleType:
    """A backend module that has ``ServingScheduler``."""
    return SERVING_BACKENDS[request.param]


def make(b: ModuleType, **config: Any) -> Any:
    cfg = {"num_blocks": 8, "block_size": 4, "token_budget": 16, "max_running": 2}
    return b.ServingScheduler(b.ServingConfig(**{**cfg, **config}))


def idle(b: ModuleType) -> tuple[Any, Any]:
    """1 and 2 running after one step (1 with a known prompt), 3 waiting; nothing pending."""
    s = make(b)
    s.add_request(1, [1, 2, 3, 4, 5], 4)
    s.add_request(2, 6, 4)
    s.add_request(3, 3, 2)
    s.update(s.schedule(), token_ids=[7, 8])
    return s, None


def pending(b: ModuleType) -> tuple[Any, Any]:
    """:func:`idle`, then a planned batch (decodes of 1 and 2, both sampling) awaiting update."""
    s, _ = idle(b)
    return s, s.schedule()


Call = Callable[[ModuleType, Any, Any], Any]
Row = tuple[str, Callable[[ModuleType], tuple[Any, Any]], Call, type[Exception], str]


def not_int(name: str, value: Any) -> tuple[type[Exception], str]:
    if isinstance(value, bool):  # a bool is refused with its own rule
        return TypeError, message("bool_not_int", name=name, value=value)
    return TypeError, message(
        "not_int", name=name, type_name=type(value).__name__, value_repr=repr(value)
    )


def int_rows(
    name: str, setup: Any, call: Callable[[Any, Any, Any, Any], Any], tag: str = ""
) -> list[Row]:
    """The ways an unsigned 64-bit argument can be wrong."""
    rows: list[Row] = []
    for value in (True, 2.0, "3", None):
        exc, text = not_int(name, value)
        rows.append((f"{name}{tag}-{type(value).__name__}", setup, _bind(call, value), exc, text))
    rows.append(
        (
            f"{name}{tag}-negative",
            setup,
            _bind(call, -1),
            ValueError,
            message("negative", name=name, value=-1),
        )
    )
    rows.append(
        (
            f"{name}{tag}-big",
            setup,
            _bind(call, BIG),
            OverflowError,
            message("above_u64", name=name, value=BIG),
        )
    )
    return rows


def not_id(name: str, value: Any) -> tuple[type[Exception], str]:
    """A request id's type error: an id is an int or a str (a bool is neither)."""
    if isinstance(value, bool):
        return TypeError, message("bool_not_request_id", name=name, value=value)
    return TypeError, message(
        "not_request_id", name=name, type_name=type(value).__name__, value_repr=repr(value)
    )


def id_rows(
    name: str, setup: Any, call: Callable[[Any, Any, Any, Any], Any], tag: str = ""
) -> list[Row]:
    """The ways a request id can be wrong: not an int or a str, or an int out of range (a
    str such as ``"3"`` is an id of its own, distinct from ``3``)."""
    rows: list[Row] = []
    for value in (True, 2.0, b"3", None):
        exc, text = not_id(name, value)
        rows.append((f"{name}{tag}-{type(value).__name__}", setup, _bind(call, value), exc, text))
    return rows + int_rows(name, setup, call, tag)[-2:]


def _bind(call: Callable[[Any, Any, Any, Any], Any], value: Any) -> Call:
    return lambda b, s, x: call(b, s, x, value)


def cfg_call(field: str) -> Callable[[Any, Any, Any, Any], Any]:
    return lambda b, s, x, v: b.ServingConfig(**{"num_blocks": 8, field: v})


def add(**kw: Any) -> Call:
    args = {"request_id": 9, "prompt": [1, 2], "max_new_tokens": 2, **kw}
    return lambda b, s, x: s.add_request(
        args["request_id"],
        args["prompt"],
        args["max_new_tokens"],
        **{k: v for k, v in args.items() if k in ("priority", "cache_salt")},
    )


def token_range(name: str, value: int) -> tuple[type[Exception], str]:
    return ValueError, message("token_id_range", name=name, value=value)


def prompt_type(value: Any) -> str:
    return message("prompt_type", type_name=type(value).__name__, value_repr=repr(value))


def never_fits(plen: int, max_new: int, watermark_blocks: int = 0) -> str:
    needed = math.ceil((plen + max_new - 1) / 4)
    return message(
        "request_never_fits",
        request_id=9,
        prompt_tokens=plen,
        max_new_tokens=max_new,
        needed=needed,
        block_size=4,
        usable=8 - watermark_blocks,
        num_blocks=8,
        watermark_blocks=watermark_blocks,
    )


def upd(token_ids: Any = None, finished: Any = ()) -> Call:
    return lambda b, s, batch: s.update(batch, token_ids=token_ids, finished=finished)


ROWS: list[Row] = []
COUNTS = ("num_blocks", "block_size", "token_budget", "chunk_size", "max_prefills_per_step")
for _field in (*COUNTS, "max_running"):
    ROWS += int_rows(_field, idle, cfg_call(_field))
    if _field != "num_blocks":
        ROWS.append(
            (
                f"{_field}-zero",
                idle,
                _bind(cfg_call(_field), 0),
                ValueError,
                message("count_zero", name=_field, value=0),
            )
        )
ROWS += [
    (
        "num_blocks-zero",
        idle,
        lambda b, s, x: b.ServingConfig(num_blocks=0),
        ValueError,
        message("count_zero", name="num_blocks", value=0),
    ),
    (
        "types-before-rules",
        idle,
        lambda b, s, x: b.ServingConfig(num_blocks=0, prefix_caching=1),
        TypeError,
        message("not_bool", name="prefix_caching", type_name="int", value_repr="1"),
    ),
    (
        "max_running-too-large",
        idle,
        lambda b, s, x: b.ServingConfig(num_blocks=8, token_budget=8, max_running=8),
        ValueError,
        message("max_running_too_large", token_budget=8, max_running=8),
    ),
    (
        "max_running-default-vs-budget",
        idle,
        lambda b, s, x: b.ServingConfig(num_blocks=8, token_budget=256),
        ValueError,
        message("max_running_too_large", token_budget=256, max_running=256),
    ),
]
for _wm, _exc, _text in (
    (True, TypeError, message("not_number", name="watermark", type_name="bool", value_repr="True")),
    (
        "0.1",
        TypeError,
        message("not_number", name="watermark", type_name="str", value_repr="'0.1'"),
    ),
    (
        None,
        TypeError,
        message("not_number", name="watermark", type_name="NoneType", value_repr="None"),
    ),
    (-0.1, ValueError, message("watermark_range", value="-0.1")),
    (1, ValueError, message("watermark_range", value="1.0")),
    (1.0, ValueError, message("watermark_range", value="1.0")),
    (math.nan, ValueError, message("watermark_range", value="nan")),
    (math.inf, ValueError, message("watermark_range", value="inf")),
):
    ROWS.append(
        (
            f"watermark-{_wm!r}",
            idle,
            lambda b, s, x, v=_wm: b.ServingConfig(num_blocks=8, watermark=v),
            _exc,
            _text,
        )
    )
ROWS += [
    (
        "prefix_caching-int",
        idle,
        lambda b, s, x: b.ServingConfig(num_blocks=8, prefix_caching=0),
        TypeError,
        message("not_bool", name="prefix_caching", type_name="int", value_repr="0"),
    ),
    (
        "config-unknown-keyword",
        idle,
        lambda b, s, x: b.ServingConfig(num_blocks=8, max_num_seqs=4),
        TypeError,
        message("unexpected_keyword", owner="ServingConfig", name="max_num_seqs"),
    ),
    (
        "replace-unknown-keyword",
        idle,
        lambda b, s, x: s.config.replace(blocks=4),
        TypeError,
        message("unexpected_keyword", owner="ServingConfig.replace", name="blocks"),
    ),
    (
        "replace-checks",
        idle,
        lambda b, s, x: s.config.replace(watermark=2),
        ValueError,
        message("watermark_range", value="2.0"),
    ),
    (
        "scheduler-config",
        idle,
        lambda b, s, x: b.ServingScheduler({"num_blocks": 8}),
        TypeError,
        message(
            "not_serving_config", name="config", type_name="dict", value_repr="{'num_blocks': 8}"
        ),
    ),
]
ROWS += id_rows("request_id", idle, lambda b, s, x, v: add(request_id=v)(b, s, x))
for _p in (True, "abc", b"\x01", bytearray(b"\x01"), 1.5, {1, 2}, None, {1: 2}):
    ROWS.append((f"prompt-{type(_p).__name__}", idle, add(prompt=_p), TypeError, prompt_type(_p)))
ROWS += [
    (
        "prompt-negative",
        idle,
        add(prompt=-1),
        ValueError,
        message("negative", name="prompt", value=-1),
    ),
    (
        "prompt-big",
        idle,
        add(prompt=BIG),
        OverflowError,
        message("above_u64", name="prompt", value=BIG),
    ),
    ("prompt-token-negative", idle, add(prompt=[1, -1]), *token_range("prompt[1]", -1)),
    ("prompt-token-big", idle, add(prompt=[2**32]), *token_range("prompt[0]", 2**32)),
    ("prompt-token-above-u64", idle, add(prompt=[BIG]), *token_range("prompt[0]", BIG)),
    ("prompt-token-bool", idle, add(prompt=[1, True]), *not_int("prompt[1]", True)),
    ("prompt-token-float", idle, add(prompt=(1.0,)), *not_int("prompt[0]", 1.0)),
    ("prompt-numpy-negative", idle, add(prompt=np.array([1, -5])), *token_range("prompt[1]", -5)),
    (
        "prompt-numpy-big",
        idle,
        add(prompt=np.array([3, 2**32], dtype=np.uint64)),
        *token_range("prompt[1]", 2**32),
    ),
    (
        "prompt-numpy-float",
        idle,
        add(prompt=np.array([1.0])),
        *not_int("prompt[0]", np.float64(1.0)),
    ),
    ("prompt-empty", idle, add(prompt=[]), ValueError, message("prompt_empty")),
    (
        "prompt-empty-numpy",
        idle,
        add(prompt=np.array([], dtype=np.int64)),
        ValueError,
        message("prompt_empty"),
    ),
    ("prompt-zero", idle, add(prompt=0), ValueError, message("prompt_empty")),
    (
        "max_new_tokens-zero",
        idle,
        add(max_new_tokens=0),
        ValueError,
        message("max_new_tokens_zero"),
    ),
    (
        "empty-before-zero",
        idle,
        add(prompt=[], max_new_tokens=0),
        ValueError,
        message("prompt_empty"),
    ),
    (
        "id-before-prompt",
        idle,
        add(request_id=-1, prompt="x"),
        ValueError,
        message("negative", name="request_id", value=-1),
    ),
    (
        "priority-high",
        idle,
        add(priority=2**63),
        OverflowError,
        message("outside_i64", name="priority", value=2**63),
    ),
    (
        "priority-low",
        idle,
        add(priority=-(2**63) - 1),
        OverflowError,
        message("outside_i64", name="priority", value=-(2**63) - 1),
    ),
    ("priority-bool", idle, add(priority=False), *not_int("priority", False)),
    ("duplicate", idle, add(request_id=3), ValueError, message("serving_duplicate", request_id=3)),
    (
        "duplicate-before-fit",
        idle,
        add(request_id=1, prompt=99),
        ValueError,
        message("serving_duplicate", request_id=1),
    ),
    ("never-fits", idle, add(prompt=30, max_new_tokens=4), ValueError, never_fits(30, 4)),
    (
        "never-fits-watermark",
        lambda b: (make(b, watermark=0.25), None),
        add(prompt=22, max_new_tokens=4),
        ValueError,
        never_fits(22, 4, 2),
    ),
]
ROWS += int_rows("max_new_tokens", idle, lambda b, s, x, v: add(max_new_tokens=v)(b, s, x))
ROWS += int_rows("cache_salt", idle, lambda b, s, x, v: add(cache_salt=v)(b, s, x))


def _pending_readd(b: ModuleType) -> tuple[Any, Any]:
    s, batch = pending(b)
    s.abort(2)
    return s, batch


ROWS += [
    (
        "request-pending",
        _pending_readd,
        lambda b, s, x: s.add_request(2, 6, 4),
        ValueError,
        message("request_pending", request_id=2, step_index=1),
    ),
    (
        "schedule-pending",
        pending,
        lambda b, s, x: s.schedule(),
        RuntimeError,
        message("batch_pending", step_index=1),
    ),
    (
        "to_state-pending",
        pending,
        lambda b, s, x: s.to_state(),
        RuntimeError,
        message("state_batch_pending", step_index=1),
    ),
]


def _not_batch(b: ModuleType, s: Any, x: Any) -> Any:
    return s.update("batch 1")


ROWS += [
    (
        "update-not-batch",
        pending,
        _not_batch,
        TypeError,
        message("not_batch", name="batch", type_name="str", value_repr="'batch 1'"),
    ),
    (
        "update-not-pending",
        idle,
        lambda b, s, x: s.update(
            b.Batch(step_index=0, items=(), preempted=(), num_free_blocks=4), token_ids="x"
        ),
        RuntimeError,
        message("batch_not_pending", got=0),
    ),
    (
        "update-stale",
        pending,
        lambda b, s, x: s.update(
            b.Batch(step_index=0, items=x.items, preempted=(), num_free_blocks=4), token_ids="x"
        ),
        RuntimeError,
        message("batch_stale", got=0, expected=1),
    ),
    (
        "update-same-index-other-items",
        pending,
        lambda b, s, x: s.update(
            b.Batch(step_index=1, items=x.items[:1], preempted=(), num_free_blocks=4)
        ),
        RuntimeError,
        message("batch_stale", got=1, expected=1),
    ),
]
for _t in ("ab", b"ab", 5, 1.5, {1, 2}):
    ROWS.append(
        (
            f"token_ids-{type(_t).__name__}",
            pending,
            upd(token_ids=_t),
            TypeError,
            message(
                "token_ids_type",
                name="token_ids",
                type_name=type(_t).__name__,
                value_repr=repr(_t),
            ),
        )
    )
ROWS += [
    (
        "token_ids-short",
        pending,
        upd(token_ids=[1]),
        ValueError,
        message("token_ids_length", expected=2, got=1),
    ),
    (
        "token_ids-long",
        pending,
        upd(token_ids=(1, 2, 3)),
        ValueError,
        message("token_ids_length", expected=2, got=3),
    ),
    ("token_ids-negative", pending, upd(token_ids=[1, -1]), *token_range("token_ids[1]", -1)),
    ("token_ids-big", pending, upd(token_ids=[2**32, 1]), *token_range("token_ids[0]", 2**32)),
    (
        "token_ids-numpy",
        pending,
        upd(token_ids=np.array([1, 2**40])),
        *token_range("token_ids[1]", 2**40),
    ),
    ("token_ids-bool", pending, upd(token_ids=[1, True]), *not_int("token_ids[1]", True)),
    (
        "token_ids-not-sampled",
        pending,
        upd(token_ids={1: 5, 3: 6}),
        ValueError,
        message("token_ids_not_sampled", request_id=3, step_index=1),
    ),
    ("token_ids-map-value", pending, upd(token_ids={2: -1}), *token_range("token_ids[2]", -1)),
    (
        "token_ids-map-key-str",  # "1" is not 1, which sampled
        pending,
        upd(token_ids={"1": 5}),
        ValueError,
        message("token_ids_not_sampled", request_id="'1'", step_index=1),
    ),
    ("token_ids-map-key", pending, upd(token_ids={1.0: 5}), *not_id("token_ids key", 1.0)),
    (
        "token_ids-map-key-negative",
        pending,
        upd(token_ids={-1: 5}),
        ValueError,
        message("negative", name="token_ids key", value=-1),
    ),
    ("finished-bool", pending, upd(finished=[True]), *not_id("finished[0]", True)),
    (
        "finished-str-unknown",  # "1" is not 1, which is tracked
        pending,
        upd(finished=[1, "1"]),
        KeyError,
        message("unknown_request", request_id="'1'"),
    ),
    (
        "finished-negative",
        pending,
        upd(finished=[1, -1]),
        ValueError,
        message("negative", name="finished[1]", value=-1),
    ),
    (
        "finished-duplicate",
        pending,
        upd(finished=[99, 1, 2, 1]),
        ValueError,
        message("finished_duplicate", request_id=1),
    ),
    (
        "finished-unknown",
        pending,
        upd(finished=[1, 99]),
        KeyError,
        message("unknown_request", request_id=99),
    ),
    (
        "token_ids-before-finished",
        pending,
        upd(token_ids=[1], finished=[1, 1]),
        ValueError,
        message("token_ids_length", expected=2, got=1),
    ),
]


def _aborted_token(b: ModuleType) -> tuple[Any, Any]:
    s, batch = pending(b)
    s.abort(1)
    return s, batch


ROWS.append(
    (
        "token_ids-of-aborted-item-checked",
        _aborted_token,
        upd(token_ids=[2**32, 5]),
        *token_range("token_ids[0]", 2**32),
    )
)
for _method in ("abort", "request", "block_table"):
    ROWS += id_rows(
        "request_id", idle, lambda b, s, x, v, m=_method: getattr(s, m)(v), f"@{_method}"
    )
    ROWS.append(
        (
            f"{_method}-str-unknown",  # "3" is not 3, which is tracked
            idle,
            lambda b, s, x, m=_method: getattr(s, m)("3"),
            KeyError,
            message("unknown_request", request_id="'3'"),
        )
    )
    ROWS.append(
        (
            f"{_method}-unknown",
            idle,
            lambda b, s, x, m=_method: getattr(s, m)(42),
            KeyError,
            message("unknown_request", request_id=42),
        )
    )
ROWS += [
    (
        "batch-item",
        idle,
        lambda b, s, x: b.Batch(step_index=0, items=[1], preempted=(), num_free_blocks=0),
        TypeError,
        message("not_batch_item", name="items", type_name="int", value_repr="1"),
    ),
    (
        "batchitem-bool",
        idle,
        lambda b, s, x: b.BatchItem(
            request_id=1,
            start=0,
            tokens=1,
            is_prefill=1,
            samples=True,
            new_blocks=(),
            cached_tokens=0,
        ),
        TypeError,
        message("not_bool", name="is_prefill", type_name="int", value_repr="1"),
    ),
]


def snapshot(s: Any, batch: Any) -> Any:
    ids = [r for r in range(1, 4) if r in s]
    return (
        repr(s),
        len(s),
        s.num_free_blocks,
        s.step_index,
        [(s.request(r), s.block_table(r)) for r in ids],
        None if batch is not None else s.to_state(),
    )


@pytest.mark.parametrize("row", ROWS, ids=[r[0] for r in ROWS])
def test_rejected(serving_backend: ModuleType, row: Row) -> None:
    _, setup, call, exc, text = row
    s, batch = setup(serving_backend)
    before = snapshot(s, batch)
    with pytest.raises(exc) as info:
        call(serving_backend, s, batch)
    assert type(info.value) is exc
    assert info.value.args[0] == text
    assert snapshot(s, batch) == before
    if batch is None:
        check_invariants(s)
        return
    # The refused call left the batch pending: finishing it gives exactly the state of a
    # scheduler that never saw the refused call.
    reference, ref_batch = setup(serving_backend)
    assert ref_batch == batch
    assert s.update(batch, token_ids={2: 9}) == reference.update(ref_batch, token_ids={2: 9})
    assert s.to_state() == reference.to_state()
    check_invariants(s)


def test_refused_update_keeps_abort(serving_backend: ModuleType) -> None:
    s, batch = _aborted_token(serving_backend)
    with pytest.raises(ValueError):
        s.update(batch, token_ids=[2**32, 5])
    # 1 stays aborted and its item is still skipped; its id still cannot come back.
    with pytest.raises(ValueError, match="pending batch 1"):
        s.add_request(1, 3, 1)
    assert s.update(batch, token_ids=[4, 5]) == []
    assert 1 not in s and s.request(2).num_generated == 2


def test_second_update_is_refused(serving_backend: ModuleType) -> None:
    s, batch = pending(serving_backend)
    s.update(batch)
    with pytest.raises(RuntimeError) as info:
        s.update(batch)
    assert info.value.args[0] == message("batch_not_pending", got=1)
    # An empty batch awaits its update too.
    s2 = make(serving_backend)
    empty = s2.schedule()
    assert len(empty) == 0 and empty.step_index == 0
    with pytest.raises(RuntimeError) as info:
        s2.schedule()
    assert info.value.args[0] == message("batch_pending", step_index=0)
    assert s2.update(empty) == [] and s2.step_index == 1


def test_membership_never_raises(serving_backend: ModuleType) -> None:
    s, _ = idle(serving_backend)
    assert 1 in s and 4 not in s
    for value in (True, -1, BIG, "1", None, 1.0):
        assert value not in s


def _rule(path: str, key: str, **fields: Any) -> str:
    return message("state_rule", path=path, message=message(key, **fields))


R0 = "state['requests'][0]"
STATE_ROWS: list[tuple[str, Callable[[dict[str, Any]], Any], type[Exception], str]] = [
    (
        "version",
        lambda st: st.update(version=2),
        ValueError,
        message("state_version", value_repr="2"),
    ),
    (
        "kind",
        lambda st: st.update(kind="planner"),
        ValueError,
        message("state_kind", value_repr="'planner'"),
    ),
    (
        "missing-key",
        lambda st: st.pop("free_queue"),
        ValueError,
        message("state_missing_key", path="state", key="free_queue"),
    ),
    (
        "config-rule",
        lambda st: st["config"].update(watermark=1.0),
        ValueError,
        message(
            "state_rule", path="state['config']", message=message("watermark_range", value="1.0")
        ),
    ),
    (
        "token-range",
        lambda st: st["requests"][0]["tokens"].__setitem__(2, -3),
        ValueError,
        message("token_id_range", name=f"{R0}['tokens'][2]", value=-3),
    ),
    (
        "duplicate-id",
        lambda st: st["requests"][2].update(request_id=1),
        ValueError,
        _rule("state['requests'][2]['request_id']", "serving_duplicate", request_id=1),
    ),
    (
        "finished",
        lambda st: st["requests"][0].update(max_new_tokens=1),
        ValueError,
        _rule(R0, "state_finished", num_generated=1, max_new_tokens=1),
    ),
    (
        "request-state",
        lambda st: st["requests"][2].update(state="done"),
        ValueError,
        _rule("state['requests'][2]['state']", "state_request_state", value_repr="'done'"),
    ),
    (
        "waiting-computed",
        lambda st: st["requests"][2].update(num_computed=1),
        ValueError,
        _rule("state['requests'][2]['num_computed']", "state_num_computed", num_tokens=3, value=1),
    ),
    (
        "table-size",
        lambda st: st["requests"][0].update(block_table=[0]),
        ValueError,
        _rule(
            f"{R0}['block_table']",
            "state_table_size",
            num_computed=5,
            block_size=4,
            expected=2,
            got=1,
        ),
    ),
    (
        "block-range",
        lambda st: st["requests"][0].update(block_table=[0, 8]),
        ValueError,
        _rule(f"{R0}['block_table'][1]", "state_block_range", block=8, num_blocks=8),
    ),
    (
        "free-and-held",
        lambda st: st["free_queue"].append(0),
        ValueError,
        _rule("state['free_queue'][4]", "state_block_free_and_held", block=0),
    ),
    (
        "lost",
        lambda st: st["free_queue"].remove(5),
        ValueError,
        _rule("state['free_queue']", "state_block_lost", block=5),
    ),
    (
        "hash-hex",
        lambda st: st["block_hashes"][0].__setitem__(1, "XY"),
        ValueError,
        _rule("state['block_hashes'][0][1]", "state_hash_hex", value_repr="'XY'"),
    ),
    (
        "hash-twice",
        lambda st: st["block_hashes"].append([5, st["block_hashes"][0][1]]),
        ValueError,
        _rule(
            "state['block_hashes'][1][1]",
            "state_hash_twice",
            hash="PLACEHOLDER",
            first=0,
            second=5,
        ),
    ),
]


@pytest.mark.parametrize("row", STATE_ROWS, ids=[r[0] for r in STATE_ROWS])
def test_from_state_rejected(serving_backend: ModuleType, row: Any) -> None:
    _, change, exc, text = row
    s, _ = idle(serving_backend)
    state = s.to_state()
    assert serving_backend.ServingScheduler.from_state(state).to_state() == state
    change(state)
    if "PLACEHOLDER" in text:
        text = text.replace("PLACEHOLDER", state["block_hashes"][0][1])
    with pytest.raises(exc) as info:
        serving_backend.ServingScheduler.from_state(state)
    assert type(info.value) is exc
    assert info.value.args[0] == text
