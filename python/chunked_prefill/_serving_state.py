"""The exported form of a serving scheduler (``ServingScheduler.to_state()``), version 1.

:func:`parse` checks, in this order: the version and the kind; the keys, types and ranges of
every value (naming its path); the config's rules; then the scheduler's rules, each a
``ValueError`` ``state_rule`` naming the path: per request in list order (unique ids,
``prompt_len``, ``max_new_tokens``, the state, ``num_computed``, the table's size and
blocks, whether it can ever fit), the number of running requests, the free queue (every
block free xor held), and the registered hashes (by increasing block id, one block per
hash). Both backends raise the same messages from ``_messages.json``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

from ._state import _dict
from ._validate import (
    as_bool,
    as_counter,
    as_i64,
    as_number,
    as_request_id,
    as_token,
    as_u64,
    message,
)

_TOP_KEYS = (
    "version",
    "kind",
    "config",
    "step_index",
    "num_preemptions",
    "num_cached_tokens",
    "requests",
    "free_queue",
    "block_hashes",
)
_CONFIG_COUNTS = (
    "num_blocks",
    "block_size",
    "token_budget",
    "chunk_size",
    "max_prefills_per_step",
    "max_running",
)
_CONFIG_KEYS = (*_CONFIG_COUNTS, "watermark", "prefix_caching")
_REQUEST_KEYS = (
    "request_id",
    "priority",
    "cache_salt",
    "max_new_tokens",
    "prompt_len",
    "tokens",
    "num_computed",
    "state",
    "block_table",
    "num_preemptions",
    "num_cached_tokens",
)
_HEX = frozenset("0123456789abcdef")


_T = TypeVar("_T")


def listed(path: str, length: int, build: Callable[[], list[_T]]) -> list[_T]:
    """``build()``, the list of ``length`` entries at ``path`` of an export. A list too long
    to allocate (a pool or an int prompt of astronomical size) is the ``MemoryError``
    ``state_too_large``, as the Rust core refuses the allocation, not a bare ``MemoryError``
    or ``OverflowError``."""
    try:
        return build()
    except (MemoryError, OverflowError):
        raise MemoryError(message("state_too_large", path=path, len=length)) from None


class ParsedRequest(NamedTuple):
    """One checked request of the state."""

    request_id: int | str
    priority: int
    cache_salt: int
    max_new_tokens: int
    prompt_len: int
    tokens: list[int | None]
    num_computed: int
    running: bool
    block_table: list[int]
    num_preemptions: int
    num_cached_tokens: int


class ParsedServingState(NamedTuple):
    """A checked state: the config, the counters (step index, preemptions, cached tokens),
    the requests in seq order, each block's ref count, the free queue and the hashes."""

    config: Any
    counters: tuple[int, int, int]
    requests: list[ParsedRequest]
    ref: list[int]
    free_queue: list[int]
    hashes: dict[int, bytes]


def _list(path: str, value: object) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(
            message(
                "state_not_list", path=path, type_name=type(value).__name__, value_repr=repr(value)
            )
        )
    return value


def _rule(path: str, key: str, **fields: Any) -> ValueError:
    return ValueError(message("state_rule", path=path, message=message(key, **fields)))


def _parse_request(p: str, value: object) -> tuple[dict[str, Any], list[int | None], list[int]]:
    req = _dict(p, value, _REQUEST_KEYS)
    fields = {
        "request_id": as_request_id(f"{p}['request_id']", req["request_id"]),
        "priority": as_i64(f"{p}['priority']", req["priority"]),
        "cache_salt": as_u64(f"{p}['cache_salt']", req["cache_salt"]),
        "max_new_tokens": as_u64(f"{p}['max_new_tokens']", req["max_new_tokens"]),
        "prompt_len": as_u64(f"{p}['prompt_len']", req["prompt_len"]),
    }
    tokens: list[int | None] = [
        None if t is None else as_token(f"{p}['tokens'][{j}]", t)
        for j, t in enumerate(_list(f"{p}['tokens']", req["tokens"]))
    ]
    fields["num_computed"] = as_u64(f"{p}['num_computed']", req["num_computed"])
    fields["state"] = req["state"]
    table = [
        as_u64(f"{p}['block_table'][{j}]", b)
        for j, b in enumerate(_list(f"{p}['block_table']", req["block_table"]))
    ]
    fields["num_preemptions"] = as_u64(f"{p}['num_preemptions']", req["num_preemptions"])
    fields["num_cached_tokens"] = as_u64(f"{p}['num_cached_tokens']", req["num_cached_tokens"])
    return fields, tokens, table


def _parse_hash(p: str, entry: object) -> tuple[int, bytes]:
    pair = _list(p, entry)
    if len(pair) != 2:
        raise _rule(p, "state_hash_entry", value_repr=repr(entry))
    block = as_u64(f"{p}[0]", pair[0])
    text = pair[1]
    if not (isinstance(text, str) and len(text) == 32 and _HEX.issuperset(text)):
        raise _rule(f"{p}[1]", "state_hash_hex", value_repr=repr(text))
    return block, bytes.fromhex(text)


def parse(state: object, config_class: Any) -> ParsedServingState:
    """Check ``state`` (the form of ``to_state()``) and return its values; ``config_class``
    builds the config (``ServingConfig``)."""
    _check_version(state)
    top = _dict("state", state, _TOP_KEYS)
    cp = "state['config']"
    cfg = _dict(cp, top["config"], _CONFIG_KEYS)
    config_fields: dict[str, Any] = {k: as_u64(f"{cp}['{k}']", cfg[k]) for k in _CONFIG_COUNTS}
    config_fields["watermark"] = as_number(f"{cp}['watermark']", cfg["watermark"])
    config_fields["prefix_caching"] = as_bool(f"{cp}['prefix_caching']", cfg["prefix_caching"])
    counters = (
        as_counter("state['step_index']", top["step_index"]),
        as_counter("state['num_preemptions']", top["num_preemptions"]),
        as_counter("state['num_cached_tokens']", top["num_cached_tokens"]),
    )
    raw = [
        _parse_request(f"state['requests'][{i}]", item)
        for i, item in enumerate(_list("state['requests']", top["requests"]))
    ]
    free_queue = [
        as_u64(f"state['free_queue'][{j}]", b)
        for j, b in enumerate(_list("state['free_queue']", top["free_queue"]))
    ]
    hash_list = [
        _parse_hash(f"state['block_hashes'][{j}]", e)
        for j, e in enumerate(_list("state['block_hashes']", top["block_hashes"]))
    ]
    try:
        config = config_class(**config_fields)
    except ValueError as err:
        raise ValueError(message("state_rule", path=cp, message=err)) from None
    ref = [0] * config.num_blocks
    requests = _check_requests(raw, config, ref)
    _check_free_queue(free_queue, ref)
    hashes = _check_hashes(hash_list, len(ref))
    return ParsedServingState(config, counters, requests, ref, free_queue, hashes)


def _check_version(state: object) -> None:
    """The version and kind, checked before the keys so a future format says so first."""
    if isinstance(state, dict):
        if "version" in state:
            version = state["version"]
            if type(version) is not int or version != 1:
                raise ValueError(message("state_version", value_repr=repr(version)))
        if "kind" in state and state["kind"] != "serving":
            raise ValueError(message("state_kind", value_repr=repr(state["kind"])))


def _check_requests(raw: list[Any], config: Any, ref: list[int]) -> list[ParsedRequest]:
    """Apply the scheduler's rules to every request, counting each block's holders in
    ``ref``; then the running count against ``max_running``."""
    requests: list[ParsedRequest] = []
    seen: set[int] = set()
    for i, (f, tokens, table) in enumerate(raw):
        p = f"state['requests'][{i}]"
        rid = f["request_id"]
        if rid in seen:
            raise _rule(f"{p}['request_id']", "serving_duplicate", request_id=repr(rid))
        seen.add(rid)
        requests.append(_check_request(p, f, tokens, table, config, ref))
    running = sum(1 for r in requests if r.running)
    if running > config.max_running:
        raise _rule(
            "state['requests']",
            "state_too_many_running",
            count=running,
            max_running=config.max_running,
        )
    return requests


def _check_request(
    p: str, f: dict[str, Any], tokens: Any, table: list[int], config: Any, ref: list[int]
) -> ParsedRequest:
    """One request's rules, in the order of the contract's decisions."""
    num_blocks, bs, wm_blocks = config.num_blocks, config.block_size, config._watermark_blocks
    num_tokens, plen, max_new = len(tokens), f["prompt_len"], f["max_new_tokens"]
    if not 1 <= plen <= num_tokens:
        raise _rule(f"{p}['prompt_len']", "state_prompt_len", num_tokens=num_tokens, value=plen)
    if max_new == 0:
        raise _rule(f"{p}['max_new_tokens']", "max_new_tokens_zero")
    # A prompt is all ids (a list prompt) or all unknown (an int prompt), never a mix.
    known = sum(1 for t in tokens[:plen] if t is not None)
    if 0 < known < plen:
        raise _rule(f"{p}['tokens']", "state_prompt_mixed")
    if num_tokens - plen >= max_new:
        raise _rule(p, "state_finished", num_generated=num_tokens - plen, max_new_tokens=max_new)
    if f["state"] not in ("running", "waiting") or type(f["state"]) is not str:
        raise _rule(f"{p}['state']", "state_request_state", value_repr=repr(f["state"]))
    is_running = f["state"] == "running"
    nc = f["num_computed"]
    if (nc >= num_tokens) if is_running else (nc != 0):
        raise _rule(f"{p}['num_computed']", "state_num_computed", num_tokens=num_tokens, value=nc)
    expected = -(-nc // bs)
    if len(table) != expected:
        raise _rule(
            f"{p}['block_table']",
            "state_table_size",
            num_computed=nc,
            block_size=bs,
            expected=expected,
            got=len(table),
        )
    _hold_blocks(f"{p}['block_table']", table, ref)
    needed = -(-(plen + max_new - 1) // bs)
    if needed > num_blocks - wm_blocks:
        raise _rule(
            p,
            "request_never_fits",
            request_id=repr(f["request_id"]),
            prompt_tokens=plen,
            max_new_tokens=max_new,
            needed=needed,
            block_size=bs,
            usable=num_blocks - wm_blocks,
            num_blocks=num_blocks,
            watermark_blocks=wm_blocks,
        )
    return ParsedRequest(
        f["request_id"],
        f["priority"],
        f["cache_salt"],
        max_new,
        plen,
        tokens,
        nc,
        is_running,
        table,
        f["num_preemptions"],
        f["num_cached_tokens"],
    )


def _hold_blocks(path: str, table: list[int], ref: list[int]) -> None:
    """Count one request's blocks as held; each below ``num_blocks`` and once per table."""
    in_table: set[int] = set()
    for j, b in enumerate(table):
        bp = f"{path}[{j}]"
        if b >= len(ref):
            raise _rule(bp, "state_block_range", block=b, num_blocks=len(ref))
        if b in in_table:
            raise _rule(bp, "state_block_twice", block=b, where="one block table")
        in_table.add(b)
        ref[b] += 1


def _check_free_queue(free_queue: list[int], ref: list[int]) -> None:
    """Every block is free or held, never both, and none is lost."""
    num_blocks = len(ref)
    in_queue = [False] * num_blocks
    for j, b in enumerate(free_queue):
        bp = f"state['free_queue'][{j}]"
        if b >= num_blocks:
            raise _rule(bp, "state_block_range", block=b, num_blocks=num_blocks)
        if in_queue[b]:
            raise _rule(bp, "state_block_twice", block=b, where="the free queue")
        if ref[b]:
            raise _rule(bp, "state_block_free_and_held", block=b)
        in_queue[b] = True
    if len(free_queue) + sum(1 for c in ref if c) != num_blocks:
        lost = next(b for b in range(num_blocks) if not in_queue[b] and not ref[b])
        raise _rule("state['free_queue']", "state_block_lost", block=lost)


def _check_hashes(hash_list: list[tuple[int, bytes]], num_blocks: int) -> dict[int, bytes]:
    """Registered hashes: by increasing block id, one block per hash."""
    hashes: dict[int, bytes] = {}
    owner: dict[bytes, int] = {}
    previous = -1
    for j, (b, h) in enumerate(hash_list):
        bp = f"state['block_hashes'][{j}]"
        if b >= num_blocks:
            raise _rule(f"{bp}[0]", "state_block_range", block=b, num_blocks=num_blocks)
        if b <= previous:
            raise _rule(f"{bp}[0]", "state_hash_order", block=b, previous=previous)
        previous = b
        if h in owner:
            raise _rule(f"{bp}[1]", "state_hash_twice", hash=h.hex(), first=owner[h], second=b)
        owner[h] = b
        hashes[b] = h
    return hashes
