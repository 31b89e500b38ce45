"""What a host engine needs around the serving scheduler: the KV pool's size for a model on
a GPU, and the slot mapping a paged-attention kernel takes.

Neither holds a scheduling rule, so both backends share them. The simulator is imported
only when :func:`num_blocks_for` is called, and numpy only when it is given an array, so
``import chunked_prefill`` stays light.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
"""vLLM's default share of GPU memory for weights, activations and KV cache (the
simulator's ``DEFAULT_GPU_MEMORY_UTILIZATION``)."""


def num_blocks_for(
    model: str | os.PathLike[str],
    gpu: str | os.PathLike[str],
    *,
    tp: int = 1,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    block_size: int = 16,
    kv_cache_dtype: str = "auto",
    quantization: str | None = None,
) -> int:
    """The KV-cache blocks of ``block_size`` tokens one GPU of a ``tp``-way group holds for
    ``model`` on ``gpu``: what ``ServingConfig(num_blocks=...)`` takes, and the pool
    ``chunked-prefill simulate --model M --gpu G`` reports.

    ``model`` is a catalog name (or a Hugging Face id the catalog aliases) or a
    ``config.json`` path; ``gpu`` a catalog name or a GPU profile path. It is the
    simulator's derivation (:func:`chunked_prefill.sim.catalog.engine_for`): the GPU memory
    times ``gpu_memory_utilization``, minus the weights and activations, over the KV bytes
    per token. Raises the simulator's ``ModelConfigError`` for an unknown name or a bad
    file and ``EngineFitError`` when the weights leave no room.
    """
    from .sim.engines.catalog import engine_for

    _, memory = engine_for(
        model,
        gpu,
        tp,
        gpu_memory_utilization=gpu_memory_utilization,
        kv_cache_dtype=kv_cache_dtype,
        quantization=quantization,
    )
    blocks: int = memory.num_blocks(_count("block_size", block_size), gpu_memory_utilization)
    return blocks


def _count(name: str, value: object) -> int:
    """``value`` as a count of at least 1 (``bool`` refused, numpy integers accepted)."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}: {value!r}")
    count = int(value.__index__())
    if count < 1:
        raise ValueError(f"{name} must be at least 1, got {count}")
    return count


def _numpy_input(*values: object) -> Any:
    """numpy, if it is loaded and one of ``values`` is an array; else ``None``."""
    numpy = sys.modules.get("numpy")
    if numpy is not None and any(isinstance(v, numpy.ndarray) for v in values):
        return numpy
    return None


def slot_mapping(
    block_table: Sequence[int] | Any, positions: Sequence[int] | Any, block_size: int
) -> list[int] | Any:
    """The KV-cache slot of each of a request's ``positions``: ``block_table[p //
    block_size] * block_size + p % block_size``, the ``slot_mapping`` vLLM's paged
    attention kernels write new keys and values to.

    ``block_table`` is the request's block ids in position order
    (``ServingScheduler.block_table(id)``). Returns a list of ints, or a numpy ``int64``
    array when either argument is a numpy array. A negative position is a ``ValueError``,
    and so is one at or past ``len(block_table) * block_size`` (no block holds it yet).
    """
    size = _count("block_size", block_size)
    numpy = _numpy_input(block_table, positions)
    if numpy is not None:
        return _slot_mapping_numpy(numpy, block_table, positions, size)
    table = [int(b) for b in block_table]
    limit = len(table) * size
    slots = []
    for i, p in enumerate(positions):
        pos = _position(i, p, limit)
        slots.append(table[pos // size] * size + pos % size)
    return slots


def _position(i: int, value: object, limit: int) -> int:
    """Position ``i`` of ``positions``, checked against the ``limit`` the table covers."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        kind = type(value).__name__
        raise TypeError(f"positions[{i}] must be an int, got {kind}: {value!r}")
    pos = int(value.__index__())
    if not 0 <= pos < limit:
        raise ValueError(
            f"positions[{i}] must be between 0 and {limit - 1} (the block table's"
            f" {limit} slots), got {pos}"
        )
    return pos


def _slot_mapping_numpy(numpy: Any, block_table: Any, positions: Any, size: int) -> Any:
    table = numpy.asarray(block_table, dtype=numpy.int64).reshape(-1)
    pos = numpy.asarray(positions)
    if pos.dtype.kind not in "iu":
        raise TypeError(f"positions must hold ints, got an array of {pos.dtype}")
    pos = pos.astype(numpy.int64, copy=False).reshape(-1)
    limit = len(table) * size
    bad = numpy.flatnonzero((pos < 0) | (pos >= limit))
    if bad.size:
        # The same message as the list path, naming the first bad position.
        _position(int(bad[0]), int(pos[bad[0]]), limit)
    result: Any = table[pos // size] * size + pos % size
    return result


def batch_slot_mapping(scheduler: Any, batch: Any) -> list[int]:
    """The slot mapping of a whole ``batch``: for each item in item order, the slots of the
    positions it computes, ``[start, start + tokens)``, concatenated (the flattened
    ``slot_mapping`` of one forward pass). Call it after ``schedule()`` and before
    ``update()``, while every item's request still holds its blocks.
    """
    size = scheduler.config.block_size
    slots: list[int] = []
    for item in batch.items:
        table = scheduler.block_table(item.request_id)
        slots.extend(slot_mapping(table, range(item.start, item.start + item.tokens), size))
    return slots
