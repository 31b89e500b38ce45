"""Adversarial calls of the scheduler APIs that the other suites did not reach: each test
failed on a backend before its fix (issue 21)."""

from __future__ import annotations

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
