"""chunked-prefill: a chunked-prefill step planner for LLM serving loops.

The top-level names come from the Rust extension (``chunked_prefill._core``) unless the
environment variable ``CHUNKED_PREFILL_BACKEND`` is ``pure``, which selects the
pure-Python twin (``chunked_prefill.pure`` and ``chunked_prefill.pure_serving``).
``BACKEND`` says which one is in use.
"""

from __future__ import annotations

import os

_requested = os.environ.get("CHUNKED_PREFILL_BACKEND", "rust").strip().lower() or "rust"
if _requested == "rust":
    from ._core import (
        I64_MAX,
        I64_MIN,
        STATE_VERSION,
        U64_MAX,
        Batch,
        BatchItem,
        Chunk,
        Config,
        PrefillChunkState,
        RequestView,
        Scheduler,
        ServingConfig,
        ServingScheduler,
        Step,
        __version__,
    )
elif _requested == "pure":
    from .pure import (  # type: ignore[assignment]
        I64_MAX,
        I64_MIN,
        STATE_VERSION,
        U64_MAX,
        Chunk,
        Config,
        PrefillChunkState,
        Scheduler,
        Step,
        __version__,
    )
    from .pure_serving import (  # type: ignore[assignment]
        Batch,
        BatchItem,
        RequestView,
        ServingConfig,
        ServingScheduler,
    )
else:
    _given = os.environ["CHUNKED_PREFILL_BACKEND"]
    raise ImportError(f"CHUNKED_PREFILL_BACKEND must be 'rust' or 'pure', got {_given!r}")

from .host import batch_slot_mapping, num_blocks_for, slot_mapping  # noqa: E402

BACKEND: str = _requested
"""Which backend the top-level names come from: ``"rust"`` or ``"pure"``."""

# The original Rust names, as aliases of the same classes.
ChunkedPrefillConfig = Config
ChunkedPrefillScheduler = Scheduler
ChunkedStep = Step

__all__ = [
    "BACKEND",
    "I64_MAX",
    "I64_MIN",
    "STATE_VERSION",
    "U64_MAX",
    "Batch",
    "BatchItem",
    "Chunk",
    "ChunkedPrefillConfig",
    "ChunkedPrefillScheduler",
    "ChunkedStep",
    "Config",
    "PrefillChunkState",
    "RequestView",
    "Scheduler",
    "ServingConfig",
    "ServingScheduler",
    "Step",
    "__version__",
    "batch_slot_mapping",
    "num_blocks_for",
    "slot_mapping",
]
