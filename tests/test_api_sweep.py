"""Adversarial calls of the scheduler APIs that the other suites did not reach: each test
failed on a backend before its fix (issue 21)."""

from __future__ import annotations

import copy
import pickle

import pytest

import chunked_prefill._core as rust
import chunked_prefill.pure as pure_planner
import chunked_prefill.pure_serving as pure_serving

CLASSES = (
    "Config",
    "Scheduler",
    "Step",
    "Chunk",
    "PrefillChunkState",
    "ServingConfig",
    "ServingScheduler",
    "Batch",
    "BatchItem",
    "RequestView",
)


def public_class(backend: str, name: str) -> type:
    if backend == "rust":
        return getattr(rust, name)  # type: ignore[no-any-return]
    module = pure_planner if hasattr(pure_planner, name) else pure_serving
    return getattr(module, name)  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", CLASSES)
@pytest.mark.parametrize("backend", ["rust", "pure"])
def test_no_class_can_be_subclassed(backend: str, name: str) -> None:
    # The Rust classes are final (and typed @final in _core.pyi); the twin's were open, so a
    # subclass worked on one backend only.
    cls = public_class(backend, name)
    text = f"type '{cls.__module__}.{name}' is not an acceptable base type"
    with pytest.raises(TypeError) as info:
        type("Sub", (cls,), {})
    assert str(info.value) == text
    with pytest.raises(TypeError) as info:

        class Sub(cls):  # type: ignore[valid-type, misc]
            pass

    assert str(info.value) == text


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
@pytest.mark.parametrize("backend", ["rust", "pure"])
def test_a_request_view_is_refused_by_pickle_and_copy(backend: str, protocol: int) -> None:
    # RequestView has no constructor: the twin pickled it from protocol 2 into bytes that no
    # load could read ("No constructor defined"), and said so for copy() too.
    module = rust if backend == "rust" else pure_serving
    s = module.ServingScheduler(module.ServingConfig(num_blocks=8, block_size=2))
    s.add_request(1, [1, 2, 3], 2)
    view = s.request(1)
    qualified = f"'{type(view).__module__}.RequestView'"
    named = "'RequestView'" if protocol < 2 else qualified
    with pytest.raises(TypeError) as info:
        pickle.dumps(view, protocol)
    assert str(info.value) == f"cannot pickle {named} object"
    for copier in (copy.copy, copy.deepcopy):
        with pytest.raises(TypeError) as info:
            copier(view)
        assert str(info.value) == f"cannot pickle {qualified} object"
