"""``TokenPlan.known``, built column by column, is the per-request rule: a request shares
tokens when it is in a group with a prefix, has trace hashes, or its session has another
turn."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from chunked_prefill.sim import Workload
from chunked_prefill.sim.workload.tokens import TokenPlan


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    n = draw(st.integers(1, 12))
    column = st.lists(st.integers(0, 3), min_size=n, max_size=n)
    group = draw(st.one_of(st.just([]), st.lists(st.integers(-1, 2), min_size=n, max_size=n)))
    session = draw(st.one_of(st.just([]), column))
    hashes = st.lists(st.integers(0, 5), max_size=3)
    hash_ids = draw(st.one_of(st.just([]), st.lists(hashes, min_size=n, max_size=n)))
    return Workload(
        arrival_s=tuple(float(i) for i in range(n)),
        prompt_tokens=(64,) * n,
        output_tokens=(4,) * n,
        group=tuple(group),
        session=tuple(session),
        hash_ids=tuple(tuple(h) for h in hash_ids),
        prefix_tokens=draw(st.sampled_from([0, 16])) if group else 0,
        hash_block=16 if hash_ids else 0,
    )


@given(workloads())
def test_known_is_the_per_request_rule(wl: Workload) -> None:
    plan = TokenPlan(wl)
    if not wl.shares_tokens:
        assert plan.known == []
        return
    expected = [
        (wl.prefix_tokens > 0 and bool(wl.group) and wl.group[i] >= 0)
        or (bool(wl.hash_ids) and len(wl.hash_ids[i]) > 0)
        or (bool(wl.session) and wl.session.count(wl.session[i]) > 1)
        for i in range(len(wl))
    ]
    assert plan.known == expected
    assert all(type(k) is bool for k in plan.known)
