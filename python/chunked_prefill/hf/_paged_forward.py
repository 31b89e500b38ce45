"""One forward pass for every item of a step, reading and writing the KV pool.

The items of a step are the rows of one padded batch. Row ``i`` holds its request's past
(positions ``[0, start)``, gathered from the pool through its block table) right-aligned in
the first ``P = max(start)`` key columns, and its ``n`` new tokens left-aligned in the last
``Q = max(n)`` columns; a 2-D attention mask hides the padding, and ``position_ids`` give each
token its true position. transformers builds the causal mask from these, the past enters as
a ``DynamicCache``, and after the pass the new keys and values are read back from that cache
and written into the pool at the slots of positions ``[start, start + n)``. Padded query
slots repeat the row's last position so they are always finite and never index beyond the
table; their outputs are discarded.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache

from ._kv_pool import KVPool


@dataclass(frozen=True)
class Work:
    """One batch item to compute: tokens at positions ``[start, start + len(tokens))`` of a
    request whose KV lives in the blocks of ``table``; ``samples`` asks for its next token."""

    start: int
    tokens: Sequence[int]
    table: Sequence[int]
    samples: bool


def _accepts(model: Any, name: str) -> bool:
    try:
        return name in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        return False


class ModelCall:
    """How to call one model: which argument takes the cache, whether it can keep only some
    positions' logits, and whether it still takes ``cache_position``."""

    def __init__(self, model: Any) -> None:
        self.model = model
        # transformers 5.24 renamed the forward argument ``past_key_values`` to ``cache``.
        renamed = not _accepts(model, "past_key_values") and _accepts(model, "cache")
        self.cache_arg = "cache" if renamed else "past_key_values"
        self.keeps_logits = _accepts(model, "logits_to_keep")
        self.cache_position = _accepts(model, "cache_position")
        config = model.config
        text = config.get_text_config() if hasattr(config, "get_text_config") else None
        self.cache_kwargs: dict[str, Any] = {"config": text} if text is not None else {}


def _slots(tables: torch.Tensor, positions: torch.Tensor, block_size: int) -> torch.Tensor:
    """Pool slots of ``positions`` (``[B, X]``) in each row's block table (``[B, blocks]``)."""
    return tables.gather(1, positions // block_size) * block_size + positions % block_size


def _layer_kv(cache: Any, layer: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values of one layer of ``cache``, which must hold ``length`` positions."""
    cached = cache.layers[layer]
    keys, values = getattr(cached, "keys", None), getattr(cached, "values", None)
    if not isinstance(keys, torch.Tensor) or not isinstance(values, torch.Tensor):
        raise RuntimeError(f"layer {layer} of the model's cache holds no keys and values")
    if keys.shape[-2] != length:
        raise RuntimeError(
            f"layer {layer} of the model's cache holds {keys.shape[-2]} positions after the "
            f"step, not {length}: PagedEngine needs full attention on every layer"
        )
    return keys, values


def run_step(call: ModelCall, pool: KVPool, work: Sequence[Work]) -> list[int]:
    """Compute every item of ``work`` in one forward pass and write its new KV into ``pool``.

    Returns the greedy next token of each item that samples, in the order of ``work``.
    """
    device = pool.data.device
    lens = torch.tensor([len(w.tokens) for w in work])
    starts = torch.tensor([w.start for w in work])
    past, query = int(starts.max()), int(lens.max())
    widest = max(len(w.table) for w in work)
    tables = torch.tensor([list(w.table) + [0] * (widest - len(w.table)) for w in work])
    ids = torch.tensor([list(w.tokens) + [0] * (query - len(w.tokens)) for w in work])

    col = torch.arange(query)
    valid = col[None, :] < lens[:, None]  # [B, Q]: the real new tokens
    positions = starts[:, None] + torch.minimum(col[None, :], lens[:, None] - 1)
    past_pos = torch.arange(past)[None, :] - (past - starts[:, None])  # [B, P]
    past_valid = past_pos >= 0
    mask = torch.cat([past_valid, valid], dim=1).long()
    bs = pool.block_size
    past_slots = _slots(tables, past_pos.clamp(min=0), bs).to(device)
    new_slots = _slots(tables, positions, bs)[valid].to(device)
    valid = valid.to(device)

    cache = DynamicCache(**call.cache_kwargs)
    if past:
        for layer in range(pool.num_layers):
            k, v = pool.gather(layer, past_slots)  # [B, P, heads, dim]
            cache.update(k.transpose(1, 2), v.transpose(1, 2), layer)

    last = [len(w.tokens) - 1 for w in work if w.samples]
    kwargs: dict[str, Any] = {call.cache_arg: cache}
    if call.keeps_logits:
        kept = sorted(set(last))
        kwargs["logits_to_keep"] = torch.tensor(kept, device=device) if kept else 1
        columns = [kept.index(c) for c in last]
    else:
        columns = last
    if call.cache_position:
        kwargs["cache_position"] = torch.arange(past, past + query, device=device)
    out = call.model(
        input_ids=ids.to(device),
        attention_mask=mask.to(device),
        position_ids=positions.to(device),
        use_cache=True,
        **kwargs,
    )

    for layer in range(pool.num_layers):
        keys, values = _layer_kv(cache, layer, past + query)
        keys = keys[:, :, past:].transpose(1, 2)[valid]
        if keys.shape[1:] != (pool.kv_heads, pool.head_dim):
            raise RuntimeError(
                f"the model's keys are {tuple(keys.shape[1:])} (heads, dim) per token, the pool's "
                f"{(pool.kv_heads, pool.head_dim)}: its config does not describe its attention"
            )
        values = values[:, :, past:].transpose(1, 2)[valid]
        pool.scatter(layer, new_slots, keys, values)

    if not last:
        return []
    sampling = [i for i, w in enumerate(work) if w.samples]
    logits = out.logits[torch.tensor(sampling, device=device), torch.tensor(columns, device=device)]
    tokens: list[int] = logits.argmax(dim=-1).tolist()
    return tokens
