"""Reading a model's Hugging Face ``config.json`` (:func:`load_model_config`) and
resolving a model given by preset name, Hugging Face id or path (:func:`resolve_model`)."""

from __future__ import annotations

import os
import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..._check import path, show
from ..._json import Number
from ..errors import ModelConfigError
from ..names import _kind, _read_json
from .aliases import _MODEL_KEYS
from .families import FAMILIES, REFUSED_FAMILIES, TEXT_CONFIG_DEFAULTS, Family
from .layers import _experts, _mla, _window
from .presets import MODELS
from .quantization import _weight_dtype
from .spec import _DTYPE_BYTES, ModelSpec
from .values import _count, _flag

if TYPE_CHECKING:
    pass


_DBRX_KEYS = {
    "num_hidden_layers": ("", "n_layers"),
    "hidden_size": ("", "d_model"),
    "num_attention_heads": ("", "n_heads"),
    "num_key_value_heads": ("attn_config", "kv_n_heads"),
    "intermediate_size": ("ffn_config", "ffn_hidden_size"),
    "num_local_experts": ("ffn_config", "moe_num_experts"),
    "num_experts_per_tok": ("ffn_config", "moe_top_k"),
}
"""The flat key of each count a DBRX ``config.json`` gives under MPT's name, at the top or
in a nested object (``model_type`` ``"dbrx"``)."""

_DBRX_NAMES = {key: ".".join(filter(None, path)) for key, path in _DBRX_KEYS.items()}
"""Each flat key's name in a DBRX config (``ffn_config.moe_top_k``), for errors."""


def _flatten_dbrx(path: str, table: dict[str, Any]) -> dict[str, Any]:
    """A DBRX config as the flat keys the other models use, each count read (and any error
    named) at DBRX's own key; the checks across keys name them with :data:`_DBRX_NAMES`.
    DBRX's MLP is gated (its experts' ``w1``, ``v1`` and ``w2``), as the roofline assumes."""
    flat = dict(table)
    for key, (outer, inner) in _DBRX_KEYS.items():
        nested = table.get(outer) if outer else table
        if not isinstance(nested, dict):
            raise ModelConfigError(
                f"{path}: key {outer!r}: expected an object (DBRX's {inner} is in it), got"
                f" {_kind(nested)}"
            )
        _count(path, nested, inner, label=_DBRX_NAMES[key])
        flat[key] = nested[inner]  # the value as read, for the flat keys' reading
    return flat


def _language_model(path: str, table: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A vision-language config's language model: its ``text_config`` when the file has no
    ``num_hidden_layers`` of its own (Gemma 3, Mistral 3, LLaVA), with its class's defaults
    for the keys it leaves out (:data:`~.families.TEXT_CONFIG_DEFAULTS`) and the
    file's dtype and quantization where it has none; errors then name the file as
    ``PATH: text_config``. Any other config as is."""
    text = table.get("text_config")
    if "num_hidden_layers" in table or not isinstance(text, dict):
        return path, table
    model_type = text.get("model_type")
    defaults = TEXT_CONFIG_DEFAULTS.get(model_type, {}) if isinstance(model_type, str) else {}
    nested = {key: Number(value) for key, value in defaults.items()} | text
    for key in ("torch_dtype", "dtype", "quantization_config"):
        if key in table and key not in nested:
            nested[key] = table[key]
    return f"{path}: text_config", nested


def _family(path: str, table: dict[str, Any]) -> Family:
    """The :data:`~.families.FAMILIES` entry of the file's ``model_type`` (Llama's
    reading when absent or not listed); a family of :data:`REFUSED_FAMILIES` is refused."""
    model_type = table.get("model_type")
    if not isinstance(model_type, str):
        return Family()
    if model_type in REFUSED_FAMILIES:
        raise ModelConfigError(
            f"{path}: key 'model_type': {model_type!r}: {REFUSED_FAMILIES[model_type]} is not"
            " modelled"
        )
    return FAMILIES.get(model_type, Family())


def _flatten_family(
    path: str, table: dict[str, Any], family: Family
) -> tuple[dict[str, Any], dict[str, str]]:
    """A config of ``family`` as Llama's keys, each count read (and any error named) at the
    family's own key, as :func:`_flatten_dbrx` does; returns the flat table and the names."""
    flat, names = dict(table), dict(family.renames)
    for key, theirs in family.renames:
        if key == "intermediate_size" and family.mlp_per_hidden and table.get(theirs) is None:
            hidden = _count(path, flat, "hidden_size", label=names.get("hidden_size", ""))
            flat[key] = Number(family.mlp_per_hidden * hidden)
            continue
        _count(path, table, theirs)
        flat[key] = table[theirs]
    model_type = table.get("model_type")
    if model_type == "opt":
        projected = table.get("word_embed_proj_dim")
        if projected is not None and projected != flat.get("hidden_size"):
            raise ModelConfigError(
                f"{path}: key 'word_embed_proj_dim': {_kind(projected)}: an embedding"
                f" narrower than hidden_size ({_kind(flat.get('hidden_size'))}), with"
                " projections in and out, is not modelled"
            )
    if model_type == "gpt_bigcode" and _flag(path, table, "multi_query", True):
        flat["num_key_value_heads"] = Number(1)
    if model_type == "falcon":
        flat.pop("num_key_value_heads", None)
        if _flag(path, table, "new_decoder_architecture", False):
            if table.get("num_kv_heads") is not None:
                flat["num_key_value_heads"] = table["num_kv_heads"]
                names["num_key_value_heads"] = "num_kv_heads"
        elif _flag(path, table, "multi_query", True):
            flat["num_key_value_heads"] = Number(1)
    return flat, names


def _heads(
    path: str, table: dict[str, Any], hidden: int, heads: int, names: dict[str, str]
) -> tuple[int, int]:
    """The K/V heads and the head size, checked against the attention heads: the K/V heads
    divide them (grouped-query attention), and without ``head_dim`` the heads divide
    ``hidden_size`` (``head_dim`` is then ``hidden_size / num_attention_heads``). Errors
    name a key as ``names`` does (DBRX's), else as itself."""
    kv_key, heads_key, hidden_key = (
        names.get(key, key) for key in ("num_key_value_heads", "num_attention_heads", "hidden_size")
    )
    kv = _count(path, table, "num_key_value_heads", heads)
    if kv > heads:
        raise ModelConfigError(f"{path}: key {kv_key!r}: {kv} is above {heads_key} ({heads})")
    if heads % kv:
        raise ModelConfigError(
            f"{path}: key {kv_key!r}: {kv} does not divide {heads_key} ({heads})"
        )
    if table.get("head_dim") is None and hidden % heads:
        raise ModelConfigError(
            f"{path}: key {heads_key!r}: {heads} does not divide {hidden_key} ({hidden}),"
            " and there is no head_dim to give the head size"
        )
    return kv, _count(path, table, "head_dim", hidden // heads)


def _dtype(path: str, table: dict[str, Any]) -> str:
    key = "torch_dtype" if "torch_dtype" in table else "dtype"
    value = table.get(key)
    if value is None:
        return "bfloat16"  # configs without a dtype: the bfloat16 every preset uses
    if not isinstance(value, str) or isinstance(value, Number) or value not in _DTYPE_BYTES:
        raise ModelConfigError(
            f"{path}: key {key!r}: expected one of {', '.join(_DTYPE_BYTES)}, got {_kind(value)}"
        )
    return value


def load_model_config(path: str | os.PathLike[str]) -> ModelSpec:
    """A :class:`ModelSpec` from a Hugging Face ``config.json``.

    Required keys: ``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``,
    ``intermediate_size``, ``vocab_size``; optional: ``num_key_value_heads`` (default: the
    attention heads), ``head_dim`` (default: hidden / heads), the experts and multi-head
    latent attention of Mixtral, Qwen-MoE, DeepSeek and Llama 4 and the sliding windows of
    Mistral, Gemma, Phi-3 and Llama 4's chunked attention (:mod:`.layers`),
    ``torch_dtype`` (or ``dtype``; default bfloat16), ``quantization_config`` (FP8 weights
    only), ``tie_word_embeddings`` (default: the family's, false for Llama's). A DBRX config
    (``model_type`` ``"dbrx"``) gives the counts under MPT's names (``n_layers``,
    ``d_model``, ``n_heads``, ``attn_config.kv_n_heads``, ``ffn_config``'s
    ``ffn_hidden_size``, ``moe_num_experts``, ``moe_top_k``); the families of
    :data:`~.families.FAMILIES` (GPT-2, OPT, Falcon, GPT-NeoX, Phi-2, StarCoder2,
    Gemma...) are read with their names, MLP and tying default; a vision-language config is
    read as its ``text_config``. Other keys are ignored, but for the layouts not modelled
    (the families of :data:`~.families.REFUSED_FAMILIES`, a MoE without a MoE layer),
    which are refused. A missing key or a bad value raises :class:`ModelConfigError` naming
    the file and key.
    """
    name = os.fspath(path)
    top = _read_json(name, ModelConfigError)
    where, table = _language_model(name, top)
    family = _family(where, table)
    names: dict[str, str] = {}
    if table.get("model_type") == "dbrx":
        table, names = _flatten_dbrx(where, table), _DBRX_NAMES
    elif family.renames:
        table, names = _flatten_family(where, table, family)
    counts: dict[str, Any] = {
        key: _count(where, table, key)
        for key in (
            "num_hidden_layers",
            "hidden_size",
            "num_attention_heads",
            "intermediate_size",
            "vocab_size",
        )
    }
    kv, head_dim = _heads(where, table, counts["hidden_size"], counts["num_attention_heads"], names)
    experts = _experts(where, table, names)
    if experts and not family.gated_mlp:
        raise ModelConfigError(
            f"{where}: key 'model_type': {table.get('model_type')!r} has an MLP without a"
            " gate, and its experts are not modelled (a mixture of experts is read as gated"
            " MLPs)"
        )
    label = top.get("_name_or_path")
    if not isinstance(label, str) or isinstance(label, Number) or not label:
        label = name
    dtype = _dtype(where, table)
    # Llama 4's experts name the dense layers' MLP size themselves (intermediate_size_mlp).
    layout = counts | {"head_dim": head_dim} | _mla(where, table) | experts
    layout |= _window(where, table, counts["num_hidden_layers"])
    return ModelSpec(
        name=label,
        num_key_value_heads=kv,
        dtype_bytes=_DTYPE_BYTES[dtype],
        weight_dtype=_weight_dtype(where, table, dtype),
        tie_word_embeddings=_flag(where, table, "tie_word_embeddings", family.tied),
        gated_mlp=family.gated_mlp,
        source=name,
        **layout,
    )


def model_name(text: str) -> str | None:
    """The :data:`MODELS` preset ``text`` names (a preset or a Hugging Face repo id of
    :data:`MODEL_ALIASES`, any case), or ``None``."""
    key = text.strip().lower()
    if key in MODELS:
        return key
    return _MODEL_KEYS.get(key)


def resolve_model(model: str | os.PathLike[str] | ModelSpec) -> ModelSpec:
    """A preset name of :data:`MODELS` or a Hugging Face repo id of one (any case), a
    ``config.json`` path (or a directory holding one), or a spec as is."""
    if isinstance(model, ModelSpec):
        return model
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(
            f"model must be a preset name, a config.json path or a ModelSpec, got {show(model)}"
        )
    text = path("model", model)
    preset = model_name(text) if isinstance(model, str) else None
    if preset is not None and not os.path.exists(text):
        return MODELS[preset]
    quantized = _quantized_checkpoint(text) if isinstance(model, str) else None
    if quantized is not None and not os.path.exists(text):
        return quantized
    if os.path.isdir(text) and os.path.isfile(os.path.join(text, "config.json")):
        return load_model_config(os.path.join(text, "config.json"))
    if not os.path.exists(text) and not text.lower().endswith(".json"):
        if _REPO_ID.fullmatch(text):
            raise ModelConfigError(
                f"unknown model {text!r}: not the Hugging Face id of a preset, and nothing"
                " is downloaded: save its config.json (https://huggingface.co/"
                f"{text}/blob/main/config.json) and give its path"
            )
        raise ModelConfigError(
            f"unknown model {text!r}: give a config.json path or one of {', '.join(MODELS)}"
            " (or a preset's Hugging Face id: chunked-prefill engines --json lists them)"
        )
    return load_model_config(text)


QUANTIZED_SUFFIXES = {"-gptq-int4": "int4", "-gptq-int8": "int8", "-awq": "int4", "-fp8": "fp8"}
"""The suffixes of the quantized checkpoints published beside a model (Qwen's
``Qwen2.5-7B-Instruct-GPTQ-Int4``, ``-GPTQ-Int8``, ``-AWQ``; ``Qwen3-8B-FP8``) and their
linear weights' dtype."""


def _quantized_checkpoint(text: str) -> ModelSpec | None:
    """The preset of a Hugging Face id that is a preset's id with a quantized suffix
    (:data:`QUANTIZED_SUFFIXES`, any case), its linear weights at that dtype; else ``None``."""
    key = text.strip().lower()
    for suffix, dtype in QUANTIZED_SUFFIXES.items():
        base = model_name(key.removesuffix(suffix)) if key.endswith(suffix) else None
        if base is not None and "/" in key:
            spec = MODELS[base]
            return replace(spec, name=f"{spec.name}-{suffix.lstrip('-')}", weight_dtype=dtype)
    return None


_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
"""A Hugging Face repo id, ``owner/name``."""
