"""Helpers for the serving scheduler's tests, on any backend, through the public API.

``SERVING_BACKENDS``: the backend modules that have ``ServingScheduler`` (the twin now, the
Rust extension as soon as its binding lands). ``check_invariants``: every rule of the block
pool and the request records that ``to_state()`` and the public API can show.
``check_batch``: the rules of one planned step.
"""

from __future__ import annotations

import math
from collections import Counter
from types import ModuleType
from typing import Any

import chunked_prefill._core as rust_backend
import chunked_prefill.pure_serving as pure_backend

SERVING_BACKENDS: dict[str, ModuleType] = {
    name: module
    for name, module in (("rust", rust_backend), ("pure", pure_backend))
    if hasattr(module, "ServingScheduler")
}

Row = tuple[int, int, int, bool, bool, tuple[int, ...], int]


def rows(batch: Any) -> list[Row]:
    """A batch's items as ``(id, start, tokens, is_prefill, samples, new_blocks, cached)``."""
    return [
        (i.request_id, i.start, i.tokens, i.is_prefill, i.samples, i.new_blocks, i.cached_tokens)
        for i in batch.items
    ]


def decode(rid: int, start: int, new_blocks: tuple[int, ...] = ()) -> Row:
    """The row of a decode item."""
    return (rid, start, 1, False, True, new_blocks, 0)


def prefill(
    rid: int, start: int, tokens: int, samples: bool, new_blocks: tuple[int, ...], cached: int = 0
) -> Row:
    """The row of a prefill item."""
    return (rid, start, tokens, True, samples, new_blocks, cached)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def check_invariants(s: Any) -> dict[str, Any]:
    """Check every invariant visible through ``s.to_state()`` and the public API (no batch
    may be pending); return the state."""
    state = s.to_state()
    cfg = state["config"]
    bs, num_blocks = cfg["block_size"], cfg["num_blocks"]
    wm_blocks = math.floor(cfg["watermark"] * num_blocks)
    free = state["free_queue"]
    assert len(free) == len(set(free)), "a block is twice in the free queue"
    holders: Counter[int] = Counter()
    running = waiting = 0
    for r in state["requests"]:
        rid, table, nc = r["request_id"], r["block_table"], r["num_computed"]
        num_tokens = len(r["tokens"])
        generated = num_tokens - r["prompt_len"]
        assert len(table) == len(set(table)), f"request {rid} holds a block twice"
        holders.update(table)
        assert len(table) == _cdiv(nc, bs), f"request {rid}: table size"
        assert 0 <= generated < r["max_new_tokens"], f"request {rid} should have finished"
        assert nc < num_tokens, f"request {rid} has nothing left to compute"
        needed = _cdiv(r["prompt_len"] + r["max_new_tokens"] - 1, bs)
        assert needed <= num_blocks - wm_blocks, f"request {rid} can never fit"
        if r["state"] == "running":
            running += 1
        else:
            assert r["state"] == "waiting"
            assert nc == 0 and table == [], f"waiting request {rid} holds blocks"
            waiting += 1
        view = s.request(rid)
        assert view.state == r["state"]
        assert view.num_tokens == num_tokens
        assert view.num_computed == nc
        assert view.num_generated == generated
        assert view.num_preemptions == r["num_preemptions"]
        assert view.num_cached_tokens == r["num_cached_tokens"]
        assert s.block_table(rid) == table
        assert rid in s
    # Every block is free or held, never both; a block's ref count is its number of holders,
    # and only a block with a registered hash can have more than one.
    assert not set(free) & set(holders), "a block is free and held"
    assert set(free) | set(holders) == set(range(num_blocks)), "a block is lost"
    hashed = {b for b, _ in state["block_hashes"]}
    for b, count in holders.items():
        assert count == 1 or b in hashed, f"block {b} is shared but not cached"
    hashes = [h for _, h in state["block_hashes"]]
    assert len(hashes) == len(set(hashes)), "one hash on two blocks"
    ids = [b for b, _ in state["block_hashes"]]
    assert ids == sorted(set(ids))
    if not cfg["prefix_caching"]:
        assert hashes == []
    # Counters.
    assert s.num_free_blocks == len(free)
    assert s.num_running == running <= cfg["max_running"]
    assert s.num_waiting == waiting
    assert len(s) == len(state["requests"])
    assert s.step_index == state["step_index"]
    assert s.num_preemptions == state["num_preemptions"]
    assert s.num_cached_tokens == state["num_cached_tokens"]
    return state


def check_batch(s: Any, batch: Any, before: dict[str, Any]) -> None:
    """Check the rules of ``batch``, just planned by ``s`` from the state ``before``."""
    cfg = before["config"]
    bs = cfg["block_size"]
    items = batch.items
    assert batch.step_index == before["step_index"] == s.step_index - 1
    assert sum(i.tokens for i in items) <= cfg["token_budget"]
    prefills = [i for i in items if i.is_prefill]
    assert len(prefills) <= cfg["max_prefills_per_step"]
    assert [i.is_prefill for i in items] == sorted(i.is_prefill for i in items), "decodes first"
    assert all(i.tokens <= cfg["chunk_size"] for i in prefills)
    assert all(i.tokens == 1 for i in items if not i.is_prefill)
    assert len({i.request_id for i in items}) == len(items)
    assert batch.sampling_ids == tuple(i.request_id for i in items if i.samples)
    assert batch.num_prefill_tokens == sum(i.tokens for i in prefills)
    assert batch.num_decode_tokens == sum(i.tokens for i in items if not i.is_prefill)
    assert batch.request_ids == tuple(i.request_id for i in items)
    assert batch.starts == tuple(i.start for i in items)
    assert batch.token_counts == tuple(i.tokens for i in items)
    assert batch.num_free_blocks == s.num_free_blocks
    assert s.num_running <= cfg["max_running"]
    prior = {r["request_id"]: r for r in before["requests"]}
    if batch.preempted:
        # No admission in a step that preempted.
        assert all(prior[i.request_id]["state"] == "running" for i in items)
    for rid in batch.preempted:
        assert rid not in batch.request_ids
        view = s.request(rid)
        assert view.state == "waiting" and view.num_computed == 0
        assert s.block_table(rid) == []
    for item in items:
        rid = item.request_id
        r = prior[rid]
        view = s.request(rid)
        assert view.state == "running"
        assert item.samples == (item.start + item.tokens == view.num_tokens)
        table = s.block_table(rid)
        assert len(table) == _cdiv(item.start + item.tokens, bs)
        if r["state"] == "waiting":
            assert item.is_prefill
            assert item.new_blocks == tuple(table)
            assert item.start == item.cached_tokens and item.start % bs == 0
            assert item.start <= view.num_tokens - 1
        else:
            assert item.start == r["num_computed"] and item.cached_tokens == 0
            assert table == r["block_table"] + list(item.new_blocks)
            assert item.is_prefill == (view.num_tokens - item.start > 1)
