"""The serving scheduler's API details: exact reprs, numpy prompts, prompts given as lengths,
user code that calls back into the scheduler while its arguments are converted, and threads.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import chunked_prefill
import chunked_prefill.pure_serving as P
from chunked_prefill._validate import message
from serving_invariants import SERVING_BACKENDS, check_invariants


@pytest.fixture(params=sorted(SERVING_BACKENDS))
def serving_backend(request: pytest.FixtureRequest) -> ModuleType:
    """A backend module that has ``ServingScheduler``."""
    return SERVING_BACKENDS[request.param]


def make(b: ModuleType, **config: Any) -> Any:
    cfg = {"num_blocks": 8, "block_size": 4, "token_budget": 16, "max_running": 2, **config}
    return b.ServingScheduler(b.ServingConfig(**cfg))


def test_exports() -> None:
    for name in ("ServingConfig", "ServingScheduler", "Batch", "BatchItem", "RequestView"):
        assert name in chunked_prefill.__all__
        assert getattr(chunked_prefill, name).__doc__


def test_reprs(serving_backend: ModuleType) -> None:
    b = serving_backend
    cfg = b.ServingConfig(num_blocks=64)
    assert repr(cfg) == (
        "ServingConfig(num_blocks=64, block_size=16, token_budget=2048, chunk_size=512,"
        " max_prefills_per_step=4, max_running=256, watermark=0.0, prefix_caching=True)"
    )
    assert cfg.to_dict()["watermark"] == 0.0 and repr(cfg.replace(watermark=0)) == repr(cfg)
    s = make(b)
    assert repr(s) == (
        "ServingScheduler(config=ServingConfig(num_blocks=8, block_size=4, token_budget=16,"
        " chunk_size=512, max_prefills_per_step=4, max_running=2, watermark=0.0,"
        " prefix_caching=True), running=0, waiting=0, free_blocks=8, next_step_index=0)"
    )
    empty = s.schedule()
    assert repr(empty) == (
        "Batch(step_index=0, items=(), preempted=(), num_prefill_tokens=0,"
        " num_decode_tokens=0, num_free_blocks=8)"
    )
    s.update(empty)
    s.add_request(7, 5, 2)
    one = s.schedule()
    item = (
        "BatchItem(request_id=7, start=0, tokens=5, is_prefill=True, samples=True,"
        " new_blocks=(0, 1), cached_tokens=0)"
    )
    assert repr(one.items[0]) == item
    assert repr(one) == (
        f"Batch(step_index=1, items=({item},), preempted=(), num_prefill_tokens=5,"
        " num_decode_tokens=0, num_free_blocks=6)"
    )
    assert repr(s.request(7)) == (
        "RequestView(request_id=7, state='running', num_tokens=5, num_computed=0,"
        " num_generated=0, max_new_tokens=2, priority=0, num_preemptions=0,"
        " num_cached_tokens=0)"
    )
    s.update(one)
    s.add_request(8, 4, 1)
    two = s.schedule()
    assert repr(two.items[0].new_blocks) == "()" and repr(two.items[1].new_blocks) == "(2,)"
    assert repr(s) == (
        "ServingScheduler(config=ServingConfig(num_blocks=8, block_size=4, token_budget=16,"
        " chunk_size=512, max_prefills_per_step=4, max_running=2, watermark=0.0,"
        " prefix_caching=True), running=2, waiting=0, free_blocks=5, next_step_index=3)"
    )


def test_values_are_frozen_and_hashable(serving_backend: ModuleType) -> None:
    b = serving_backend
    cfg = b.ServingConfig(num_blocks=8, token_budget=16, max_running=2)
    assert cfg == b.ServingConfig(num_blocks=8, token_budget=16, max_running=2, watermark=0)
    assert len({cfg, cfg.replace(), cfg.replace(block_size=8)}) == 2
    s = b.ServingScheduler(cfg)
    s.add_request(1, 3, 1)
    batch = s.schedule()
    for value, attr in ((cfg, "num_blocks"), (batch, "step_index"), (batch.items[0], "start")):
        with pytest.raises(AttributeError):
            setattr(value, attr, 1)
        hash(value)
    assert s.request(1) == s.request(1) and len(batch) == 1
    assert (batch.request_ids, batch.starts, batch.token_counts) == ((1,), (0,), (3,))


def test_numpy_prompt_is_a_list_prompt(serving_backend: ModuleType) -> None:
    states = []
    for prompt in (
        [5, 6, 7, 8, 9],
        (5, 6, 7, 8, 9),
        np.array([5, 6, 7, 8, 9], dtype=np.int32),
        np.array([5, 6, 7, 8, 9], dtype=np.uint64),
        [np.int64(5), 6, 7, 8, np.uint8(9)],
        range(5, 10),
    ):
        s = make(serving_backend)
        s.add_request(np.uint16(1), prompt, np.int8(3), priority=np.int64(-2))
        s.update(s.schedule(), token_ids=np.array([3]))
        states.append(s.to_state())
    assert all(st == states[0] for st in states)
    assert states[0]["requests"][0]["tokens"] == [5, 6, 7, 8, 9, 3]
    assert states[0]["block_hashes"] != []


def test_length_prompts_and_unknown_tokens_are_never_cached(serving_backend: ModuleType) -> None:
    s = make(serving_backend)
    s.add_request(1, 8, 3)  # a length: no prefix caching
    s.add_request(2, [1, 2, 3, 4, 5, 6, 7], 3)
    s.update(s.schedule())  # 2's sampled token not reported: unknown
    s.update(s.schedule(), token_ids={2: 4})
    state = s.to_state()
    # Only 2's first block (prompt tokens 1-4) is cached: its second block holds the
    # unknown token, and the chain stops there even though a known token follows.
    assert [b for b, _ in state["block_hashes"]] == [s.block_table(2)[0]]
    assert state["requests"][0]["tokens"] == [None] * 8 + [None, None]
    assert state["requests"][1]["tokens"] == [1, 2, 3, 4, 5, 6, 7, None, 4]
    off = make(serving_backend, prefix_caching=False)
    off.add_request(2, [1, 2, 3, 4, 5, 6, 7], 1)
    off.update(off.schedule(), token_ids=[9])
    assert off.to_state()["block_hashes"] == []
    assert off.to_state()["free_queue"][:2] == [0, 1]  # unhashed: back to the head


class Calls:
    """An int whose conversion calls ``fn`` first (user code run by ``__index__``)."""

    def __init__(self, value: int, fn: Any) -> None:
        self.value, self.fn = value, fn

    def __index__(self) -> int:
        self.fn()
        return self.value


def test_user_code_during_conversion_calls_back(serving_backend: ModuleType) -> None:
    s = make(serving_backend)
    # A token id whose conversion adds another request: arguments are converted before
    # the lock is taken, so this neither deadlocks nor corrupts state.
    s.add_request(1, [1, Calls(2, lambda: s.add_request(2, 3, 1)), 3], 2)
    assert 1 in s and 2 in s and s.request(1).num_tokens == 3
    batch = s.schedule()

    def report() -> None:
        assert s.update(batch) == [2]

    # A token id whose conversion reports the same batch first: the outer update then
    # finds no batch pending and changes nothing.
    with pytest.raises(RuntimeError) as info:
        s.update(batch, token_ids=[Calls(4, report), 5])
    assert info.value.args[0] == message("batch_not_pending", got=0)
    check_invariants(s)
    assert s.request(1).num_generated == 1 and 2 not in s


def test_same_thread_reentry_is_refused() -> None:
    # A finalizer or signal handler running inside a call is the only way back in (here a
    # trace function, run where they could run); the twin refuses the inner call.
    s = make(P)
    s.add_request(1, 3, 1)
    refused: list[str] = []

    def tracer(frame: Any, event: str, arg: Any) -> None:
        if frame.f_code.co_name == "_plan_step" and not refused:
            with pytest.raises(RuntimeError) as info:
                s.add_request(2, 3, 1)
            refused.append(info.value.args[0])

    sys.settrace(tracer)
    try:
        batch = s.schedule()
    finally:
        sys.settrace(None)
    assert refused == [message("serving_reentrant")]
    assert 2 not in s
    s.update(batch)
    check_invariants(s)


def test_threads_share_one_scheduler(serving_backend: ModuleType) -> None:
    s = make(serving_backend, num_blocks=32, max_running=6)
    errors: list[BaseException] = []
    step_lock = threading.Lock()  # schedule + update is one engine step

    def worker(t: int) -> None:
        try:
            for i in range(150):
                rid = t * 1000 + i
                s.add_request(rid, [1 + (i % 3)] * (1 + i % 9), 1 + i % 4)
                if i % 7 == 3:
                    with contextlib.suppress(KeyError):
                        s.abort(rid - 2)
                with step_lock:
                    batch = s.schedule()
                    s.update(batch, token_ids=[1] * len(batch.sampling_ids))
                with contextlib.suppress(KeyError):  # another thread may finish it
                    s.request(rid)
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    try:
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
    check_invariants(s)
    while len(s):
        s.update(batch := s.schedule(), token_ids=[2] * len(batch.sampling_ids))
    check_invariants(s)
    assert s.num_free_blocks == 32


def test_a_huge_pool_costs_only_the_blocks_used(serving_backend: ModuleType) -> None:
    """Blocks are touched lazily on both backends: a pool of 2**50 blocks (which no list of
    per-block fields could hold) serves requests, reuses freed blocks first and evicts the
    hashed ones last, exactly as a small pool does."""
    n = 2**50
    s = serving_backend.ServingScheduler(serving_backend.ServingConfig(num_blocks=n, block_size=4))
    s.add_request(1, list(range(10)), 2)
    s.add_request(2, 7, 1)
    b = s.schedule()
    assert [i.new_blocks for i in b.items] == [(0, 1, 2), (3, 4)]
    assert b.num_free_blocks == n - 5
    s.update(b, token_ids=[5, 6])
    # Request 2 finished: its unhashed blocks, freed last to first, each go to the head of
    # the queue, so they are reused first, in table order, before any untouched block.
    s.add_request(3, 9, 1)
    b = s.schedule()
    assert [(i.request_id, i.new_blocks) for i in b.items] == [(1, ()), (3, (3, 4, 5))]
    assert s.num_free_blocks == n - 6
