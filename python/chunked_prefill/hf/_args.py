"""Argument checks of the public entry points of :mod:`chunked_prefill.hf`.

Every check runs before any work and raises the package's errors (``_validate``): a
``TypeError`` for a value of the wrong type, a ``ValueError`` for one outside its rule (an
``OverflowError`` above 2**64 - 1, as the schedulers do), each naming the argument (with its
index, ``prompts[1][3]``), the value and the rule.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Set
from typing import Any, NoReturn

import torch

from .._validate import U64_MAX, _index, as_number, as_token, message


def _kind(value: object) -> str:
    return f"{type(value).__name__}: {value!r}"


def as_count(name: str, value: object) -> int:
    """``value`` as an int in ``1..=2**64-1`` (a number of tokens, blocks, ...)."""
    v = _index(name, value)
    if v < 1:
        raise ValueError(message("count_zero", name=name, value=v))
    if v > U64_MAX:
        raise OverflowError(message("above_u64", name=name, value=v))
    return v


def as_optional_count(name: str, value: object) -> int | None:
    """``None`` or :func:`as_count`."""
    return None if value is None else as_count(name, value)


def check_model(model: object) -> Any:
    """A transformers model: a ``torch.nn.Module`` with a ``config``."""
    if not isinstance(model, torch.nn.Module) or not hasattr(model, "config"):
        raise TypeError(
            "model must be a transformers causal LM (a torch.nn.Module with a config), "
            f"got {_kind(model)}"
        )
    return model


def text_config(model: Any) -> Any:
    config = model.config
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def vocab_size(model: Any) -> int | None:
    vocab = getattr(text_config(model), "vocab_size", None)
    return int(vocab) if vocab else None


def _items(name: str, value: object, what: str, *, hint: str = "") -> list[Any]:
    """The items of an ordered collection: a list, tuple, array, tensor, generator...; not
    a ``str``/``bytes`` (text, not token ids), a mapping or a set (no order)."""
    if not isinstance(value, (str, bytes, bytearray, Mapping, Set)):
        try:
            items: list[Any] = list(value)  # type: ignore[call-overload]
            return items
        except TypeError:  # not iterable (a number, None, a 0-d tensor)
            pass
    hint = hint if isinstance(value, (str, bytes)) else ""
    raise TypeError(f"{name} must be {what}, got {_kind(value)}{hint}")


def _token(name: str, value: object, vocab: int | None) -> int:
    if vocab is None:
        return as_token(name, value)
    t = _index(name, value)
    if not 0 <= t < vocab:
        raise ValueError(
            f"{name} must be a token id of the model's vocabulary [0, {vocab}), got {t}"
        )
    return t


_PROMPTS = "a sequence of prompts (each a sequence of token ids)"
_TOKENIZE = "; tokenize the text first"


def check_prompts(prompts: object, vocab: int | None) -> list[list[int]]:
    """The token ids of each prompt (none is a run with nothing to do): each at least one id
    of the vocabulary ``[0, vocab)`` (a token id of the schedulers, ``0..=2**32-1``, when the
    model names no vocabulary size)."""
    items = _items("prompts", prompts, _PROMPTS, hint=_TOKENIZE)
    out = []
    for i, p in enumerate(items):
        name = f"prompts[{i}]"
        tokens = _items(name, p, "a sequence of token ids", hint=_TOKENIZE)
        if not tokens:
            raise ValueError(f"{name} must hold at least 1 token, got 0")
        out.append([_token(f"{name}[{j}]", t, vocab) for j, t in enumerate(tokens)])
    return out


def _scalar(value: object) -> bool:
    """A single number (an int, a float, a 0-d array or tensor), not a collection."""
    is_number = isinstance(value, (int, float)) or hasattr(type(value), "__index__")
    return is_number and getattr(value, "ndim", 0) == 0


def per_prompt(name: str, value: object, n: int, convert: Any) -> list[Any]:
    """``value`` as one entry per prompt, each checked by ``convert(name, v)``: a single
    number is repeated ``n`` times, a sequence gives entry ``i`` as ``name[i]``."""
    if _scalar(value):
        return [convert(name, value)] * n
    items = _items(name, value, "a number or a sequence of one number per prompt")
    if len(items) != n:
        raise ValueError(
            f"{name} needs one entry per prompt ({n}) when it is a sequence, got {len(items)}"
        )
    return [convert(f"{name}[{i}]", v) for i, v in enumerate(items)]


def as_arrival(name: str, value: object) -> float:
    a = as_number(name, value)
    if not (math.isfinite(a) and a >= 0):
        raise ValueError(f"{name} must be a finite number of seconds >= 0, got {a!r}")
    return a


def eos_ids(value: object) -> frozenset[int]:
    """``eos_token_id``: ``None``, one token id, or a collection of them. An id outside the
    vocabulary is allowed (it never stops a request), as ``model.generate`` allows it."""
    name = "eos_token_id"
    if value is None:
        return frozenset()
    if _scalar(value):
        return frozenset((as_token(name, value),))
    items = _items(name, value, "None, a token id or a sequence of token ids")
    return frozenset(as_token(f"{name}[{i}]", t) for i, t in enumerate(items))


def optional_list(name: str, value: object) -> list[Any] | None:
    """``None`` or a list the caller appends to (``timings``, ``sink``)."""
    if value is None or isinstance(value, list):
        return value
    reject(name, "None or a list to append to", value)


def reject(name: str, what: str, value: object) -> NoReturn:
    raise TypeError(f"{name} must be {what}, got {_kind(value)}")
