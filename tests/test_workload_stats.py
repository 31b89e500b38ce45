"""A workload's kept column figures (``Workload._stats``) are its columns' own: those
``default_workload`` gives from its arrays, and those computed on first use for any other
workload, against plain Python over the columns."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunked_prefill.sim import Workload, default_workload
from chunked_prefill.sim.workload.types import I64_MAX, _ColumnStats


def _by_hand(w: Workload) -> _ColumnStats:
    prompt, output = list(w.prompt_tokens), list(w.output_tokens)
    longest = max(output)
    return _ColumnStats(
        max_prompt=max(prompt),
        max_output=longest,
        longest_output_at=output.index(longest),
        total_prompt=sum(prompt),
        total_output=sum(output),
        any_priority=any(q != 0 for q in w.priority),
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"requests": 1},
        {"requests": 2000, "seed": 3},
        {"requests": 500, "length_dist": "fixed", "input_len": 7, "output_len": 9},
        {"requests": 500, "length_dist": "uniform", "seed": 5},
        {"requests": 300, "output_scale": 2.5},
        {"requests": 300, "prefix_tokens": 64, "prefix_groups": 3},
    ],
)
def test_default_workload_figures_are_its_columns(kwargs: dict[str, object]) -> None:
    w = default_workload(**kwargs)  # type: ignore[arg-type]
    assert w._stats() == _by_hand(w)


lengths = st.integers(1, I64_MAX)


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.tuples(lengths, lengths, st.integers(-(2**63), 2**63 - 1)), min_size=1, max_size=30
    )
)
def test_figures_of_any_workload_are_its_columns(rows: list[tuple[int, int, int]]) -> None:
    w = Workload(
        arrival_s=tuple(float(i) for i in range(len(rows))),
        prompt_tokens=tuple(p for p, _, _ in rows),
        output_tokens=tuple(o for _, o, _ in rows),
        priority=tuple(q for _, _, q in rows),
    )
    assert w._stats() == _by_hand(w)
    assert w._stats() is w._stats()  # kept, not recomputed


def test_an_empty_workload_has_zero_figures() -> None:
    w = Workload(arrival_s=(), prompt_tokens=(), output_tokens=())
    assert w._stats() == _ColumnStats(0, 0, 0, 0, 0, False)
