"""Hand-computed step tables for every rule of the serving scheduler (issue 11).

Each test builds a small pool, runs a few steps and compares every item with a table worked
out by hand from ``docs/serving-contract.md``; a comment on each step says why. Rows are
``(id, start, tokens, is_prefill, samples, new_blocks, cached_tokens)``, written with
``decode(id, start, new_blocks)`` and ``prefill(id, start, tokens, samples, new_blocks,
cached)``. The invariants are checked after every update.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from serving_invariants import SERVING_BACKENDS, check_invariants, decode, prefill, rows


@pytest.fixture(params=sorted(SERVING_BACKENDS))
def serving_backend(request: pytest.FixtureRequest) -> ModuleType:
    """A backend module that has ``ServingScheduler``."""
    return SERVING_BACKENDS[request.param]


def make(b: ModuleType, **config: Any) -> Any:
    config.setdefault("max_running", 4)
    return b.ServingScheduler(b.ServingConfig(**config))


def run(s: Any, token_ids: Any = None, finished: Any = ()) -> tuple[Any, list[int]]:
    """One step: schedule, then report it; returns the batch and the finished ids."""
    batch = s.schedule()
    done = s.update(batch, token_ids=token_ids, finished=finished)
    check_invariants(s)
    return batch, done


def free_queue(s: Any) -> list[int]:
    return list(s.to_state()["free_queue"])


def test_decode_first_chunk_cap_and_budget(serving_backend: ModuleType) -> None:
    s = make(serving_backend, num_blocks=16, block_size=4, token_budget=8, chunk_size=4)
    s.add_request(1, list(range(1, 7)), 3)  # 6 prompt tokens
    s.add_request(2, list(range(1, 11)), 2)  # 10 prompt tokens
    # Step 0: both admitted; chunk_size 4 caps each, and the budget (8) is then used up.
    b, done = run(s)
    assert rows(b) == [prefill(1, 0, 4, False, (0,)), prefill(2, 0, 4, False, (1,))]
    assert (b.num_prefill_tokens, b.num_decode_tokens, b.num_free_blocks) == (8, 0, 14)
    # Step 1: 1's last 2 tokens (it samples), then 2 gets min(6, 4, 8 - 2) = 4.
    b, done = run(s, token_ids=[50])
    assert rows(b) == [prefill(1, 4, 2, True, (2,)), prefill(2, 4, 4, False, (3,))]
    # Step 2: 1 decodes first (position 6 is in its block 2: no new block), then 2's rest.
    b, done = run(s, token_ids=[51, 60])
    assert rows(b) == [decode(1, 6), prefill(2, 8, 2, True, (4,))]
    assert b.sampling_ids == (1, 2) and (b.num_prefill_tokens, b.num_decode_tokens) == (2, 1)
    # Step 3: two decodes; 1 reaches max_new_tokens 3 and 2 reaches 2: both finish, in
    # batch order.
    b, done = run(s, token_ids=[52, 61])
    assert rows(b) == [decode(1, 7), decode(2, 10)]
    assert done == [1, 2] and len(s) == 0 and s.num_free_blocks == 16


def test_single_token_last_chunk_is_a_decode(serving_backend: ModuleType) -> None:
    s = make(serving_backend, num_blocks=8, block_size=4, token_budget=8, chunk_size=4)
    s.add_request(1, 5, 2)
    b, _ = run(s)
    assert rows(b) == [prefill(1, 0, 4, False, (0,))]
    # left == 1: pass 1 plans it as a decode (it samples), and it needs block 1.
    b, _ = run(s)
    assert rows(b) == [decode(1, 4, (1,))]
    assert b.num_decode_tokens == 1 and b.num_prefill_tokens == 0


def test_prefill_cap(serving_backend: ModuleType) -> None:
    s = make(
        serving_backend,
        num_blocks=16,
        block_size=4,
        token_budget=100,
        chunk_size=4,
        max_prefills_per_step=2,
    )
    for rid in (1, 2, 3):
        s.add_request(rid, 8, 2)
    # Step 0: two chunks, then the prefill count stops admission with budget left.
    b, _ = run(s)
    assert rows(b) == [prefill(1, 0, 4, False, (0,)), prefill(2, 0, 4, False, (1,))]
    # Step 1: the started prefills take both slots again; 3 still waits.
    b, _ = run(s)
    assert rows(b) == [prefill(1, 4, 4, True, (2,)), prefill(2, 4, 4, True, (3,))]
    assert s.num_waiting == 1
    # Step 2: decodes do not count as prefills: 1 and 2 decode (each needs a fifth-token
    # block), and 3 is admitted.
    b, _ = run(s)
    assert rows(b) == [decode(1, 8, (4,)), decode(2, 8, (5,)), prefill(3, 0, 4, False, (6,))]


def test_max_running(serving_backend: ModuleType) -> None:
    s = make(serving_backend, num_blocks=16, block_size=4, token_budget=16, max_running=2)
    for rid in (1, 2, 3):
        s.add_request(rid, 2, 5)
    # Step 0: max_running 2 stops admission after 1 and 2.
    b, _ = run(s)
    assert rows(b) == [prefill(1, 0, 2, True, (0,)), prefill(2, 0, 2, True, (1,))]
    b, _ = run(s)
    assert rows(b) == [decode(1, 2), decode(2, 2)]
    assert (s.num_running, s.num_waiting) == (2, 1)
    # Aborting 1 frees its block 0 (no hash: to the head of the queue), so 3, admitted next
    # step, gets block 0.
    s.abort(1)
    assert free_queue(s)[0] == 0
    b, _ = run(s)
    assert rows(b) == [decode(2, 3), prefill(3, 0, 2, True, (0,))]


def test_admission_stopped_by_blocks_without_skipping_ahead(serving_backend: ModuleType) -> None:
    s = make(serving_backend, num_blocks=4, block_size=4, token_budget=64, chunk_size=64)
    s.add_request(1, 8, 4)  # 2 blocks now, 3 at most
    s.add_request(2, 9, 1)  # 3 blocks
    s.add_request(3, 1, 1)  # 1 block: it would fit, but 2 stops admission first
    b, _ = run(s)
    # 2 needs 3 blocks and F - R = 2 - 0: admission stops; 3 is not tried.
    assert rows(b) == [prefill(1, 0, 8, True, (0, 1))]
    assert b.num_free_blocks == 2 and s.num_waiting == 2


def test_admission_stopped_by_r(serving_backend: ModuleType) -> None:
    s = make(serving_backend, num_blocks=6, block_size=4, token_budget=8, chunk_size=4)
    s.add_request(1, 16, 1)  # 4 blocks, computed 4 tokens a step
    s.add_request(2, 9, 1)  # 3 blocks
    # Step 0: 1 gets block 0 and still needs R = 3 more; 2 needs 3 <= F - R = 5 - 3: no,
    # although 5 blocks are free.
    b, _ = run(s)
    assert rows(b) == [prefill(1, 0, 4, False, (0,))]
    # Steps 1-3: R shrinks with F, so 2 never fits while 1 runs (3 <= 4 - 2, 3 - 1, 2 - 0).
    for step, block in ((1, 1), (2, 2), (3, 3)):
        b, done = run(s)
        assert rows(b) == [prefill(1, 4 * step, 4, step == 3, (block,))]
    assert done == [1]
    # 1 finished: its unhashed blocks went back to the head, last first, so 2 gets block 0.
    b, _ = run(s)
    assert rows(b) == [prefill(2, 0, 4, False, (0,))]


def test_admission_stopped_by_watermark(serving_backend: ModuleType) -> None:
    s = make(serving_backend, num_blocks=10, block_size=4, token_budget=64, watermark=0.25)
    s.add_request(1, 32, 1)  # 8 blocks: exactly num_blocks - floor(2.5)
    s.add_request(2, 4, 1)  # 1 block
    b, _ = run(s)
    # 1: 8 <= 10 - 0 - 2. 2: 1 <= 2 - 0 - 2 fails, so it waits with 2 blocks free.
    assert rows(b) == [prefill(1, 0, 32, True, tuple(range(8)))]
    assert b.num_free_blocks == 2 and s.num_waiting == 1


def test_prefix_cache_hits(serving_backend: ModuleType) -> None:
    s = make(serving_backend, num_blocks=16, block_size=4, token_budget=64)
    prompt = list(range(1, 13))  # 3 full blocks
    s.add_request(1, prompt, 1)
    b, done = run(s, token_ids=[99])
    assert rows(b) == [prefill(1, 0, 12, True, (0, 1, 2))]
    # Its 3 blocks were hashed, then freed last first to the tail: the queue ends 2, 1, 0.
    assert done == [1] and free_queue(s)[-3:] == [2, 1, 0]
    assert [b for b, _ in s.to_state()["block_hashes"]] == [0, 1, 2]
    s.add_request(2, prompt, 1)  # a full hit, capped at num_tokens - 1: 2 blocks
    s.add_request(3, [1, 2, 3, 4, 50, 51, 52, 53, 9, 10, 11, 12], 1)  # first block only
    s.add_request(4, prompt, 1, cache_salt=7)  # another salt: no hit
    b = s.schedule()
    assert rows(b) == [
        # 2: hits 0 and 1 (8 tokens), computes 4 tokens in block 3 (the head).
        prefill(2, 8, 4, True, (0, 1, 3), 8),
        # 3: shares block 0 with 2, computes 8 tokens in blocks 4 and 5.
        prefill(3, 4, 8, True, (0, 4, 5), 4),
        # 4: its salt changes every hash of its chain.
        prefill(4, 0, 12, True, (6, 7, 8)),
    ]
    assert s.block_table(2) == [0, 1, 3] and s.block_table(3) == [0, 4, 5]
    assert s.num_cached_tokens == 12
    assert [s.request(r).num_cached_tokens for r in (2, 3, 4)] == [8, 4, 0]
    s.update(b, token_ids=[1, 2, 3])
    check_invariants(s)


def test_longer_prompt_hits_every_full_block(serving_backend: ModuleType) -> None:
    s = make(serving_backend, num_blocks=16, block_size=4, token_budget=64)
    prompt = list(range(1, 13))
    s.add_request(1, prompt, 1)
    run(s, token_ids=[99])
    # 13 tokens: the cap is (13 - 1) // 4 = 3 blocks, so all of 1's blocks hit.
    s.add_request(2, [*prompt, 13], 1)
    b, _ = run(s)
    assert rows(b) == [prefill(2, 12, 1, True, (0, 1, 2, 3), 12)]


def test_lru_eviction_keeps_the_prefix(serving_backend: ModuleType) -> None:
    s = make(serving_backend, num_blocks=4, block_size=2, token_budget=64)
    s.add_request(1, [1, 2, 3, 4, 5, 6], 1)
    b, _ = run(s, token_ids=[9])
    assert rows(b) == [prefill(1, 0, 6, True, (0, 1, 2))]
    # Hashed blocks go to the tail, last block first: the suffix is evicted first.
    assert free_queue(s) == [3, 2, 1, 0]
    s.add_request(2, [7, 8, 9, 10], 1)
    b, _ = run(s, token_ids=[9])
    assert rows(b) == [prefill(2, 0, 4, True, (3, 2))]  # block 2 ([5, 6]) evicted
    s.add_request(3, [1, 2, 3, 4, 5, 6], 1)
    b, _ = run(s)
    # 2's blocks went to the tail last first: the queue is 1, 0, 2, 3. 3 finds [1, 2] and
    # [3, 4] in blocks 0 and 1 (the cap is 2 blocks anyway), takes them out of the queue and
    # recomputes [5, 6] in the head block, 2 (evicting 2's suffix [9, 10]).
    assert rows(b) == [prefill(3, 4, 2, True, (0, 1, 2), 4)]


def test_preempt_worst_ranked_for_a_decode(serving_backend: ModuleType) -> None:
    s = make(serving_backend, num_blocks=4, block_size=2, token_budget=16)
    s.add_request(1, 3, 4)
    s.add_request(2, 3, 4)
    b, _ = run(s)
    assert rows(b) == [prefill(1, 0, 3, True, (0, 1)), prefill(2, 0, 3, True, (2, 3))]
    b, _ = run(s)
    assert rows(b) == [decode(1, 3), decode(2, 3)]
    # Step 2: 1 needs a block for position 4 and none is free: the worst-ranked, 2, is
    # preempted; its unhashed blocks go to the head (2 then 3) and 1 takes block 2. 2 is not
    # served in this step.
    b, _ = run(s)
    assert rows(b) == [decode(1, 4, (2,))]
    assert b.preempted == (2,) and b.num_free_blocks == 1 and s.num_preemptions == 1
    v = s.request(2)
    assert (v.state, v.num_computed, v.num_tokens, v.num_generated) == ("waiting", 0, 5, 2)
    assert v.num_preemptions == 1
    # Step 3: 2 needs 3 blocks and only 1 is free.
    b, done = run(s)
    assert rows(b) == [decode(1, 5)] and done == [1]
    # Step 4: 2 recomputes its prompt and its 2 generated tokens in one chunk and samples.
    b, _ = run(s)
    assert rows(b) == [prefill(2, 0, 5, True, (0, 1, 2))]


def test_preempt_the_requester_and_no_admission_after(serving_backend: ModuleType) -> None:
    s = make(serving_backend, num_blocks=3, block_size=2, token_budget=8)
    s.add_request(1, 3, 2)
    s.add_request(2, 2, 2)
    b, _ = run(s)
    assert rows(b) == [prefill(1, 0, 3, True, (0, 1)), prefill(2, 0, 2, True, (2,))]
    s.add_request(3, 1, 1, priority=-1)  # 1 block: it fits once 2's block is free
    # Step 1: 1 decodes in its block 1; 2 needs a block, none is free, and 2 is itself the
    # worst-ranked: it is preempted and gets no item. Admission is skipped in this step, so
    # 3 waits although 1 block is free.
    b, done = run(s)
    assert rows(b) == [decode(1, 3)]
    assert b.preempted == (2,) and b.num_free_blocks == 1 and done == [1]
    # Step 2: priority -1 goes first: 3 gets the head block 0, then 2 blocks 1 and 2.
    b, _ = run(s)
    assert rows(b) == [prefill(3, 0, 1, True, (0,)), prefill(2, 0, 3, True, (1, 2))]


def test_preempt_one_planned_earlier_in_the_step(serving_backend: ModuleType) -> None:
    s = make(serving_backend, num_blocks=5, block_size=2, token_budget=8, chunk_size=2)
    s.add_request(2, 1, 4, priority=1)  # added first, but ranked after 1
    s.add_request(1, 8, 1)
    # Step 0: 1 (4 blocks, R = 3 after its chunk), then 2: 1 <= F - R = 4 - 3.
    b, _ = run(s)
    assert rows(b) == [prefill(1, 0, 2, False, (0,)), prefill(2, 0, 1, True, (1,))]
    b, _ = run(s)
    assert rows(b) == [decode(2, 1), prefill(1, 2, 2, False, (2,))]
    b, _ = run(s)
    assert rows(b) == [decode(2, 2, (3,)), prefill(1, 4, 2, False, (4,))]
    # Step 3: 2's decode is planned in pass 1, then 1's chunk needs a block and none is
    # free: 2, the worst-ranked, is preempted, its item leaves the batch, and its blocks go
    # to the head (3 then 1): 1 takes block 1.
    b, done = run(s)
    assert rows(b) == [prefill(1, 6, 2, True, (1,))]
    assert b.preempted == (2,) and b.num_decode_tokens == 0 and b.sampling_ids == (1,)
    assert done == [1]
    # Step 4: 1 freed 1, 4, 2, 0 to the head; 2 recomputes 2 of its 4 tokens in block 0.
    assert free_queue(s) == [0, 2, 4, 1, 3]
    b, _ = run(s)
    assert rows(b) == [prefill(2, 0, 2, False, (0,))]


def test_recompute_hits_generated_tokens(serving_backend: ModuleType) -> None:
    s = make(serving_backend, num_blocks=6, block_size=2, token_budget=16)
    s.add_request(1, [1, 2, 3], 6)  # at most 8 tokens: 4 blocks
    s.add_request(2, [7, 8, 9], 6)
    b, _ = run(s, token_ids=[10, 20])
    assert rows(b) == [prefill(1, 0, 3, True, (0, 1)), prefill(2, 0, 3, True, (2, 3))]
    b, _ = run(s, token_ids=[11, 21])  # blocks 1 ([3, 10]) and 3 ([9, 20]) hashed
    assert rows(b) == [decode(1, 3), decode(2, 3)]
    b, _ = run(s, token_ids=[12, 22])
    assert rows(b) == [decode(1, 4, (4,)), decode(2, 4, (5,))]
    b, _ = run(s, token_ids=[13, 23])  # blocks 4 ([11, 12]) and 5 ([21, 22]) hashed
    assert rows(b) == [decode(1, 5), decode(2, 5)]
    # Step 4: 1 needs a block: 2 is preempted; its hashed blocks go to the tail last first
    # (5, 3, 2) and 1 takes block 5, evicting [21, 22].
    b, _ = run(s, token_ids=[14])
    assert rows(b) == [decode(1, 6, (5,))] and b.preempted == (2,)
    # Step 5: 2 would hit [7, 8] and [9, 20] (2 blocks) but needs 2 more with F = 0.
    b, done = run(s, token_ids=[15])
    assert rows(b) == [decode(1, 7)] and done == [1]
    # Step 6: 2 hits blocks 2 and 3 (its prompt and its first generated token) and
    # recomputes 3 tokens in blocks 5 and 4 (the queue was 5, 4, 1, 0 after 1 finished).
    b, _ = run(s)
    assert rows(b) == [prefill(2, 4, 3, True, (2, 3, 5, 4), 4)]
    v = s.request(2)
    assert (v.num_preemptions, v.num_cached_tokens, v.num_generated) == (1, 4, 5)


def test_finish_by_finished_and_abort(serving_backend: ModuleType) -> None:
    s = make(serving_backend, num_blocks=8, block_size=4, token_budget=16, max_running=3)
    for rid in (1, 2, 3, 4):
        s.add_request(rid, 4, 10)
    b, done = run(s, finished=[4, 3, 2])
    assert rows(b) == [
        prefill(1, 0, 4, True, (0,)),
        prefill(2, 0, 4, True, (1,)),
        prefill(3, 0, 4, True, (2,)),
    ]
    # Batch items first, in batch order, then the rest of finished (the waiting 4).
    assert done == [2, 3, 4] and len(s) == 1
    # 2's block 1 then 3's block 2 went to the head: the queue starts 2, 1.
    assert free_queue(s)[:3] == [2, 1, 3]
    b = s.schedule()
    assert rows(b) == [decode(1, 4, (2,))]
    s.abort(1)  # blocks freed at once, while the batch is pending
    assert s.num_free_blocks == 8 and 1 not in s
    with pytest.raises(ValueError, match="pending batch 1"):
        s.add_request(1, 4, 1)
    assert s.update(b, token_ids=[7]) == []  # 1's item is skipped
    assert free_queue(s)[:3] == [0, 2, 1]  # 1's blocks 2 then 0 went to the head
    s.add_request(1, 4, 1)
    check_invariants(s)


def test_finished_without_a_token_and_abort_of_waiting(serving_backend: ModuleType) -> None:
    s = make(serving_backend, num_blocks=8, block_size=4, token_budget=16, max_running=1)
    s.add_request(1, 8, 5)
    s.add_request(2, 4, 5)
    b = s.schedule()
    assert rows(b) == [prefill(1, 0, 8, True, (0, 1))]
    s.abort(2)  # waiting: holds nothing
    # The engine stops 1 (a stop string) after its first token.
    assert s.update(b, token_ids={1: 5}, finished=[1]) == [1]
    assert len(s) == 0 and s.num_waiting == 0 and s.num_free_blocks == 8
    assert rows(s.schedule()) == []


def test_priorities_and_ties(serving_backend: ModuleType) -> None:
    s = make(serving_backend, num_blocks=16, block_size=4, token_budget=64, max_running=2)
    s.add_request(1, 4, 2, priority=5)
    s.add_request(2, 4, 2, priority=-3)
    s.add_request(3, 4, 2, priority=-3)  # ties with 2: added later, so after it
    b, _ = run(s)
    assert rows(b) == [prefill(2, 0, 4, True, (0,)), prefill(3, 0, 4, True, (1,))]
    b, done = run(s)
    assert rows(b) == [decode(2, 4, (2,)), decode(3, 4, (3,))] and done == [2, 3]
    # 2 freed 2, 0 and then 3 freed 3, 1 to the head: 1 gets block 1.
    b, _ = run(s)
    assert rows(b) == [prefill(1, 0, 4, True, (1,))]
