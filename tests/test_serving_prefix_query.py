"""``ServingScheduler.cached_prefix_tokens``: what the prefix cache holds of a prompt, asked
without changing anything, identical on both backends."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np
import pytest

from serving_invariants import SERVING_BACKENDS


@pytest.fixture(params=sorted(SERVING_BACKENDS))
def backend(request: pytest.FixtureRequest) -> ModuleType:
    """The serving scheduler's module of one backend."""
    return SERVING_BACKENDS[request.param]


def _sched(backend: ModuleType, prefix_caching: bool = True) -> Any:
    config = backend.ServingConfig(
        num_blocks=16,
        block_size=4,
        token_budget=64,
        chunk_size=64,
        max_running=8,
        prefix_caching=prefix_caching,
    )
    return backend.ServingScheduler(config)


def _run_one(s: Any, rid: int, prompt: list[int], salt: int = 0) -> None:
    s.add_request(rid, prompt, 1, cache_salt=salt)
    s.update(s.schedule(), token_ids=[7])


def test_counts_leading_full_blocks_held_or_free(backend: ModuleType) -> None:
    s = _sched(backend)
    prompt = list(range(100, 110))  # 10 tokens: blocks 0 and 1 are full
    assert s.cached_prefix_tokens(prompt) == 0
    _run_one(s, 1, prompt)
    assert s.num_free_blocks == 16  # finished: free, still hashed
    assert s.cached_prefix_tokens(prompt) == 8
    assert s.cached_prefix_tokens(np.array(prompt[:8], dtype=np.uint32)) == 8
    assert s.cached_prefix_tokens(prompt[:7]) == 4
    assert s.cached_prefix_tokens(prompt[:3]) == 0
    assert s.cached_prefix_tokens(list(range(100, 140))) == 8
    assert s.cached_prefix_tokens([*prompt[:5], 1, *prompt[6:]]) == 4
    assert s.cached_prefix_tokens(prompt, cache_salt=3) == 0
    assert s.cached_prefix_tokens(10) == 0  # a bare length has no ids
    assert s.cached_prefix_tokens([]) == 0


def test_changes_nothing(backend: ModuleType) -> None:
    s = _sched(backend)
    _run_one(s, 1, list(range(12)))
    _run_one(s, 2, list(range(50, 62)), salt=5)
    before = s.to_state()
    assert s.cached_prefix_tokens(list(range(12))) == 12
    assert s.cached_prefix_tokens(list(range(50, 62)), cache_salt=5) == 12
    assert s.to_state() == before


def test_nothing_is_cached_without_prefix_caching(backend: ModuleType) -> None:
    s = _sched(backend, prefix_caching=False)
    _run_one(s, 1, list(range(12)))
    assert s.cached_prefix_tokens(list(range(12))) == 0


@pytest.mark.parametrize(
    ("prompt", "salt", "error", "text"),
    [
        ("abc", 0, TypeError, "prompt must be a sequence of token ids or an int length, got str"),
        ([1, -1], 0, ValueError, r"prompt\[1\] must be a token id between 0 and 4294967295"),
        ([1], -1, ValueError, "cache_salt"),
    ],
)
def test_bad_arguments(
    backend: ModuleType, prompt: Any, salt: Any, error: type[Exception], text: str
) -> None:
    with pytest.raises(error, match=text):
        _sched(backend).cached_prefix_tokens(prompt, cache_salt=salt)
