"""Request ids of the serving scheduler: an int in ``0..=2**64-1`` or a str, on both backends.

``1`` and ``"1"`` are two requests; ranks are ``(priority, order of add_request)``, never the
id, so a run with str ids plans the very batches a run with int ids plans.
"""

from __future__ import annotations

import pickle
from collections.abc import Hashable, Sequence
from types import ModuleType
from typing import Any

import pytest

from chunked_prefill._validate import message
from serving_invariants import SERVING_BACKENDS, check_batch, check_invariants

# A small pool, so that the run preempts; a shared system prompt, so that it hits the cache.
CONFIG = dict(
    num_blocks=8,
    block_size=4,
    token_budget=24,
    chunk_size=8,
    max_prefills_per_step=2,
    max_running=4,
)
SYSTEM = list(range(100, 112))


@pytest.fixture(params=sorted(SERVING_BACKENDS))
def serving_backend(request: pytest.FixtureRequest) -> ModuleType:
    return SERVING_BACKENDS[request.param]


def _restored(b: ModuleType, s: Any) -> Any:
    """``s`` through its state and back, by way of the other backend."""
    other = SERVING_BACKENDS["pure" if b is SERVING_BACKENDS["rust"] else "rust"]
    state = other.ServingScheduler.from_state(s.to_state()).to_state()
    assert state == s.to_state()
    return b.ServingScheduler.from_state(state)


def lifecycle(b: ModuleType, ids: Sequence[Hashable]) -> list[Any]:
    """A whole run under the request ids ``ids[0..5]``: chunked prefills, decodes, a prefix
    hit, preemptions, an abort while the batch is pending, a finish named in ``update``, a
    state round trip and pickled batches. Returns what the caller sees, step by step."""
    s = b.ServingScheduler(b.ServingConfig(**CONFIG))
    s.add_request(ids[0], [*SYSTEM, 1, 2, 3], 10)
    s.add_request(ids[1], [*SYSTEM, 4, 5], 12, priority=1)
    s.add_request(ids[2], 14, 8)
    s.add_request(ids[3], [*SYSTEM, 6], 6, priority=-1)
    s.add_request(ids[4], list(range(200, 215)), 3)
    s.add_request(ids[5], [*SYSTEM, 7, 8], 9)
    trace: list[Any] = []
    for step in range(100):
        if not len(s):
            break
        if step == 3:
            s = _restored(b, s)
        before = check_invariants(s)
        batch = s.schedule()
        check_batch(s, batch, before)
        if step % 2:
            batch = pickle.loads(pickle.dumps(batch))
        if ids[4] in batch.request_ids and ids[4] in s:
            s.abort(ids[4])  # while its item is pending
        running = ids[2] in s and s.request(ids[2]).num_generated >= 2
        finished = [ids[2]] if running else []
        if step % 3:
            tokens: Any = {rid: 7 + i for i, rid in enumerate(batch.sampling_ids)}
        else:
            tokens = [7 + i for i in range(len(batch.sampling_ids))]
        rows = [
            (i.request_id, i.start, i.tokens, i.is_prefill, i.samples, i.new_blocks)
            for i in batch.items
        ]
        views = [s.request(rid) for rid in batch.request_ids if rid in s]
        done = s.update(batch, token_ids=tokens, finished=finished)
        trace.append((rows, batch.preempted, [(v.request_id, v.state) for v in views], done))
    assert not len(s)
    trace.append((s.num_preemptions, s.num_cached_tokens, s.num_free_blocks))
    return trace


def _renamed(trace: list[Any], names: dict[Any, Any]) -> list[Any]:
    """A ``lifecycle`` trace with every request id ``r`` replaced by ``names[r]``."""
    out: list[Any] = []
    for rows, preempted, views, done in trace[:-1]:
        out.append(
            (
                [(names[r[0]], *r[1:]) for r in rows],
                tuple(names[r] for r in preempted),
                [(names[r], state) for r, state in views],
                [names[r] for r in done],
            )
        )
    return [*out, trace[-1]]


STR_IDS = ["req-a", "req-b", "", "1", "ünïcode", "\ud800"]
INT_IDS = [10, 11, 12, 13, 14, 15]
MIXED_IDS = [0, "0", 2**64 - 1, "seven", 7, "\udc00"]


def test_str_ids_through_a_whole_lifecycle(serving_backend: ModuleType) -> None:
    trace = lifecycle(serving_backend, STR_IDS)
    preemptions, cached, _ = trace[-1]
    assert preemptions > 0 and cached > 0
    assert any(ids for _, ids, _, _ in trace[:-1]), "no batch preempted"
    seen = {row[0] for rows, _, _, _ in trace[:-1] for row in rows}
    assert seen == set(STR_IDS)
    assert all(type(row[0]) is str for rows, _, _, _ in trace[:-1] for row in rows)


def test_int_and_str_ids_plan_the_same_batches(serving_backend: ModuleType) -> None:
    by_int = lifecycle(serving_backend, INT_IDS)
    by_str = lifecycle(serving_backend, STR_IDS)
    assert _renamed(by_int, dict(zip(INT_IDS, STR_IDS))) == by_str
    # Mixed ids, one of them the int equal to no other's text, plan the same too.
    by_mixed = lifecycle(serving_backend, MIXED_IDS)
    assert _renamed(by_int, dict(zip(INT_IDS, MIXED_IDS))) == by_mixed


def test_backends_agree_on_str_ids() -> None:
    traces = [lifecycle(b, MIXED_IDS) for b in SERVING_BACKENDS.values()]
    assert traces[0] == traces[1]


def test_int_and_str_of_one_text_are_two_requests(serving_backend: ModuleType) -> None:
    b = serving_backend
    s = b.ServingScheduler(b.ServingConfig(num_blocks=8, block_size=4))
    s.add_request(1, [1, 2, 3], 2)
    s.add_request("1", [1, 2, 3], 2)
    assert len(s) == 2 and 1 in s and "1" in s and "2" not in s and 1.0 not in s
    batch = s.schedule()
    assert batch.request_ids == (1, "1")
    assert repr(batch.items[1]).startswith("BatchItem(request_id='1', start=0")
    assert s.update(batch, token_ids={"1": 5, 1: 6}, finished=[1, "1"]) == [1, "1"]
    assert len(s) == 0


def test_repr_quotes_str_ids(serving_backend: ModuleType) -> None:
    b = serving_backend
    s = b.ServingScheduler(b.ServingConfig(num_blocks=8, block_size=4))
    s.add_request("a'b", [1, 2, 3], 2)
    batch = s.schedule()
    assert repr(batch) == (
        """Batch(step_index=0, items=(BatchItem(request_id="a'b", start=0, tokens=3, """
        "is_prefill=True, samples=True, new_blocks=(0,), cached_tokens=0),), preempted=(), "
        "num_prefill_tokens=3, num_decode_tokens=0, num_free_blocks=7)"
    )
    assert repr(s.request("a'b")).startswith("""RequestView(request_id="a'b", state=""")


def test_str_subclass_comes_back_as_str(serving_backend: ModuleType) -> None:
    class Name(str):
        def __hash__(self) -> int:
            return 0

    b = serving_backend
    s = b.ServingScheduler(b.ServingConfig(num_blocks=8, block_size=4))
    s.add_request(Name("x"), [1, 2], 2)
    assert "x" in s and Name("x") in s
    (rid,) = s.schedule().request_ids
    assert type(rid) is str and rid == "x"
    item = b.BatchItem(
        request_id=Name("y"),
        start=0,
        tokens=1,
        is_prefill=True,
        samples=False,
        new_blocks=(),
        cached_tokens=0,
    )
    assert type(item.request_id) is str


def test_a_batch_built_in_python_is_the_pending_one(serving_backend: ModuleType) -> None:
    b = serving_backend
    config = b.ServingConfig(num_blocks=3, block_size=4, token_budget=16, max_running=4)
    s = b.ServingScheduler(config)
    s.add_request("hi", [1, 2, 3], 4)
    s.add_request("lo", [6, 7, 8], 4, priority=1)
    batch = s.schedule()
    while not batch.preempted:
        s.update(batch, token_ids=[9] * len(batch.sampling_ids))
        batch = s.schedule()
    assert batch.preempted == ("lo",)
    copy = b.Batch(
        step_index=batch.step_index,
        items=[
            b.BatchItem(
                request_id=i.request_id,
                start=i.start,
                tokens=i.tokens,
                is_prefill=i.is_prefill,
                samples=i.samples,
                new_blocks=i.new_blocks,
                cached_tokens=i.cached_tokens,
            )
            for i in batch.items
        ],
        preempted=["lo"],
        num_free_blocks=batch.num_free_blocks,
    )
    assert copy == batch and hash(copy) == hash(batch)
    other = b.Batch(
        step_index=batch.step_index,
        items=batch.items,
        preempted=["lo2"],
        num_free_blocks=batch.num_free_blocks,
    )
    assert other != batch
    with pytest.raises(RuntimeError, match="not the pending batch"):
        s.update(other)
    # The preempted request has no item: aborting it frees its id at once.
    s.abort("lo")
    s.add_request("lo", [6, 7, 8], 4, priority=1)
    s.update(copy, token_ids={"hi": 3})
    assert s.request("hi").num_generated == 3


def test_abort_while_pending_keeps_the_id_until_update(serving_backend: ModuleType) -> None:
    b = serving_backend
    s = b.ServingScheduler(b.ServingConfig(num_blocks=8, block_size=4))
    s.add_request("a", [1, 2, 3], 2)
    batch = s.schedule()
    s.abort("a")
    assert "a" not in s
    with pytest.raises(ValueError) as info:
        s.add_request("a", [1], 1)
    assert info.value.args[0] == message("request_pending", request_id="'a'", step_index=0)
    with pytest.raises(KeyError) as key:
        s.abort("a")
    assert key.value.args[0] == message("unknown_request", request_id="'a'")
    interned = getattr(s, "_num_request_ids", None)  # the Rust binding's id map
    assert interned in (None, 1)
    # The aborted item's token is still checked, and then skipped.
    assert s.update(batch, token_ids={"a": 5}) == []
    assert getattr(s, "_num_request_ids", 0) == 0
    s.add_request("a", [1], 1)
    assert "a" in s


BAD_IDS = [True, False, 1.0, b"a", bytearray(b"a"), None, [1], ("a",), object, -1, 2**64]


def _errors(b: ModuleType, value: Any) -> list[tuple[type[BaseException], tuple[Any, ...]]]:
    """What each call that takes a request id raises for ``value``, leaving ``s`` as it was."""
    s = b.ServingScheduler(b.ServingConfig(num_blocks=8, block_size=4))
    s.add_request(5, [1, 2], 2)
    batch = s.schedule()
    calls = [
        lambda: s.add_request(value, [1, 2], 2),
        lambda: s.abort(value),
        lambda: s.request(value),
        lambda: s.block_table(value),
        lambda: s.update(batch, finished=[5, value]),
        lambda: b.Batch(step_index=0, items=(), preempted=[value], num_free_blocks=0),
    ]
    if isinstance(value, Hashable):
        calls.append(lambda: s.update(batch, token_ids={value: 1}))
    errors = []
    for call in calls:
        with pytest.raises(Exception) as info:
            call()
        errors.append((type(info.value), info.value.args))
    assert value not in s and len(s) == 1
    return errors


@pytest.mark.parametrize("value", BAD_IDS, ids=repr)
def test_bad_ids_same_error_on_both_backends(value: Any) -> None:
    errors = [e for b in SERVING_BACKENDS.values() for e in _errors(b, value)]
    half = len(errors) // 2
    assert errors[:half] == errors[half:]
    if isinstance(value, int) and not isinstance(value, bool):  # out of range, as before
        assert errors[0][0] in (ValueError, OverflowError)
        return
    if isinstance(value, bool):
        text = message("bool_not_request_id", name="request_id", value=value)
    else:
        kind = type(value).__name__
        text = message("not_request_id", name="request_id", type_name=kind, value_repr=repr(value))
        texts = [args[0] for _, args in errors[:half]]
        for name in ("finished[1]", "preempted[0]"):
            assert f"{name} must be an int or a str, got {kind}: {value!r}" in texts
    assert errors[0] == (TypeError, (text,))


def test_state_round_trips_str_ids(serving_backend: ModuleType) -> None:
    b = serving_backend
    s = b.ServingScheduler(b.ServingConfig(num_blocks=8, block_size=4))
    for rid in MIXED_IDS[:4]:
        s.add_request(rid, [1, 2, 3, 4, 5], 3)
    s.update(s.schedule(), token_ids=None)
    state = s.to_state()
    assert [r["request_id"] for r in state["requests"]] == MIXED_IDS[:4]
    for other in SERVING_BACKENDS.values():
        restored = other.ServingScheduler.from_state(state)
        assert restored.to_state() == state
        assert pickle.loads(pickle.dumps(restored)).to_state() == state
        assert [restored.request(rid).request_id for rid in MIXED_IDS[:4]] == MIXED_IDS[:4]
    state["requests"][1]["request_id"] = 0
    with pytest.raises(ValueError, match=r"request_id 0 is already tracked"):
        b.ServingScheduler.from_state(state)
    state["requests"][1]["request_id"] = b"0"
    with pytest.raises(TypeError, match="must be an int or a str, got bytes"):
        b.ServingScheduler.from_state(state)


def test_ids_are_not_kept_after_requests_leave(serving_backend: ModuleType) -> None:
    b = serving_backend
    s = b.ServingScheduler(b.ServingConfig(num_blocks=16, block_size=4))
    for i in range(10_000):
        s.add_request(f"req-{i}", [i % 50, 1, 2], 1)
        if i % 3 == 0:
            s.add_request(i, 2, 5)
            s.abort(i)
        batch = s.schedule()
        if i % 5 == 0 and f"req-{i}" in s:
            s.abort(f"req-{i}")  # its item is pending: the id is released at update
        s.update(batch, token_ids=None)
        assert len(s) == 0
    if hasattr(s, "_num_request_ids"):  # the Rust binding's id map
        assert s._num_request_ids == 0
