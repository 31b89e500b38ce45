"""The layer layouts a ``config.json`` describes beyond Llama's: a mixture of experts
(:func:`_experts`: Mixtral's, Qwen-MoE's, DeepSeek's and Llama 4's names, shared experts,
dense layers among the MoE ones) and multi-head latent attention (:func:`_mla`)."""

from __future__ import annotations

from typing import Any

from ..._json import Number
from ..errors import ModelConfigError
from ..names import _kind
from .values import _count, _flag, _present

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


_LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention")
"""The ``layer_types`` entries modelled (transformers' names)."""

_WINDOW_PATTERNS = {"gemma2": 2, "gemma3_text": 6, "cohere2": 4}
"""Families whose every ``n``-th layer attends to the whole context and the others within
``sliding_window`` when the file has no ``layer_types``: Gemma 2's every other layer,
Gemma 3's ``sliding_window_pattern`` (6 by default) and Cohere 2's (4), as their
transformers config classes derive ``layer_types``."""

LLAMA4_CHUNK = 8192
"""``attention_chunk_size`` when the file leaves it out: ``Llama4TextConfig``'s default."""

PATTERN_WINDOW = 4096
"""``sliding_window`` of the :data:`_WINDOW_PATTERNS` families when the file leaves it out:
their config classes' default."""


def _default_window(table: dict[str, Any]) -> int | None:
    """The file's family's ``sliding_window`` when it leaves it out (``None``: no default)."""
    return PATTERN_WINDOW if table.get("model_type") in _WINDOW_PATTERNS else None


def _window(path: str, table: dict[str, Any], layers: int) -> dict[str, Any]:
    """The :class:`~.spec.ModelSpec` fields of windowed attention, none without it: the
    layers of ``layer_types`` that are ``sliding_attention`` (within ``sliding_window``) or
    ``chunked_attention`` (within ``attention_chunk_size``); without ``layer_types``, the
    rule of the file's ``model_type`` (:func:`_window_rule`)."""
    types = table.get("layer_types")
    if types is None:
        return _window_rule(path, table, layers)
    if (
        not isinstance(types, list)
        or len(types) != layers
        or not all(t in _LAYER_TYPES for t in types)
    ):
        raise ModelConfigError(
            f"{path}: key 'layer_types': expected a list of {layers} entries (num_hidden_layers)"
            f" each one of {', '.join(_LAYER_TYPES)}, got {_kind(types)}"
        )
    sliding, chunked = types.count("sliding_attention"), types.count("chunked_attention")
    if sliding and chunked:
        raise ModelConfigError(
            f"{path}: key 'layer_types': both sliding_attention and chunked_attention layers"
            " are not modelled (one window size)"
        )
    if chunked:
        return _windowed(_count(path, table, "attention_chunk_size", LLAMA4_CHUNK), chunked)
    if sliding:
        return _windowed(_count(path, table, "sliding_window", _default_window(table)), sliding)
    return {}


def _window_rule(path: str, table: dict[str, Any], layers: int) -> dict[str, Any]:
    """Windowed attention by the family's rule, as transformers' config classes derive
    ``layer_types``: Qwen2/Qwen3's ``use_sliding_window`` (false: none; true: the layers
    from ``max_window_layers`` on), Gemma 2's, Gemma 3's and Cohere 2's patterns
    (:data:`_WINDOW_PATTERNS`), Llama 4's ``attention_chunk_size`` on its RoPE layers
    (``no_rope_layers`` 1; by default all but every fourth), else a ``sliding_window`` on
    every layer (Mistral, Mixtral, Phi-3, StarCoder2; absent or null: none)."""
    model_type = str(table.get("model_type"))
    if model_type == "llama4_text":
        if "attention_chunk_size" in table and table["attention_chunk_size"] is None:
            return {}
        chunk = _count(path, table, "attention_chunk_size", LLAMA4_CHUNK)
        return _windowed(chunk, _rope_layers(path, table, layers))
    if "use_sliding_window" in table and not _flag(path, table, "use_sliding_window", False):
        return {}
    default = _default_window(table)
    if table.get("sliding_window") is None and default is None:
        return {}
    window = _count(path, table, "sliding_window", default)
    if "use_sliding_window" in table:  # Qwen's: the layers from max_window_layers on
        first = (
            _count(path, table, "max_window_layers") if _present(table, "max_window_layers") else 0
        )
        return _windowed(window, max(0, layers - first))
    if model_type in _WINDOW_PATTERNS:
        key = "sliding_window_pattern"
        pattern = _count(path, table, key, _WINDOW_PATTERNS[model_type])
        return _windowed(window, layers - layers // pattern)
    return _windowed(window, layers)


def _rope_layers(path: str, table: dict[str, Any], layers: int) -> int:
    """Llama 4's layers with rotary embeddings (``no_rope_layers`` 1), which attend within
    their chunk; by default all but every ``no_rope_layer_interval``-th (4)."""
    flags = table.get("no_rope_layers")
    if flags is None or flags == []:
        interval = _count(path, table, "no_rope_layer_interval", 4)
        return sum(1 for i in range(layers) if (i + 1) % interval)
    if (
        not isinstance(flags, list)
        or len(flags) != layers
        or not all(isinstance(f, Number) and f in ("0", "1") for f in flags)
    ):
        raise ModelConfigError(
            f"{path}: key 'no_rope_layers': expected a list of {layers} entries"
            f" (num_hidden_layers), each 0 or 1, got {_kind(flags)}"
        )
    return sum(1 for f in flags if f == "1")


def _windowed(window: int, count: int) -> dict[str, Any]:
    """The fields of ``count`` layers attending within ``window`` tokens (none for 0)."""
    return {"sliding_window": window, "window_layers": count} if count else {}
