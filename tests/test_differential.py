"""Random operation sequences give identical results on both backends, and the step rule's
invariants hold in every mode."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

import chunked_prefill._core as rust
import chunked_prefill.pure as pure


@st.composite
def configs(draw: st.DrawFn) -> dict[str, Any]:
    chunk = draw(st.integers(1, 64))
    max_decode = draw(st.integers(0, 16))
    interleave = draw(st.booleans())
    budget = draw(st.none() | st.integers(1, 128))
    if budget is not None and interleave and budget <= max_decode:
        budget = max_decode + 1 + budget
    prefills = draw(st.integers(2, 5)) if budget is not None and draw(st.booleans()) else 1
    return {
        "chunk_size": chunk,
        "max_decode_tokens": max_decode,
        "interleave_decode": interleave,
        "token_budget": budget,
        "max_prefills_per_step": prefills,
    }


ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("enqueue"),
            st.integers(0, 12),
            st.integers(0, 200),
            st.integers(0, 220),
            st.integers(-3, 3),
        ),
        st.tuples(st.just("step"), st.integers(0, 40)),
        st.tuples(st.just("drain")),
        st.tuples(st.just("abort"), st.integers(0, 12)),
        st.tuples(st.just("state"), st.integers(0, 12)),
    ),
    max_size=60,
)


def apply(sched: Any, op: tuple[Any, ...]) -> Any:
    """Run one operation; return its result or its exception as comparable data."""
    try:
        kind = op[0]
        if kind == "enqueue":
            _, rid, total, cached, prio = op
            return sched.enqueue(rid, total, cached_tokens=min(cached, total + 1), priority=prio)
        if kind == "step":
            return repr(sched.next_step(op[1]))
        if kind == "drain":
            return sched.drain_completed()
        if kind == "abort":
            return repr(sched.abort(op[1]))
        return repr(sched.state(op[1]))
    except (ValueError, KeyError, TypeError, OverflowError) as err:
        return (type(err).__name__, err.args)


def observe(sched: Any) -> tuple[Any, ...]:
    return (
        len(sched),
        sched.is_idle(),
        sched.active_count(),
        sched.chunks_scheduled(),
        sched.tokens_prefilled(),
        sched.to_state(),
        repr(sched),
    )


@given(configs(), ops)
def test_backends_agree(config: dict[str, Any], sequence: list[tuple[Any, ...]]) -> None:
    a = rust.Scheduler(rust.Config(**config))
    b = pure.Scheduler(pure.Config(**config))
    for op in sequence:
        assert apply(a, op) == apply(b, op), op
        assert observe(a) == observe(b)


@given(
    configs(),
    st.lists(st.tuples(st.integers(1, 300), st.integers(0, 300)), max_size=12),
    st.lists(st.integers(0, 40), min_size=1, max_size=80),
)
def test_step_invariants(
    config: dict[str, Any], prompts: list[tuple[int, int]], decodes: list[int]
) -> None:
    for backend in (rust, pure):
        sched = backend.Scheduler(backend.Config(**config))
        start: dict[int, int] = {}
        for rid, (total, cached) in enumerate(prompts):
            cached = min(cached, total)
            sched.enqueue(rid, total, cached_tokens=cached)
            start[rid] = total - 1 if cached == total else cached
        position = dict(start)
        totals = {rid: total for rid, (total, _) in enumerate(prompts)}
        budget = config["token_budget"]
        chunks_seen = tokens_seen = 0
        for index, decode in enumerate(decodes):
            waiting_work = {r for r in position if position[r] < totals[r]}
            step = sched.next_step(decode)
            assert step.step_index == index
            want_decode = (
                min(decode, config["max_decode_tokens"]) if config["interleave_decode"] else 0
            )
            if budget is not None:
                want_decode = min(want_decode, budget)
            assert step.decode_tokens == want_decode
            assert len(step.chunks) <= config["max_prefills_per_step"]
            assert len({c.request_id for c in step.chunks}) == len(step.chunks)
            for c in step.chunks:
                assert 1 <= c.tokens <= config["chunk_size"]
                assert c.start == position[c.request_id]  # contiguous
                position[c.request_id] += c.tokens
                assert c.is_last == (position[c.request_id] == totals[c.request_id])
            assert step.prefill_tokens == sum(c.tokens for c in step.chunks)
            if budget is None:
                assert len(step.chunks) == (1 if waiting_work else 0)
            else:
                used = step.decode_tokens + step.prefill_tokens
                assert used <= budget
                if used < budget:
                    # Budget left over only when the chunk count is at its cap, or every
                    # request with prompt work got a chunk capped by chunk_size or its end.
                    got = {c.request_id for c in step.chunks}
                    full = len(step.chunks) == config["max_prefills_per_step"]
                    assert full or got == waiting_work
                    for c in step.chunks:
                        assert full or c.is_last or c.tokens == config["chunk_size"]
            chunks_seen += len(step.chunks)
            tokens_seen += step.prefill_tokens
        assert sched.chunks_scheduled() == chunks_seen
        assert sched.tokens_prefilled() == tokens_seen
        assert all(position[r] <= totals[r] for r in position)
        assert sched.is_idle() == all(position[r] == totals[r] for r in position)
