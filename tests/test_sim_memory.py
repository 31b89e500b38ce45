"""What keeps a long simulation's memory down (issue 25) gives the same answers: the
percentiles without weight arrays, lengths as shared int objects, counts of 0 returned empty."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from chunked_prefill.sim import ServingSimConfig, Workload, default_workload, simulate_serving
from chunked_prefill.sim.runs.results import Percentiles
from chunked_prefill.sim.workload.synthetic import shared_ints

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


def _inverted_cdf(values: list[float], weights: list[int]) -> tuple[float, float, float, float]:
    """p50, p90, p99 and max of the values each repeated ``weights[i]`` times, by hand."""
    expanded = sorted(v for v, w in zip(values, weights) for _ in range(w))
    n = len(expanded)
    p50, p90, p99 = (expanded[math.ceil(q * n / 100) - 1] for q in (50, 90, 99))
    return p50, p90, p99, expanded[-1]


@given(st.lists(finite, min_size=1, max_size=60))
def test_unweighted_percentiles_are_the_inverted_cdf(values: list[float]) -> None:
    got = Percentiles.of(np.array(values))
    assert (got.p50, got.p90, got.p99, got.max) == _inverted_cdf(values, [1] * len(values))
    assert got.count == len(values)
    assert got.mean == pytest.approx(math.fsum(values) / len(values), rel=1e-9, abs=1e-9)


@given(st.lists(st.tuples(finite, st.integers(1, 5)), min_size=1, max_size=40))
def test_weighted_percentiles_are_the_inverted_cdf(pairs: list[tuple[float, int]]) -> None:
    values, weights = [v for v, _ in pairs], [w for _, w in pairs]
    got = Percentiles.of(np.array(values), np.array(weights, dtype=np.int64))
    assert (got.p50, got.p90, got.p99, got.max) == _inverted_cdf(values, weights)
    assert got.count == sum(weights)
    total = math.fsum(v * w for v, w in pairs)
    assert got.mean == pytest.approx(total / sum(weights), rel=1e-9, abs=1e-9)


@pytest.mark.parametrize(
    "values",
    [[], [7], [3, 3], [5, 1, 5, 1, 2, 5], [10**6, 3, 10**6], [-4, 2, -4], [2**70, 2**70, 1]],
)
def test_shared_ints_are_the_values_with_equal_ones_one_object(values: list[int]) -> None:
    column = np.array(values, dtype=object if values and max(values) > 2**62 else np.int64)
    shared = shared_ints(column)
    assert shared == tuple(values)
    assert all(type(v) is int for v in shared)
    firsts: dict[int, int] = {}
    for v in shared:
        assert firsts.setdefault(v, id(v)) == id(v)


def test_default_workload_lengths_share_their_objects() -> None:
    w = default_workload(2000, seed=3)
    assert len({id(v) for v in w.prompt_tokens}) == len(set(w.prompt_tokens))
    assert len({id(v) for v in w.output_tokens}) == len(set(w.output_tokens))


def test_counts_that_are_all_zero_come_back_as_zeros_from_empty_bytes() -> None:
    from chunked_prefill import _core

    w = Workload((0.0, 0.5, 1.0), (40, 50, 60), (3, 2, 4), source="three")
    plain = (b"", b"", 0, b"", b"", 0, b"", b"")
    options = dict(
        num_blocks=64, block_size=16, token_budget=512, chunk_size=512,
        max_prefills_per_step=4, max_running=8, watermark=0.0, prefix_caching=True,
        engine=(0.01, 0.0, 0.0, 0.0, 0.0, 0.0), max_steps=1000,
    )  # fmt: skip
    raw = _core.simulate_serving(w.arrival_s, w.prompt_tokens, w.output_tokens, *plain, **options)
    for key in ("cached_tokens", "preemptions", "recomputed_tokens", "replica"):
        assert raw[key] == b"", key
    assert len(raw["first_token"]) == 3 * 8
    (result,) = simulate_serving(w, ServingSimConfig(num_blocks=64))
    assert result.serving is not None
    assert result.serving.preempted.tolist() == [0, 0, 0]
    assert result.serving.replica.tolist() == [0, 0, 0]
    assert result.serving.preemptions == 0 and result.serving.prefix_hit_rate == 0.0


def test_lengths_of_another_count_are_refused_by_name() -> None:
    from chunked_prefill import _core

    plain = (b"", b"", 0, b"", b"", 0, b"", b"")
    options = dict(
        num_blocks=64, block_size=16, token_budget=512, chunk_size=512,
        max_prefills_per_step=4, max_running=8, watermark=0.0, prefix_caching=True,
        engine=(0.01, 0.0, 0.0, 0.0, 0.0, 0.0), max_steps=1000,
    )  # fmt: skip
    with pytest.raises(
        ValueError, match=r"^output_tokens must hold 2 values \(one per arrival\), got 1$"
    ):
        _core.simulate_serving((0.0, 1.0), (4, 5), (3,), *plain, **options)
