"""A step of the same decodes shares the last batch's caller ids and ``sampling_ids`` tuple
(issue 25's host step); any change of the requests, or of the ids behind the core's, builds
them again, so what a batch names is always the caller's current ids."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from chunked_prefill import _core
from serving_invariants import SERVING_BACKENDS


@pytest.fixture(params=sorted(SERVING_BACKENDS))
def serving_backend(request: pytest.FixtureRequest) -> ModuleType:
    return SERVING_BACKENDS[request.param]


def _step(s: Any, tokens: int = 7) -> Any:
    batch = s.schedule()
    s.update(batch, token_ids=[tokens] * len(batch.sampling_ids))
    return batch


def _decoding(b: ModuleType, ids: list[Any], max_new_tokens: int = 50) -> Any:
    s = b.ServingScheduler(
        b.ServingConfig(num_blocks=64, block_size=4, token_budget=64, max_running=8)
    )
    for i in ids:
        s.add_request(i, [1, 2, 3], max_new_tokens)
    _step(s)  # the prompts: every request decodes from now on
    return s


def test_steps_of_the_same_decodes_share_one_sampling_tuple() -> None:
    s = _decoding(_core, ["a", 5, "c"])
    first = _step(s)
    second = s.schedule()
    assert second.sampling_ids == ("a", 5, "c")
    assert second.sampling_ids is first.sampling_ids
    assert second.request_ids == ("a", 5, "c")
    s.update(second, token_ids=[8, 8, 8])
    assert [s.request(i).num_generated for i in ("a", 5, "c")] == [3, 3, 3]


def test_a_new_decode_builds_the_tuple_again(serving_backend: ModuleType) -> None:
    s = _decoding(serving_backend, ["a", "b"])
    first = _step(s)
    s.add_request("c", [4], 50)
    second = _step(s)
    third = s.schedule()
    assert first.sampling_ids == ("a", "b")
    assert second.sampling_ids == ("a", "b", "c")
    assert third.sampling_ids == ("a", "b", "c")


def test_an_id_that_takes_a_finished_requests_place_is_named(serving_backend: ModuleType) -> None:
    # "x" finishes and "y" is tracked in its place (the binding reuses its internal index):
    # the next batch plans the same index, and must name "y".
    s = _decoding(serving_backend, ["x"], max_new_tokens=3)
    batch = _step(s)
    assert batch.sampling_ids == ("x",)
    finished = s.update(s.schedule(), token_ids=[9])
    assert finished == ["x"]
    s.add_request("y", [1, 2, 3], 2)
    planned = s.schedule()
    assert planned.request_ids == ("y",)
    assert planned.sampling_ids == ("y",)
    assert s.update(planned, token_ids=[4]) == []
    assert s.schedule().sampling_ids == ("y",)
