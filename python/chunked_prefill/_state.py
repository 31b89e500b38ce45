"""The exported form of a scheduler (``Scheduler.to_state()``), shared by both backends.

Version 1 is a dict of plain values::

    {
        "version": 1,
        "config": {"chunk_size": int, "max_decode_tokens": int, "interleave_decode": bool,
                   "token_budget": int | None, "max_prefills_per_step": int},
        "step_index": int,         # the index the next step will get (counters are
                                   # restored up to 2**127 - 1)
        "chunks_scheduled": int,
        "tokens_prefilled": int,
        "requests": [              # started (in start order), waiting (in scheduling
            {                      # order), then completed requests
                "request_id": int, "total_tokens": int, "processed_tokens": int,
                "cached_tokens": int, "priority": int,
            },
            ...
        ],
    }

A request is restored as completed when ``processed_tokens == total_tokens``, as started
when ``processed_tokens`` is past its prefill start, and as waiting otherwise.
:func:`parse` checks the types and ranges of every value (naming its path); the backend then
applies the scheduler's own rules.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any, NamedTuple

from ._validate import as_bool, as_counter, as_i64, as_optional_u64, as_u64, message

STATE_VERSION = 1
_TOP_KEYS = (
    "version",
    "config",
    "step_index",
    "chunks_scheduled",
    "tokens_prefilled",
    "requests",
)
_CONFIG_KEYS = (
    "chunk_size",
    "max_decode_tokens",
    "interleave_decode",
    "token_budget",
    "max_prefills_per_step",
)
_REQUEST_KEYS = ("request_id", "total_tokens", "processed_tokens", "cached_tokens", "priority")


def package_version() -> str:
    """The installed distribution's version (``0+unknown`` when run from a source tree)."""
    try:
        return metadata.version("chunked-prefill")
    except metadata.PackageNotFoundError:
        return "0+unknown"


class ParsedState(NamedTuple):
    """A checked state: config keywords, counters, and requests as plain tuples."""

    config: dict[str, Any]
    counters: tuple[int, int, int]
    requests: list[tuple[int, int, int, int, int]]


def build(
    config: dict[str, Any],
    step_index: int,
    chunks_scheduled: int,
    tokens_prefilled: int,
    requests: list[dict[str, Any]],
) -> dict[str, Any]:
    """Assemble the version-1 state dict."""
    return {
        "version": STATE_VERSION,
        "config": config,
        "step_index": step_index,
        "chunks_scheduled": chunks_scheduled,
        "tokens_prefilled": tokens_prefilled,
        "requests": requests,
    }


def _dict(path: str, value: object, keys: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(
            message(
                "state_not_dict", path=path, type_name=type(value).__name__, value_repr=repr(value)
            )
        )
    for key in keys:
        if key not in value:
            raise ValueError(message("state_missing_key", path=path, key=key))
    for key in value:
        if key not in keys:
            raise ValueError(message("state_unknown_key", path=path, key=key))
    return value


def parse(state: object) -> ParsedState:
    """Check ``state`` (the form of :func:`build`) and return its values.

    Raises ``TypeError`` for a value of the wrong type, ``ValueError`` for a missing or
    unknown key, a negative number or an unknown version, ``OverflowError`` for a number
    out of range. The scheduler's own rules (duplicate ids, ``processed_tokens`` out of
    range, config rules) are the backend's to check.
    """
    if isinstance(state, dict) and "version" in state:
        version = state["version"]
        if type(version) is not int or version != STATE_VERSION:
            raise ValueError(message("state_version", value_repr=repr(version)))
    top = _dict("state", state, _TOP_KEYS)
    cfg = _dict("state['config']", top["config"], _CONFIG_KEYS)
    p = "state['config']"
    config = {
        "chunk_size": as_u64(f"{p}['chunk_size']", cfg["chunk_size"]),
        "max_decode_tokens": as_u64(f"{p}['max_decode_tokens']", cfg["max_decode_tokens"]),
        "interleave_decode": as_bool(f"{p}['interleave_decode']", cfg["interleave_decode"]),
        "token_budget": as_optional_u64(f"{p}['token_budget']", cfg["token_budget"]),
        "max_prefills_per_step": as_u64(
            f"{p}['max_prefills_per_step']", cfg["max_prefills_per_step"]
        ),
    }
    counters = (
        as_counter("state['step_index']", top["step_index"]),
        as_counter("state['chunks_scheduled']", top["chunks_scheduled"]),
        as_counter("state['tokens_prefilled']", top["tokens_prefilled"]),
    )
    items = top["requests"]
    if not isinstance(items, list):
        raise TypeError(
            message(
                "state_not_list",
                path="state['requests']",
                type_name=type(items).__name__,
                value_repr=repr(items),
            )
        )
    requests = []
    for i, item in enumerate(items):
        p = f"state['requests'][{i}]"
        req = _dict(p, item, _REQUEST_KEYS)
        requests.append(
            (
                as_u64(f"{p}['request_id']", req["request_id"]),
                as_u64(f"{p}['total_tokens']", req["total_tokens"]),
                as_u64(f"{p}['processed_tokens']", req["processed_tokens"]),
                as_u64(f"{p}['cached_tokens']", req["cached_tokens"]),
                as_i64(f"{p}['priority']", req["priority"]),
            )
        )
    return ParsedState(config, counters, requests)
