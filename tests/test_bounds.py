"""Bounds: values at the integer limits either work exactly or raise the documented error.

The rule (issue 5): sizes, ids and counts are unsigned 64-bit (``0 ..= 2**64-1``), priorities
signed 64-bit; anything outside is an ``OverflowError`` (a negative number a ``ValueError``)
naming the argument. The counters ``step_index``, ``chunks_scheduled`` and
``tokens_prefilled`` are exact integers (128-bit in Rust): they never wrap or saturate.
``from_state`` restores them up to ``COUNTER_MAX = 2**127-1`` (so that no run from there can
reach 2**128: it would take 2**63 steps of 2**64-1 tokens each) and rejects anything above
with an ``OverflowError``; ``Step(step_index=...)`` takes any value up to ``2**128-1``.
Every test runs on both backends and the differential ones compare the two.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

import chunked_prefill._core as R
import chunked_prefill.pure as P
from chunked_prefill._validate import message

U64_MAX = 2**64 - 1
U128_MAX = 2**128 - 1
COUNTER_MAX = 2**127 - 1
I64_MIN = -(2**63)
I64_MAX = 2**63 - 1
MESSAGES: dict[str, str] = json.loads(
    Path(P.__file__).with_name("_messages.json").read_text(encoding="utf-8")
)
ROOT = Path(__file__).resolve().parents[1]


def msg(key: str, /, **fields: Any) -> str:
    return MESSAGES[key].format(**fields)


def state_with(mod: ModuleType, config: Any = None, **counters: int) -> dict[str, Any]:
    state = mod.Scheduler(config).to_state()
    state.update(counters)
    return state


def steps(s: Any, n: int, decode: int = 0) -> list[Any]:
    return [s.next_step(decode) for _ in range(n)]


def chunks_of(step: Any) -> list[tuple[int, int, int, bool]]:
    return [(c.request_id, c.start, c.tokens, c.is_last) for c in step.chunks]


# --------------------------------------------------------------------------- prompt sizes


@pytest.mark.parametrize("total", [2**63, U64_MAX])
def test_huge_prompt_in_one_chunk(backend: ModuleType, total: int) -> None:
    s = backend.Scheduler(backend.Config(chunk_size=U64_MAX))
    s.enqueue(1, total)
    step = s.next_step(0)
    assert chunks_of(step) == [(1, 0, total, True)]
    assert step.prefill_tokens == total
    assert s.tokens_prefilled() == total
    assert s.state(1).processed_tokens == total
    assert s.state(1).progress() == 1.0
    assert s.is_idle()


@pytest.mark.parametrize("total", [2**63, U64_MAX])
def test_huge_prompt_in_half_chunks(backend: ModuleType, total: int) -> None:
    half = 2**63
    s = backend.Scheduler(backend.Config(chunk_size=half))
    s.enqueue(0, total)
    first, second, third = steps(s, 3)
    assert chunks_of(first) == [(0, 0, half, total == half)]
    if total == half:
        assert chunks_of(second) == []
    else:
        assert chunks_of(second) == [(0, half, total - half, True)]
    assert chunks_of(third) == []
    assert s.tokens_prefilled() == total
    assert s.chunks_scheduled() == (1 if total == half else 2)


def test_fully_cached_huge_prompt_computes_its_last_token(backend: ModuleType) -> None:
    s = backend.Scheduler()
    s.enqueue(U64_MAX, U64_MAX, cached_tokens=U64_MAX, priority=I64_MAX)
    state = s.state(U64_MAX)
    assert state.processed_tokens == U64_MAX - 1
    assert state.remaining() == 1
    (step,) = steps(s, 1)
    assert chunks_of(step) == [(U64_MAX, U64_MAX - 1, 1, True)]
    assert s.tokens_prefilled() == 1


def test_partly_cached_huge_prompt(backend: ModuleType) -> None:
    s = backend.Scheduler(backend.Config(chunk_size=U64_MAX))
    s.enqueue(7, U64_MAX, cached_tokens=2**63)
    (step,) = steps(s, 1)
    assert chunks_of(step) == [(7, 2**63, U64_MAX - 2**63, True)]
    assert s.tokens_prefilled() == 2**63 - 1


def test_tokens_prefilled_passes_2_64_exactly(backend: ModuleType) -> None:
    """Three prompts of 2**64-1 tokens: the counter reaches 3 * (2**64-1), exactly."""
    s = backend.Scheduler(
        backend.Config(
            chunk_size=U64_MAX,
            token_budget=U64_MAX,
            max_prefills_per_step=U64_MAX,
            interleave_decode=False,
        )
    )
    for rid in (0, 1, 2):
        s.enqueue(rid, U64_MAX)
    assert [chunks_of(x) for x in steps(s, 3)] == [
        [(0, 0, U64_MAX, True)],
        [(1, 0, U64_MAX, True)],
        [(2, 0, U64_MAX, True)],
    ]
    assert s.tokens_prefilled() == 3 * U64_MAX
    assert s.chunks_scheduled() == 3
    assert s.to_state()["tokens_prefilled"] == 3 * U64_MAX
    restored = type(s).from_state(s.to_state())
    assert restored.tokens_prefilled() == 3 * U64_MAX


def test_budget_split_at_the_limit(backend: ModuleType) -> None:
    """A budget of 2**64-1 shared by two huge prompts and 2**64-2 decodes."""
    s = backend.Scheduler(
        backend.Config(
            chunk_size=U64_MAX,
            max_decode_tokens=U64_MAX - 1,
            token_budget=U64_MAX,
            max_prefills_per_step=2,
        )
    )
    s.enqueue(0, U64_MAX)
    s.enqueue(U64_MAX, 2**63)
    step = s.next_step(U64_MAX)
    assert step.decode_tokens == U64_MAX - 1
    assert chunks_of(step) == [(0, 0, 1, False)]
    s2 = backend.Scheduler(
        backend.Config(
            chunk_size=U64_MAX, token_budget=U64_MAX, max_prefills_per_step=2, max_decode_tokens=0
        )
    )
    s2.enqueue(0, 2**63)
    s2.enqueue(U64_MAX, U64_MAX)
    step = s2.next_step(U64_MAX)
    assert step.decode_tokens == 0
    assert chunks_of(step) == [(0, 0, 2**63, True), (U64_MAX, 0, 2**63 - 1, False)]
    assert step.prefill_tokens == U64_MAX
    assert chunks_of(s2.next_step()) == [(U64_MAX, 2**63 - 1, 2**63, True)]


@pytest.mark.parametrize("value", [2**64, 2**64 + 1, 2**128])
def test_total_tokens_above_u64_is_overflow(backend: ModuleType, value: int) -> None:
    s = backend.Scheduler()
    with pytest.raises(OverflowError) as info:
        s.enqueue(1, value)
    assert str(info.value) == msg("above_u64", name="total_tokens", value=value)
    assert len(s) == 0


# --------------------------------------------------------------------------- decode counts


@pytest.mark.parametrize("interleave", [True, False])
def test_active_decode_count_at_u64_max(backend: ModuleType, interleave: bool) -> None:
    s = backend.Scheduler(backend.Config(max_decode_tokens=U64_MAX, interleave_decode=interleave))
    step = s.next_step(U64_MAX)
    assert step.decode_tokens == (U64_MAX if interleave else 0)
    s = backend.Scheduler()
    assert s.next_step(U64_MAX).decode_tokens == 128
    s = backend.Scheduler(backend.Config(max_decode_tokens=5, token_budget=U64_MAX))
    assert s.next_step(U64_MAX).decode_tokens == 5
    with pytest.raises(OverflowError) as info:
        s.next_step(2**64)
    assert str(info.value) == msg("above_u64", name="active_decode_count", value=2**64)


# --------------------------------------------------------------------------- ids and priorities


def test_ids_zero_and_u64_max(backend: ModuleType) -> None:
    s = backend.Scheduler(backend.Config(chunk_size=3))
    s.enqueue(0, 4)
    s.enqueue(U64_MAX, 2)
    assert 0 in s
    assert U64_MAX in s
    assert 2**64 not in s
    assert -1 not in s
    assert s.state(U64_MAX).request_id == U64_MAX
    assert chunks_of(s.next_step()) == [(0, 0, 3, False)]
    assert chunks_of(s.next_step()) == [(0, 3, 1, True)]
    assert chunks_of(s.next_step()) == [(U64_MAX, 0, 2, True)]
    assert s.drain_completed() == 2
    s.enqueue(U64_MAX, 1)
    assert s.abort(U64_MAX).request_id == U64_MAX
    with pytest.raises(KeyError) as info:
        s.abort(U64_MAX)
    assert info.value.args == (msg("unknown_request", request_id=U64_MAX),)
    with pytest.raises(OverflowError) as info2:
        s.enqueue(2**64, 1)
    assert str(info2.value) == msg("above_u64", name="request_id", value=2**64)


def test_priority_limits(backend: ModuleType) -> None:
    s = backend.Scheduler(backend.Config(chunk_size=10))
    s.enqueue(1, 1, priority=I64_MAX)
    s.enqueue(2, 1, priority=0)
    s.enqueue(3, 1, priority=I64_MIN)
    assert [s.next_step().prefill_request_id for _ in range(3)] == [3, 2, 1]
    for bad in (I64_MAX + 1, I64_MIN - 1):
        with pytest.raises(OverflowError) as info:
            s.enqueue(4, 1, priority=bad)
        assert str(info.value) == msg("outside_i64", name="priority", value=bad)


# --------------------------------------------------------------------------- config limits


def test_chunk_size_and_budget_at_u64_max(backend: ModuleType) -> None:
    c = backend.Config(chunk_size=U64_MAX, token_budget=U64_MAX, max_prefills_per_step=U64_MAX)
    assert (c.chunk_size, c.token_budget, c.max_prefills_per_step) == (U64_MAX,) * 3
    c2 = backend.Config(max_decode_tokens=U64_MAX - 1, token_budget=U64_MAX)
    assert c2.max_decode_tokens == U64_MAX - 1
    for name in ("chunk_size", "token_budget", "max_decode_tokens", "max_prefills_per_step"):
        with pytest.raises(OverflowError) as info:
            backend.Config(**{name: 2**64})
        assert str(info.value) == msg("above_u64", name=name, value=2**64)


# --------------------------------------------------------------------------- counters


@pytest.mark.parametrize("start", [2**64 - 2, 2**64 - 1, 2**64, 2**100])
def test_counters_restored_near_2_64_continue_exactly(backend: ModuleType, start: int) -> None:
    state = state_with(
        backend,
        backend.Config(chunk_size=U64_MAX),
        step_index=start,
        chunks_scheduled=start,
        tokens_prefilled=start,
    )
    s = backend.Scheduler.from_state(state)
    s.enqueue(1, U64_MAX)
    s.enqueue(2, 3)
    a, b, c = steps(s, 3)
    assert (a.step_index, b.step_index, c.step_index) == (start, start + 1, start + 2)
    assert s.chunks_scheduled() == start + 2
    assert s.tokens_prefilled() == start + U64_MAX + 3
    exported = s.to_state()
    assert exported["step_index"] == start + 3
    assert exported["tokens_prefilled"] == start + U64_MAX + 3
    assert repr(s).endswith(f"next_step_index={start + 3})")


@pytest.mark.parametrize("name", ["step_index", "chunks_scheduled", "tokens_prefilled"])
def test_counters_restore_at_counter_max(backend: ModuleType, name: str) -> None:
    s = backend.Scheduler.from_state(state_with(backend, **{name: COUNTER_MAX}))
    assert s.to_state()[name] == COUNTER_MAX
    if name == "step_index":
        assert repr(s).endswith(f"next_step_index={COUNTER_MAX})")
    elif name == "chunks_scheduled":
        assert s.chunks_scheduled() == COUNTER_MAX
    else:
        assert s.tokens_prefilled() == COUNTER_MAX


def test_counters_go_past_counter_max_exactly(backend: ModuleType) -> None:
    """Restored at the limit, a run goes on exactly: no wrap, no saturation."""
    s = backend.Scheduler.from_state(
        state_with(
            backend,
            backend.Config(chunk_size=U64_MAX, token_budget=U64_MAX, max_prefills_per_step=2),
            step_index=COUNTER_MAX,
            chunks_scheduled=COUNTER_MAX,
            tokens_prefilled=COUNTER_MAX,
        )
    )
    s.enqueue(1, U64_MAX)
    s.enqueue(2, 5)
    first, second = steps(s, 2)
    assert (first.step_index, second.step_index) == (COUNTER_MAX, COUNTER_MAX + 1)
    assert chunks_of(first) == [(1, 0, U64_MAX, True)]
    assert chunks_of(second) == [(2, 0, 5, True)]
    assert s.chunks_scheduled() == COUNTER_MAX + 2
    assert s.tokens_prefilled() == COUNTER_MAX + U64_MAX + 5
    state = s.to_state()
    assert state["step_index"] == COUNTER_MAX + 2
    assert repr(s).endswith(f"next_step_index={COUNTER_MAX + 2})")


def _past_counter_max(mod: ModuleType) -> tuple[str, Any]:
    """Restore at COUNTER_MAX, step once, and restore the scheduler's own state again."""
    s = mod.Scheduler.from_state(state_with(mod, step_index=COUNTER_MAX))
    s.enqueue(1, 5)
    s.next_step()
    state = s.to_state()
    try:
        again = mod.Scheduler.from_state(state)
    except OverflowError as exc:
        return "OverflowError: " + str(exc), state
    return repr(again), state


def test_past_counter_max_both_backends_agree() -> None:
    assert _past_counter_max(R) == _past_counter_max(P)


def test_scheduler_past_counter_max_is_not_restorable(backend: ModuleType) -> None:
    """The documented rule: restored counters stop at COUNTER_MAX, so a scheduler whose run
    carried one past it exports a state that from_state (and pickle) reject, clearly."""
    outcome, state = _past_counter_max(backend)
    assert state["step_index"] == COUNTER_MAX + 1
    assert outcome == "OverflowError: " + message(
        "above_counter", name="state['step_index']", value=COUNTER_MAX + 1
    )


def test_copy_past_counter_max_agrees() -> None:
    outcomes = []
    for mod in (R, P):
        s = mod.Scheduler.from_state(state_with(mod, step_index=COUNTER_MAX))
        s.next_step()
        for how in (copy.copy, copy.deepcopy):
            try:
                outcomes.append((mod.__name__, repr(how(s))))
            except OverflowError as exc:
                outcomes.append((mod.__name__, f"OverflowError: {exc}"))
    assert [o[1] for o in outcomes[:2]] == [o[1] for o in outcomes[2:]]


@pytest.mark.parametrize("name", ["step_index", "chunks_scheduled", "tokens_prefilled"])
@pytest.mark.parametrize("value", [COUNTER_MAX + 1, U128_MAX, 2**128, 2**200])
def test_counters_above_counter_max_rejected(backend: ModuleType, name: str, value: int) -> None:
    with pytest.raises(OverflowError) as info:
        backend.Scheduler.from_state(state_with(backend, **{name: value}))
    assert type(info.value) is OverflowError
    assert str(info.value) == msg("above_counter", name=f"state[{name!r}]", value=value)


def test_step_index_field_limits(backend: ModuleType) -> None:
    assert backend.Step(step_index=U128_MAX, decode_tokens=U64_MAX).step_index == U128_MAX
    with pytest.raises(OverflowError) as info:
        backend.Step(step_index=U128_MAX + 1, decode_tokens=0)
    assert str(info.value) == msg("above_u128", name="step_index", value=U128_MAX + 1)


# --------------------------------------------------------------------------- states


def test_state_fields_at_the_limits(backend: ModuleType) -> None:
    st_ = backend.PrefillChunkState(
        U64_MAX, U64_MAX, cached_tokens=U64_MAX - 3, priority=I64_MIN, processed_tokens=U64_MAX - 2
    )
    assert (st_.processed_tokens, st_.remaining()) == (U64_MAX - 2, 2)
    st_.advance(U64_MAX)  # clamps at total_tokens instead of overflowing
    assert (st_.processed_tokens, st_.remaining(), st_.is_complete) == (U64_MAX, 0, True)
    assert st_.next_chunk_size(backend.Config(chunk_size=U64_MAX)) == 0
    with pytest.raises(OverflowError):
        st_.advance(2**64)


def test_progress_agrees_past_2_53() -> None:
    """``progress()`` is ``float(processed) / float(total)`` on both backends, bit for bit."""
    cases = [
        (12259314496056285, 15606575661721247),
        (9650935854226385, 24299175216621614),
        (3, U64_MAX),
        (U64_MAX - 1, U64_MAX),
        (2**63 + 1, U64_MAX),
    ]
    for processed, total in cases:
        a = R.PrefillChunkState(1, total, processed_tokens=processed).progress()
        b = P.PrefillChunkState(1, total, processed_tokens=processed).progress()
        assert a == b == float(processed) / float(total)


# --------------------------------------------------------------------------- differential fuzz

EDGE = [
    0,
    1,
    2,
    2**32,
    2**53 + 1,
    I64_MAX,
    2**63,
    U64_MAX - 1,
    U64_MAX,
    2**64,
    2**65,
    U128_MAX,
    2**128,
    -1,
    I64_MIN,
    I64_MIN - 1,
]
edge = st.sampled_from(EDGE)


def _outcome(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, ...]:
    try:
        value = fn(*args, **kwargs)
    except Exception as exc:
        return "raise", type(exc).__name__, exc.args
    return "ok", repr(value)


def _contains(s: Any, key: Any) -> bool:
    return key in s


def _scenario(mod: ModuleType, cfg: dict[str, Any], ops: list[tuple[Any, ...]]) -> list[Any]:
    out: list[Any] = []
    made = _outcome(mod.Config, **cfg)
    out.append(made)
    if made[0] != "ok":
        return out
    s = mod.Scheduler(mod.Config(**cfg))
    for op in ops:
        kind, args = op[0], op[1:]
        if kind == "enqueue":
            rid, total, cached, prio = args
            out.append(_outcome(s.enqueue, rid, total, cached_tokens=cached, priority=prio))
        elif kind == "step":
            out.append(_outcome(s.next_step, *args))
        elif kind == "abort":
            out.append(_outcome(s.abort, *args))
        elif kind == "state":
            out.append(_outcome(s.state, *args))
            out.append(_outcome(_contains, s, *args))
        elif kind == "advance":
            rid, total, processed, n = args
            made = _outcome(mod.PrefillChunkState, rid, total, processed_tokens=processed)
            out.append(made)
            if made[0] == "ok":
                ps = mod.PrefillChunkState(rid, total, processed_tokens=processed)
                out.append(_outcome(ps.advance, n))
                out.append((repr(ps), ps.progress(), ps.remaining()))
        out.append(repr(s))
    out.append(_outcome(s.to_state))
    out.append(_outcome(lambda: mod.Scheduler.from_state(s.to_state()).to_state()))
    return out


ops = st.lists(
    st.one_of(
        st.tuples(st.just("enqueue"), edge, edge, st.sampled_from([0, 1, 2**63, U64_MAX]), edge),
        st.tuples(st.just("step"), edge),
        st.tuples(st.just("abort"), edge),
        st.tuples(st.just("state"), edge),
        st.tuples(st.just("advance"), edge, edge, edge, edge),
    ),
    max_size=25,
)
cfgs = st.fixed_dictionaries(
    {},
    optional={
        "chunk_size": edge,
        "max_decode_tokens": edge,
        "interleave_decode": st.booleans(),
        "token_budget": st.one_of(st.none(), edge),
        "max_prefills_per_step": edge,
    },
)


@given(cfg=cfgs, ops=ops)
def test_edge_values_agree_and_never_crash(cfg: dict[str, Any], ops: list[tuple[Any, ...]]) -> None:
    """Limit values in every argument: no crash, no hang, identical outcomes on both backends,
    and every rejection is one of the documented classes."""
    rust = _scenario(R, cfg, ops)
    pure = _scenario(P, cfg, ops)
    assert rust == pure
    for item in rust:
        if isinstance(item, tuple) and item[0] == "raise":
            assert item[1] in ("ValueError", "OverflowError", "KeyError"), item


# --------------------------------------------------------------------------- panics


def test_a_rust_panic_would_surface_as_a_python_exception() -> None:
    """No input reaches a Rust panic (the tests above and the stateful test try them all), so
    a panic cannot be triggered from Python to watch it surface. What can be checked:

    * the extension is built with unwinding panics (no ``panic = "abort"`` in any Cargo
      profile), which is what lets PyO3 catch a panic at the FFI boundary and raise
      ``pyo3_runtime.PanicException`` (a ``BaseException``) instead of aborting;
    * PyO3's panic type is linked into the compiled module;
    * a poisoned scheduler lock (what a panic inside a call would leave) is mapped to a
      ``RuntimeError`` with a clear message rather than a second panic.

    ``pyo3_runtime`` itself is created lazily by PyO3 on the first panic and is never
    importable before one, so it is not imported here.
    """
    tomllib = pytest.importorskip("tomllib")
    manifests = [ROOT / "Cargo.toml", *sorted((ROOT / "rust").glob("*/Cargo.toml"))]
    assert len(manifests) >= 3
    for manifest in manifests:
        data = tomllib.loads(manifest.read_text(encoding="utf-8"))
        for name, profile in data.get("profile", {}).items():
            assert profile.get("panic", "unwind") == "unwind", (manifest, name)
    binary = Path(R.__file__).read_bytes()
    assert b"pyo3_runtime.PanicException" in binary
    assert b"the scheduler is unusable: an earlier call panicked" in binary
    assert "pyo3_runtime" not in sys.modules
