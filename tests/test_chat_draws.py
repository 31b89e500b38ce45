"""The core's draws of the synthetic chat workload (``_core.chat_workload``) are numpy's:
the same columns, figures and range verdict as ``numpy.random.default_rng(seed)`` gives
through the Python path, for any seed, size, rate and length spec; and
``default_workload`` gives the same workload whichever draws it."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunked_prefill.sim import default_workload
from chunked_prefill.sim.workload import synthetic
from chunked_prefill.sim.workload.synthetic import ChatWorkloadSpec
from chunked_prefill.sim.workload.types import MAX_ARRIVAL_S, MAX_TOKENS, _ColumnStats

_core = pytest.importorskip("chunked_prefill._core", reason="the core is not built")


def _numpy(seed: int, spec: ChatWorkloadSpec, n: int, rate: float) -> tuple[Any, ...]:
    columns, in_range, stats = synthetic._plain_columns(*synthetic._chat_draws(seed, spec, n, rate))
    return columns, in_range, stats


def _core_draws(seed: int, spec: ChatWorkloadSpec, n: int, rate: float) -> tuple[Any, ...]:
    return synthetic._plain_chat_columns(seed, spec, n, rate)


def _assert_same(seed: int, spec: ChatWorkloadSpec, n: int, rate: float) -> None:
    want, got = _numpy(seed, spec, n, rate), _core_draws(seed, spec, n, rate)
    for name in ("arrival_s", "prompt_tokens", "output_tokens"):
        w, g = want[0][name], got[0][name]
        assert type(g) is tuple and len(g) == n
        first = next((i for i, (a, b) in enumerate(zip(w, g)) if a != b), None)
        assert first is None, f"{name}[{first}]: numpy {w[first]!r}, core {g[first]!r}"
    assert got[1] == want[1]
    assert got[2] == want[2]


@pytest.mark.parametrize("seed", [0, 1, 42, 2**32 - 1, 2**32, 2**63 + 12345, 2**64 - 1])
def test_core_draws_are_numpys_for_every_seed_width(seed: int) -> None:
    _assert_same(seed, ChatWorkloadSpec(), 5000, 6.0)


def test_core_draws_are_numpys_over_a_long_run() -> None:
    # 200 000 requests draw 600 000 normals and 200 000 exponentials: the
    # ziggurats' rare branches (the tail, the wedges) are taken hundreds of times.
    _assert_same(7, ChatWorkloadSpec(), 200_000, 6.0)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**64 - 1),
    n=st.integers(1, 400),
    rate=st.sampled_from([1e-300, 1e-9, 0.5, 6.0, 1e6, math.inf]),
    medians=st.tuples(*[st.floats(1e-3, 1e7) for _ in range(3)]),
    sigmas=st.tuples(*[st.sampled_from([0.0, 0.01, 0.9, 3.0, 60.0, 100.0]) for _ in range(3)]),
    long_fraction=st.sampled_from([0.0, 0.08, 0.5, 1.0]),
    maxima=st.tuples(st.integers(1, 2**53), st.integers(1, 2**53)),
)
def test_core_draws_are_numpys_for_any_spec(
    seed: int,
    n: int,
    rate: float,
    medians: tuple[float, float, float],
    sigmas: tuple[float, float, float],
    long_fraction: float,
    maxima: tuple[int, int],
) -> None:
    spec = ChatWorkloadSpec(
        chat_prompt_median=medians[0],
        chat_prompt_sigma=sigmas[0],
        long_fraction=long_fraction,
        long_prompt_median=medians[1],
        long_prompt_sigma=sigmas[1],
        max_prompt_tokens=maxima[0],
        output_median=medians[2],
        output_sigma=sigmas[2],
        max_output_tokens=maxima[1],
    )
    _assert_same(seed, spec, n, rate)


def test_range_verdict_follows_the_limits() -> None:
    # 1e-300 req/s puts the second arrival far past MAX_ARRIVAL_S; lengths up to 2**53
    # pass MAX_TOKENS when it is lower: the verdict is the core's own check of both.
    spec = ChatWorkloadSpec()
    fields = (256.0, 1.1, 0.08, 3000.0, 0.35, 8192.0, 128.0, 0.9, 2048.0)
    kw = {"max_arrival_s": MAX_ARRIVAL_S, "max_tokens": MAX_TOKENS}
    assert _core.chat_workload(0, 100, 6.0, fields, **kw)[4] is True
    assert _core.chat_workload(0, 100, 1e-300, fields, **kw)[4] is False
    assert _core.chat_workload(0, 100, 6.0, fields, max_arrival_s=1.0, max_tokens=10**9)[4] is False
    assert _core.chat_workload(0, 100, 6.0, fields, max_arrival_s=1e9, max_tokens=100)[4] is False
    assert _numpy(0, spec, 100, 1e-300)[1] is False


def test_shared_int_objects_as_numpys_path() -> None:
    # Equal lengths are one object (8 bytes a request in the tuple, not 36), both when the
    # lengths are below the count (a list of every int) and above it (a map).
    _, prompt, output, _, _ = _core.chat_workload(
        3,
        2000,
        6.0,
        (256.0, 1.1, 0.08, 3000.0, 0.35, 8192.0, 128.0, 0.9, 2048.0),
        max_arrival_s=MAX_ARRIVAL_S,
        max_tokens=MAX_TOKENS,
    )
    for column in (prompt, output):
        assert len({id(v) for v in column}) == len(set(column))
    big = _core.chat_workload(
        3,
        50,
        6.0,
        (1e6, 0.1, 0.0, 1.0, 0.0, 2.0**53, 1e6, 0.0, 2.0**53),
        max_arrival_s=MAX_ARRIVAL_S,
        max_tokens=MAX_TOKENS,
    )
    assert set(big[2]) == {1_000_000} and len({id(v) for v in big[2]}) == 1


def test_default_workload_is_the_same_with_numpys_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    drawn = default_workload(3000, rate=4.0, seed=11)
    assert drawn._stats() == _ColumnStats.of(drawn)  # the core's figures are the columns'
    monkeypatch.setenv("CHUNKED_PREFILL_BACKEND", "pure")
    by_numpy = default_workload(3000, rate=4.0, seed=11)
    assert by_numpy == drawn
    assert by_numpy._stats() == drawn._stats()
