"""The paged KV cache of :class:`~chunked_prefill.hf.PagedEngine`: one tensor of blocks.

A *slot* is one token's place in the pool: ``block * block_size + offset``. The engine turns
a request's block table into the slots of the positions it reads or writes, so the pool
itself knows nothing of requests.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import torch

from ._args import as_count, check_model, reject, text_config


class KVPool:
    """Keys and values of ``num_blocks`` blocks of ``block_size`` tokens, for every layer.

    ``data`` is one tensor ``[num_layers, 2, num_blocks, block_size, kv_heads, head_dim]``
    (index 0 of the second axis holds keys, 1 values) on the model's device and dtype, so
    :meth:`keys` and :meth:`values` of a layer are ``[num_blocks, block_size, kv_heads,
    head_dim]`` views of it.
    """

    def __init__(
        self,
        *,
        num_layers: int,
        num_blocks: int,
        block_size: int,
        kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        sizes = {
            "num_layers": num_layers,
            "num_blocks": num_blocks,
            "block_size": block_size,
            "kv_heads": kv_heads,
            "head_dim": head_dim,
        }
        n = {k: as_count(k, v) for k, v in sizes.items()}
        if not isinstance(dtype, torch.dtype) or not (dtype.is_floating_point or dtype.is_complex):
            reject("dtype", "a floating-point torch.dtype", dtype)
        device = _device(device)
        self.block_size = n["block_size"]
        self.kv_heads = n["kv_heads"]
        self.head_dim = n["head_dim"]
        shape = (n["num_layers"], 2, n["num_blocks"], n["block_size"], n["kv_heads"], n["head_dim"])
        self.data = _allocate(shape, dtype, device)

    @classmethod
    def for_model(cls, model: Any, num_blocks: int, block_size: int) -> KVPool:
        """A pool sized from the model's (text) config, on its device and dtype."""
        config = text_config(check_model(model))
        heads = _config_count(config, "num_attention_heads")
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        head_dim = getattr(config, "head_dim", None)
        head_dim = head_dim or _config_count(config, "hidden_size") // heads
        return cls(
            num_layers=_config_count(config, "num_hidden_layers"),
            num_blocks=num_blocks,
            block_size=block_size,
            kv_heads=kv_heads,
            head_dim=head_dim,
            dtype=model.dtype,
            device=model.device,
        )

    @property
    def num_layers(self) -> int:
        return int(self.data.shape[0])

    @property
    def num_blocks(self) -> int:
        return int(self.data.shape[2])

    def keys(self, layer: int) -> torch.Tensor:
        """Layer ``layer``'s keys, ``[num_blocks, block_size, kv_heads, head_dim]``."""
        return self.data[layer, 0]

    def values(self, layer: int) -> torch.Tensor:
        """Layer ``layer``'s values, ``[num_blocks, block_size, kv_heads, head_dim]``."""
        return self.data[layer, 1]

    def slots(self, table: Sequence[int], start: int, stop: int) -> list[int]:
        """The slots of positions ``[start, stop)`` of a request with block table ``table``."""
        bs = self.block_size
        return [table[p // bs] * bs + p % bs for p in range(start, stop)]

    def gather(self, layer: int, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values at ``slots`` (any shape ``S``): two ``[*S, kv_heads, head_dim]``."""
        flat = self.data[layer].flatten(1, 2)  # [2, num_blocks * block_size, heads, dim]
        return flat[0][slots], flat[1][slots]

    def scatter(
        self, layer: int, slots: torch.Tensor, keys: torch.Tensor, values: torch.Tensor
    ) -> None:
        """Write ``keys`` and ``values`` (``[len(slots), kv_heads, head_dim]``) at ``slots``."""
        flat = self.data[layer].flatten(1, 2)
        flat[0].index_copy_(0, slots, keys)
        flat[1].index_copy_(0, slots, values)


def _config_count(config: Any, key: str) -> int:
    value = getattr(config, key, None)
    if value is None:
        raise ValueError(f"model.config has no {key}: the KV pool cannot be sized")
    return as_count(f"model.config.{key}", value)


def _device(device: object) -> torch.device:
    if isinstance(device, torch.device):
        return device
    if not isinstance(device, (str, int)) or isinstance(device, bool):
        reject("device", "a torch.device, a str or an int", device)
    try:
        return torch.device(device)
    except (RuntimeError, ValueError) as err:
        raise ValueError(f"device must name a torch device, got {device!r}: {err}") from None


def _allocate(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The zeroed pool, or a ``MemoryError`` naming its size: refused up front when it is
    above the device's memory (zeroing more than the RAM would swap or wake the OOM killer)."""
    size = math.prod(shape) * dtype.itemsize
    what = (
        f"the KV pool of {shape[2]} blocks of {shape[3]} tokens ({shape[0]} layers, keys and"
        f" values, {shape[4]} heads of {shape[5]} {dtype} values) needs {size} bytes"
    )
    total = _device_memory(device)
    if total is not None and size > total:
        raise MemoryError(f"{what}, above the {total} bytes of {device}; lower num_blocks")
    try:
        return torch.zeros(shape, dtype=dtype, device=device)
    except (RuntimeError, MemoryError) as err:  # torch.OutOfMemoryError is a RuntimeError
        raise MemoryError(f"{what}, which {device} could not allocate: {err}") from None


def _device_memory(device: torch.device) -> int | None:
    """The memory of ``device`` in bytes, if known: the RAM for the CPU, the whole memory
    of a CUDA device."""
    try:
        if device.type == "cpu":
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        if device.type == "cuda":
            return int(torch.cuda.mem_get_info(device)[1])
    except (AttributeError, ValueError, OSError, RuntimeError):  # unknown: torch decides
        return None
    return None
