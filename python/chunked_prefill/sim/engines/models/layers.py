"""The layer layouts a ``config.json`` describes beyond Llama's: a mixture of experts
(:func:`_experts`: Mixtral's, Qwen-MoE's, DeepSeek's and Llama 4's names, shared experts,
dense layers among the MoE ones) and multi-head latent attention (:func:`_mla`)."""

from __future__ import annotations

from typing import Any

from ..._json import Number
from ..errors import ModelConfigError
from ..names import _kind
from .values import _count, _present

_EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
"""The experts' count under Mixtral's (and Llama 4's), Qwen-MoE's and DeepSeek's names."""


def _layer_list(path: str, table: dict[str, Any], key: str, layers: int) -> set[int]:
    """``table[key]``, a list of layer indices below ``layers`` (absent or null: none)."""
    value = table.get(key)
    if value is None:
        return set()
    indices = value if isinstance(value, list) else None
    if indices is None or not all(isinstance(i, Number) and i.isdigit() for i in indices):
        raise ModelConfigError(
            f"{path}: key {key!r}: expected a list of layer indices, got {_kind(value)}"
        )
    found = {int(i) for i in indices}
    if found and max(found) >= layers:
        raise ModelConfigError(
            f"{path}: key {key!r}: layer {max(found)} is not below num_hidden_layers ({layers})"
        )
    return found


def _moe_layers(path: str, table: dict[str, Any], key: str, layers: int) -> int:
    """How many of the ``layers`` are MoE layers, by the rule of the model that names its
    experts ``key``: DeepSeek's (from ``first_k_dense_replace`` on, every
    ``moe_layer_freq``-th), Qwen-MoE's (every ``decoder_sparse_step``-th but
    ``mlp_only_layers``), Llama 4's (``moe_layers``, else every
    ``interleave_moe_layer_step``-th), Mixtral's (all)."""
    if key == "n_routed_experts":
        first = (
            _count(path, table, "first_k_dense_replace", 0)
            if _present(table, "first_k_dense_replace")
            else 0
        )
        freq = _count(path, table, "moe_layer_freq", 1)
        moe = sum(1 for i in range(first, layers) if i % freq == 0)
        rule = "first_k_dense_replace"
    elif key == "num_experts":
        step = _count(path, table, "decoder_sparse_step", 1)
        dense = _layer_list(path, table, "mlp_only_layers", layers)
        moe = sum(1 for i in range(layers) if i not in dense and (i + 1) % step == 0)
        rule = "mlp_only_layers"
    elif table.get("model_type") == "llama4_text":
        listed = _layer_list(path, table, "moe_layers", layers)
        step = _count(path, table, "interleave_moe_layer_step", 1)
        moe = len(listed) if listed else len(range(step - 1, layers, step))
        rule = "moe_layers" if listed else "interleave_moe_layer_step"
    else:
        return layers
    if moe == 0:
        raise ModelConfigError(
            f"{path}: key {rule!r}: no layer of num_hidden_layers ({layers}) is a MoE layer"
        )
    return moe


def _shared_expert(path: str, table: dict[str, Any], key: str, size: int) -> dict[str, Any]:
    """The shared expert's fields: DeepSeek's ``n_shared_experts`` of the experts' size
    and Llama 4's one of ``intermediate_size``, added without a gate; Qwen2-MoE's
    ``shared_expert_intermediate_size`` behind its sigmoid gate."""
    if key == "n_routed_experts":
        count = (
            _count(path, table, "n_shared_experts") if _present(table, "n_shared_experts") else 0
        )
        return {"shared_expert_intermediate_size": count * size, "shared_expert_gate": False}
    if _present(table, "n_shared_experts"):
        raise ModelConfigError(
            f"{path}: key 'n_shared_experts': DeepSeek's shared experts go with its routed"
            f" ones (n_routed_experts), not with {key}"
        )
    if table.get("model_type") == "llama4_text":
        return {"shared_expert_intermediate_size": size, "shared_expert_gate": False}
    if _present(table, "shared_expert_intermediate_size"):
        return {
            "shared_expert_intermediate_size": _count(
                path, table, "shared_expert_intermediate_size"
            )
        }
    return {}


def _no_experts(path: str, table: dict[str, Any]) -> dict[str, Any]:
    """A dense model's (no) expert fields, refusing expert keys without experts."""
    if table.get("num_experts_per_tok") is not None:
        _count(path, table, "num_local_experts")  # missing: the error names it
    for sized in ("moe_intermediate_size", "shared_expert_intermediate_size"):
        if _present(table, sized):
            raise ModelConfigError(
                f"{path}: key {sized!r}: an expert size without experts ({', '.join(_EXPERT_KEYS)})"
            )
    if _present(table, "n_shared_experts"):
        raise ModelConfigError(
            f"{path}: key 'n_shared_experts': shared experts without routed ones (n_routed_experts)"
        )
    return {}


def _experts(path: str, table: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """The :class:`~.spec.ModelSpec` fields of the experts, none for a dense model.
    Experts: Mixtral's ``num_local_experts`` (of ``intermediate_size``; Llama 4's too, with a
    shared expert of that size and dense layers of ``intermediate_size_mlp``), Qwen-MoE's
    ``num_experts`` (of ``moe_intermediate_size``, with Qwen2-MoE's gated shared expert) or
    DeepSeek's ``n_routed_experts`` (of ``moe_intermediate_size``, with ``n_shared_experts``
    ungated shared experts of that size); the layers that are not MoE layers
    (:func:`_moe_layers`) are dense. Errors across keys name them as ``names`` does."""
    keys = [key for key in _EXPERT_KEYS if _present(table, key)]
    if len(keys) > 1:
        raise ModelConfigError(
            f"{path}: key {keys[1]!r}: give one of {', '.join(_EXPERT_KEYS)}, not both"
            f" {keys[0]} and {keys[1]}"
        )
    if not keys:
        return _no_experts(path, table)
    (key,) = keys
    experts = _count(path, table, key)
    per_tok = _count(path, table, "num_experts_per_tok")
    if per_tok > experts:
        per_tok_key, experts_key = (names.get(k, k) for k in ("num_experts_per_tok", key))
        raise ModelConfigError(
            f"{path}: key {per_tok_key!r}: {per_tok} is above {experts_key} ({experts})"
        )
    # Qwen-MoE's and DeepSeek's experts have their own size; Mixtral's are intermediate_size.
    size = _count(path, table, "moe_intermediate_size", 0 if key == "num_local_experts" else None)
    layers = _count(path, table, "num_hidden_layers", label=names.get("num_hidden_layers", ""))
    fields: dict[str, Any] = {
        "num_local_experts": experts,
        "num_experts_per_tok": per_tok,
        "expert_intermediate_size": size,
        "dense_layers": layers - _moe_layers(path, table, key, layers),
    }
    if table.get("model_type") == "llama4_text":
        # Llama 4: intermediate_size is an expert's (and the shared one's), the dense
        # layers' MLP is intermediate_size_mlp.
        fields["expert_intermediate_size"] = size = _count(path, table, "intermediate_size")
        fields["intermediate_size"] = _count(path, table, "intermediate_size_mlp")
    return fields | _shared_expert(path, table, key, size or 0)


_MLA_WIDTHS = ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
"""MLA's per-head widths, each required with ``kv_lora_rank``."""


def _mla(path: str, table: dict[str, Any]) -> dict[str, Any]:
    """The :class:`~.spec.ModelSpec` fields of multi-head latent attention
    (``kv_lora_rank``, ``q_lora_rank`` null or absent for none, and the per-head widths),
    none without it; ``head_dim`` is then the query/key width."""
    if not _present(table, "kv_lora_rank"):
        return {}
    fields = {key: _count(path, table, key) for key in ("kv_lora_rank", *_MLA_WIDTHS)}
    fields["q_lora_rank"] = (
        _count(path, table, "q_lora_rank") if _present(table, "q_lora_rank") else 0
    )
    fields["head_dim"] = fields["qk_nope_head_dim"] + fields["qk_rope_head_dim"]
    return fields
