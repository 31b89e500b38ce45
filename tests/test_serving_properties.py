"""Properties of the serving scheduler under random operation sequences (hypothesis).

After every operation: every block is free or held, never both, and shared only while
cached; tables, counters and views agree (``serving_invariants.check_invariants``); each
batch keeps the budget, the chunk and prefill caps, decodes first
(``check_batch``); ``num_computed`` never goes down except for a preempted request, which
holds nothing. Once arrivals stop, every request finishes within a bounded number of steps.
``to_state``/``from_state``, pickle and copies give the same state and the same future.
"""

from __future__ import annotations

import copy
import pickle
import random
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from serving_invariants import SERVING_BACKENDS, check_batch, check_invariants


@pytest.fixture(params=sorted(SERVING_BACKENDS), scope="module")
def serving_backend(request: pytest.FixtureRequest) -> ModuleType:
    """A backend module that has ``ServingScheduler`` (a module: nothing to reset between
    hypothesis examples)."""
    return SERVING_BACKENDS[request.param]


IDS = 12  # request ids are drawn from 0..IDS-1, so ids are reused after they finish


@st.composite
def configs(draw: st.DrawFn) -> dict[str, Any]:
    budget = draw(st.integers(2, 24))
    return {
        "num_blocks": draw(st.integers(3, 14)),
        "block_size": draw(st.integers(1, 4)),
        "token_budget": budget,
        "chunk_size": draw(st.integers(1, 12)),
        "max_prefills_per_step": draw(st.integers(1, 4)),
        "max_running": draw(st.integers(1, min(6, budget - 1))),
        "watermark": draw(st.sampled_from([0.0, 0.0, 0.1, 0.3])),
        "prefix_caching": draw(st.booleans()),
    }


# Prompts from a pool with shared prefixes, or from a 2-token alphabet, so the cache hits.
POOL = [[1] * 9, [1] * 6 + [2] * 5, [1, 2] * 4, [1, 2] * 4 + [1], [2] * 12, [2] * 3]
prompts = st.one_of(
    st.sampled_from(POOL),
    st.lists(st.integers(1, 2), min_size=1, max_size=12),
    st.integers(1, 12),
)
add_ops = st.tuples(
    st.just("add"),
    st.integers(0, IDS - 1),
    prompts,
    st.integers(1, 8),
    st.integers(-1, 1),
    st.sampled_from([0, 0, 1]),
)
step_ops = st.tuples(
    st.just("step"),
    st.sampled_from(["none", "list", "dict", "partial"]),
    st.lists(st.integers(0, IDS - 1), max_size=2),
    st.one_of(st.none(), st.integers(0, 10)),
)
abort_ops = st.tuples(st.just("abort"), st.integers(0, IDS - 1))
kinds = st.sampled_from(["add"] * 3 + ["step"] * 6 + ["abort"])
ops = st.lists(
    kinds.flatmap(lambda k: {"add": add_ops, "step": step_ops, "abort": abort_ops}[k]),
    min_size=4,
    max_size=50,
)


def tokens_for(mode: str, batch: Any) -> Any:
    """The engine's sampled ids, from the 2-token alphabet, in one of four forms."""
    ids = batch.sampling_ids
    toks = [1 + (batch.step_index + rid) % 2 for rid in ids]
    if mode == "none":
        return None
    if mode == "list":
        return toks
    items = list(zip(ids, toks))
    return dict(items if mode == "dict" else items[::2])


def apply(s: Any, op: tuple[Any, ...], checked: bool = False) -> Any:
    """Run ``op`` on ``s``; return what a caller observes (results or the refusal)."""
    try:
        if op[0] == "add":
            _, rid, prompt, max_new, priority, salt = op
            s.add_request(rid, prompt, max_new, priority=priority, cache_salt=salt)
            return ("added", rid)
        if op[0] == "abort":
            s.abort(op[1])
            return ("aborted", op[1])
        _, mode, finished, abort_at = op
        before = s.to_state() if checked else None
        batch = s.schedule()
        if checked:
            check_batch(s, batch, before)  # type: ignore[arg-type]
        if abort_at is not None and len(batch):
            victim = batch.items[abort_at % len(batch)].request_id
            s.abort(victim)
        stop = [rid for rid in dict.fromkeys(finished) if rid in s]
        done = s.update(batch, token_ids=tokens_for(mode, batch), finished=stop)
        if checked:
            check_step(s, batch, before, done)  # type: ignore[arg-type]
        return ("step", batch, done)
    except (ValueError, KeyError) as err:
        return (type(err).__name__, err.args[0])


def check_step(s: Any, batch: Any, before: dict[str, Any], done: list[int]) -> None:
    """``num_computed`` is monotone, except for a preempted request (which holds nothing)."""
    items = {i.request_id: i for i in batch.items}
    for r in before["requests"]:
        rid = r["request_id"]
        if rid not in s:
            continue
        view = s.request(rid)
        if rid in batch.preempted:
            assert view.num_computed == 0 and s.block_table(rid) == []
            assert view.num_preemptions == r["num_preemptions"] + 1
        elif rid in items:
            # A request admitted in this step starts after its cache hit.
            item = items[rid]
            assert item.start >= r["num_computed"]
            assert view.num_computed == item.start + item.tokens
        else:
            assert view.num_computed == r["num_computed"]
    assert len(done) == len(set(done)) and not any(rid in s for rid in done)


def drain(s: Any) -> None:
    """No more arrivals: every request finishes within a bounded number of steps (the
    best-ranked request always advances, so the bound is about twice the total tokens of
    all requests per request)."""
    state = s.to_state()
    work = sum(r["prompt_len"] + r["max_new_tokens"] for r in state["requests"])
    bound = 2 * (len(state["requests"]) + 1) * (work + 1)
    steps = 0
    while len(s):
        apply(s, ("step", "list", [], None), checked=True)
        check_invariants(s)
        steps += 1
        assert steps <= bound, f"not drained after {bound} steps"
    assert s.num_free_blocks == state["config"]["num_blocks"]
    assert s.num_running == s.num_waiting == 0


@given(config=configs(), program=ops)
def test_random_operations_keep_every_invariant(
    serving_backend: ModuleType, config: dict[str, Any], program: list[Any]
) -> None:
    s = serving_backend.ServingScheduler(serving_backend.ServingConfig(**config))
    for op in program:
        apply(s, op, checked=True)
        check_invariants(s)
    drain(s)


@given(config=configs(), before=ops, after=ops)
def test_round_trips_have_the_same_future(
    serving_backend: ModuleType, config: dict[str, Any], before: list[Any], after: list[Any]
) -> None:
    b = serving_backend
    s = b.ServingScheduler(b.ServingConfig(**config))
    for op in before:
        apply(s, op)
    state = s.to_state()
    replicas = [
        s,
        b.ServingScheduler.from_state(state),
        pickle.loads(pickle.dumps(s)),
        copy.copy(s),
        copy.deepcopy(s),
    ]
    assert all(r.to_state() == state for r in replicas)
    assert len({repr(r) for r in replicas}) == 1
    histories = [[apply(r, op) for op in after] for r in replicas]
    assert all(h == histories[0] for h in histories)
    assert all(r.to_state() == replicas[0].to_state() for r in replicas)


@given(config=configs(), before=ops, mode=st.sampled_from(["none", "list", "dict"]))
def test_copy_with_a_batch_pending(
    serving_backend: ModuleType, config: dict[str, Any], before: list[Any], mode: str
) -> None:
    b = serving_backend
    s = b.ServingScheduler(b.ServingConfig(**config))
    for op in before:
        apply(s, op)
    batch = s.schedule()
    twin = copy.deepcopy(s)
    again = pickle.loads(pickle.dumps(batch))
    assert again == batch and hash(again) == hash(batch) and repr(again) == repr(batch)
    # The copy's pending batch is the same one; an equal (unpickled) batch is accepted.
    assert s.update(batch, token_ids=tokens_for(mode, batch)) == twin.update(
        again, token_ids=tokens_for(mode, batch)
    )
    assert s.to_state() == twin.to_state()


@given(config=configs(), program=ops)
def test_values_round_trip(
    serving_backend: ModuleType, config: dict[str, Any], program: list[Any]
) -> None:
    b = serving_backend
    cfg = b.ServingConfig(**config)
    assert pickle.loads(pickle.dumps(cfg)) == cfg and hash(cfg.replace()) == hash(cfg)
    assert b.ServingConfig(**cfg.to_dict()) == cfg and list(cfg.to_dict()) == list(config)
    s = b.ServingScheduler(cfg)
    for op in program:
        out = apply(s, op)
        if out[0] == "step":
            batch = out[1]
            assert pickle.loads(pickle.dumps(batch)) == batch
            for item in batch.items:
                fields = {
                    k: getattr(item, k)
                    for k in (
                        "request_id",
                        "start",
                        "tokens",
                        "is_prefill",
                        "samples",
                        "new_blocks",
                        "cached_tokens",
                    )
                }
                assert b.BatchItem(**fields) == item and repr(b.BatchItem(**fields)) == repr(item)
                assert pickle.loads(pickle.dumps(item)) == item
            rebuilt = b.Batch(
                step_index=batch.step_index,
                items=list(batch.items),
                preempted=list(batch.preempted),
                num_free_blocks=batch.num_free_blocks,
            )
            assert rebuilt == batch and repr(rebuilt) == repr(batch)


def random_program(rng: random.Random, length: int) -> list[Any]:
    """A long program with steady arrivals and steps (for pressure on the pool)."""
    program: list[Any] = []
    for _ in range(length):
        kind = rng.choices(["add", "step", "abort"], weights=[3, 7, 1])[0]
        if kind == "add":
            prompt: Any = rng.choice(
                [
                    rng.choice(POOL),
                    [rng.randint(1, 2) for _ in range(rng.randint(1, 12))],
                    rng.randint(1, 12),
                ]
            )
            op = ("add", rng.randrange(IDS), prompt, rng.randint(1, 8), rng.randint(-1, 1), 0)
        elif kind == "step":
            mode = rng.choice(["none", "list", "dict", "partial", "list"])
            finished = [rng.randrange(IDS)] if rng.random() < 0.05 else []
            op = ("step", mode, finished, rng.randrange(8) if rng.random() < 0.05 else None)
        else:
            op = ("abort", rng.randrange(IDS))
        program.append(op)
    return program


def test_random_walks_under_pressure(serving_backend: ModuleType) -> None:
    b = serving_backend
    preemptions = cached = 0
    for seed in range(24):
        rng = random.Random(seed)
        config = {
            "num_blocks": rng.randint(4, 12),
            "block_size": rng.randint(1, 3),
            "token_budget": 12,
            "chunk_size": rng.randint(2, 8),
            "max_prefills_per_step": rng.randint(1, 3),
            "max_running": rng.randint(2, 6),
            "watermark": rng.choice([0.0, 0.2]),
            "prefix_caching": seed % 4 != 0,
        }
        s = b.ServingScheduler(b.ServingConfig(**config))
        for op in random_program(rng, 150):
            apply(s, op, checked=True)
            check_invariants(s)
        preemptions += s.num_preemptions
        cached += s.num_cached_tokens
        drain(s)
    assert preemptions > 20 and cached > 100
