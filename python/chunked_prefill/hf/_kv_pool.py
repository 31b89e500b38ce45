"""The paged KV cache of :class:`~chunked_prefill.hf.PagedEngine`: one tensor of blocks.

A *slot* is one token's place in the pool: ``block * block_size + offset``. The engine turns
a request's block table into the slots of the positions it reads or writes, so the pool
itself knows nothing of requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


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
        self.block_size = block_size
        self.kv_heads = kv_heads
        self.head_dim = head_dim
        shape = (num_layers, 2, num_blocks, block_size, kv_heads, head_dim)
        self.data = torch.zeros(shape, dtype=dtype, device=device)

    @classmethod
    def for_model(cls, model: Any, num_blocks: int, block_size: int) -> KVPool:
        """A pool sized from the model's (text) config, on its device and dtype."""
        config = model.config
        if hasattr(config, "get_text_config"):
            config = config.get_text_config()
        heads = int(config.num_attention_heads)
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        head_dim = getattr(config, "head_dim", None) or int(config.hidden_size) // heads
        return cls(
            num_layers=int(config.num_hidden_layers),
            num_blocks=num_blocks,
            block_size=block_size,
            kv_heads=int(kv_heads),
            head_dim=int(head_dim),
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
