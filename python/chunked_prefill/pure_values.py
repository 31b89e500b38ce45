"""The value types of the pure serving scheduler: ``ServingConfig``, ``BatchItem``,
``Batch`` and ``RequestView`` (frozen, compared and hashed by their fields).

They behave exactly like the Rust binding's classes: same reprs, checks and messages.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable
from typing import Any, NoReturn, SupportsIndex

from ._validate import (
    RequestId,
    as_bool,
    as_number,
    as_request_id,
    as_u64,
    as_u128,
    iterate,
    make_final,
    message,
    type_error,
)

__all__ = ["Batch", "BatchItem", "RequestView", "ServingConfig"]

_object_new = object.__new__
_CONFIG_FIELDS = (
    "num_blocks",
    "block_size",
    "token_budget",
    "chunk_size",
    "max_prefills_per_step",
    "max_running",
    "watermark",
    "prefix_caching",
)


class _Value:
    """Equality and hashing by ``_key()``, a tuple of the fields, between instances of one
    class (any other class, the Rust twin's included, is ``NotImplemented``). The identity
    test first makes ``update(batch)`` with the batch just scheduled cheap."""

    __slots__ = ()

    def _key(self) -> tuple[Any, ...]:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self is other or self._key() == other._key()

    def __ne__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return not (self is other or self._key() == other._key())

    def __hash__(self) -> int:
        return hash(self._key())


class ServingConfig(_Value):
    """How the serving scheduler fills each step and sizes its KV block pool.

    ``num_blocks``: KV blocks in the pool. ``block_size``: tokens per block.
    ``token_budget``: tokens per step, decodes and prefill chunks together (vLLM's
    ``max_num_batched_tokens``). ``chunk_size``: the most tokens one request computes in one
    step. ``max_prefills_per_step``: prefill chunks per step. ``max_running``: requests
    holding blocks at once (vLLM's ``max_num_seqs``). ``watermark``: the fraction of the pool
    admission keeps free (``floor(watermark * num_blocks)`` blocks). ``prefix_caching``:
    whether full blocks are hashed and shared between requests with the same prefix.
    """

    __slots__ = (
        "_block_size",
        "_chunk_size",
        "_max_prefills_per_step",
        "_max_running",
        "_num_blocks",
        "_prefix_caching",
        "_token_budget",
        "_watermark",
        "_watermark_blocks",
    )
    _num_blocks: int
    _block_size: int
    _token_budget: int
    _chunk_size: int
    _max_prefills_per_step: int
    _max_running: int
    _watermark: float
    _prefix_caching: bool
    _watermark_blocks: int

    def __new__(
        cls,
        *,
        num_blocks: int,
        block_size: int = 16,
        token_budget: int = 2048,
        chunk_size: int = 512,
        max_prefills_per_step: int = 4,
        max_running: int = 256,
        watermark: float = 0.0,
        prefix_caching: bool = True,
        **unknown: Any,
    ) -> ServingConfig:
        for name in unknown:
            raise TypeError(message("unexpected_keyword", owner="ServingConfig", name=name))
        raw = (num_blocks, block_size, token_budget, chunk_size, max_prefills_per_step)
        counts = [as_u64(name, v) for name, v in zip(_CONFIG_FIELDS, (*raw, max_running))]
        wm = as_number("watermark", watermark)
        caching = as_bool("prefix_caching", prefix_caching)
        for name, v in zip(_CONFIG_FIELDS, counts):
            if v == 0:
                raise ValueError(message("count_zero", name=name, value=v))
        nb, bs, budget, chunk, maxp, maxr = counts
        if maxr >= budget:
            raise ValueError(
                message("max_running_too_large", token_budget=budget, max_running=maxr)
            )
        if not 0.0 <= wm < 1.0:
            raise ValueError(message("watermark_range", value=repr(wm)))
        self = _object_new(cls)
        self._num_blocks, self._block_size, self._token_budget = nb, bs, budget
        self._chunk_size, self._max_prefills_per_step, self._max_running = chunk, maxp, maxr
        self._watermark = wm
        self._prefix_caching = caching
        self._watermark_blocks = math.floor(wm * float(nb))
        return self

    @property
    def num_blocks(self) -> int:
        """KV blocks in the pool (ids ``0..num_blocks-1``)."""
        return self._num_blocks

    @property
    def block_size(self) -> int:
        """Tokens per KV block."""
        return self._block_size

    @property
    def token_budget(self) -> int:
        """The most tokens one step computes: decodes and prefill chunks together."""
        return self._token_budget

    @property
    def chunk_size(self) -> int:
        """The most tokens one request computes in one step."""
        return self._chunk_size

    @property
    def max_prefills_per_step(self) -> int:
        """The most prefill chunks (of different requests) in one step."""
        return self._max_prefills_per_step

    @property
    def max_running(self) -> int:
        """The most requests holding KV blocks at once."""
        return self._max_running

    @property
    def watermark(self) -> float:
        """The fraction of the pool that admission keeps free."""
        return self._watermark

    @property
    def prefix_caching(self) -> bool:
        """Whether full blocks are hashed and shared between requests with one prefix."""
        return self._prefix_caching

    def replace(self, **changes: Any) -> ServingConfig:
        """A copy with ``changes`` applied, validated like the constructor."""
        for name in changes:
            if name not in _CONFIG_FIELDS:
                raise TypeError(
                    message("unexpected_keyword", owner="ServingConfig.replace", name=name)
                )
        fields = self.to_dict()
        fields.update(changes)
        return ServingConfig(**fields)

    def to_dict(self) -> dict[str, Any]:
        """The fields, in order, as a dict of plain values (the constructor's keywords)."""
        return dict(zip(_CONFIG_FIELDS, self._key()))

    def _key(self) -> tuple[int, int, int, int, int, int, float, bool]:
        return (
            self._num_blocks,
            self._block_size,
            self._token_budget,
            self._chunk_size,
            self._max_prefills_per_step,
            self._max_running,
            self._watermark,
            self._prefix_caching,
        )

    def __reduce__(self) -> Any:
        return (_config_from_dict, (self.to_dict(),))

    def __repr__(self) -> str:
        return "ServingConfig(" + ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items()) + ")"


def _config_from_dict(fields: dict[str, Any]) -> ServingConfig:
    return ServingConfig(**fields)


class BatchItem(_Value):
    """One request's share of a step: compute positions ``[start, start + tokens)``.

    ``samples``: the step computes up to the request's last token, so the engine samples
    one token for it from this step's logits. ``new_blocks``: block ids appended to the
    request's block table in this step (for a request admitted in this step, its whole
    table, prefix-cache hits first). ``cached_tokens``: the prefix-cache hit at admission.
    """

    __slots__ = (
        "_cached_tokens",
        "_is_prefill",
        "_new_blocks",
        "_request_id",
        "_samples",
        "_start",
        "_tokens",
    )
    _request_id: RequestId
    _start: int
    _tokens: int
    _is_prefill: bool
    _samples: bool
    _new_blocks: tuple[int, ...]
    _cached_tokens: int

    def __new__(
        cls,
        *,
        request_id: int,
        start: int,
        tokens: int,
        is_prefill: bool,
        samples: bool,
        new_blocks: Iterable[int],
        cached_tokens: int,
    ) -> BatchItem:
        rid = as_request_id("request_id", request_id)
        first = as_u64("start", start)
        count = as_u64("tokens", tokens)
        prefill = as_bool("is_prefill", is_prefill)
        sample = as_bool("samples", samples)
        blocks = tuple(
            as_u64(f"new_blocks[{i}]", b)
            for i, b in enumerate(iterate("new_blocks", "block ids", new_blocks))
        )
        cached = as_u64("cached_tokens", cached_tokens)
        return _new_item(rid, first, count, prefill, sample, blocks, cached)

    @property
    def request_id(self) -> RequestId:
        """The request this share belongs to."""
        return self._request_id

    @property
    def start(self) -> int:
        """The first position computed: the request's ``num_computed`` when planned."""
        return self._start

    @property
    def tokens(self) -> int:
        """How many positions the engine computes for this request in this step."""
        return self._tokens

    @property
    def is_prefill(self) -> bool:
        """False for a decode (planned in pass 1), true for a prefill chunk."""
        return self._is_prefill

    @property
    def samples(self) -> bool:
        """Whether the engine samples a token for this request (``start + tokens ==
        num_tokens``)."""
        return self._samples

    @property
    def new_blocks(self) -> tuple[int, ...]:
        """Block ids appended to the request's block table in this step."""
        return self._new_blocks

    @property
    def cached_tokens(self) -> int:
        """Tokens found in the prefix cache when the request was admitted in this step."""
        return self._cached_tokens

    def _key(self) -> tuple[RequestId, int, int, bool, bool, tuple[int, ...], int]:
        return (
            self._request_id,
            self._start,
            self._tokens,
            self._is_prefill,
            self._samples,
            self._new_blocks,
            self._cached_tokens,
        )

    def __reduce__(self) -> Any:
        return (_item_from_key, self._key())

    def __repr__(self) -> str:
        return (
            f"BatchItem(request_id={self._request_id!r}, start={self._start},"
            f" tokens={self._tokens}, is_prefill={self._is_prefill}, samples={self._samples},"
            f" new_blocks={self._new_blocks!r}, cached_tokens={self._cached_tokens})"
        )


def _new_item(
    rid: RequestId,
    start: int,
    tokens: int,
    is_prefill: bool,
    samples: bool,
    new_blocks: tuple[int, ...],
    cached: int,
) -> BatchItem:
    item = _object_new(BatchItem)
    item._request_id = rid
    item._start = start
    item._tokens = tokens
    item._is_prefill = is_prefill
    item._samples = samples
    item._new_blocks = new_blocks
    item._cached_tokens = cached
    return item


def _item_from_key(*key: Any) -> BatchItem:
    return _new_item(*key)


class Batch(_Value):
    """One step's plan: the engine computes every item, then reports with
    :meth:`ServingScheduler.update`.

    ``preempted`` lists the requests whose blocks were taken back in this step, worst-ranked
    first; the engine drops their KV. ``sampling_ids`` are the ids of the items that sample,
    in item order (the order ``update``'s ``token_ids`` sequence follows).
    """

    __slots__ = (
        "_decode",
        "_items",
        "_num_free_blocks",
        "_preempted",
        "_prefill",
        "_sampling_ids",
        "_step_index",
    )
    _step_index: int
    _items: tuple[BatchItem, ...]
    _preempted: tuple[RequestId, ...]
    _num_free_blocks: int
    _sampling_ids: tuple[RequestId, ...]
    _prefill: int
    _decode: int

    def __new__(
        cls,
        *,
        step_index: int,
        items: Iterable[BatchItem],
        preempted: Iterable[int],
        num_free_blocks: int,
    ) -> Batch:
        index = as_u128("step_index", step_index)
        # Item by item, as the binding does: the first item that is not a BatchItem is
        # refused before the next is drawn (an endless iterator of anything fails at once).
        rows = []
        for item in iterate("items", "BatchItem values", items):
            if not isinstance(item, BatchItem):
                raise type_error("not_batch_item", "items", item)
            rows.append(item)
        checked = tuple(rows)
        gone = tuple(
            as_request_id(f"preempted[{i}]", r)
            for i, r in enumerate(iterate("preempted", "request ids", preempted))
        )
        free = as_u64("num_free_blocks", num_free_blocks)
        batch = _new_batch(index, checked, gone, free)
        for name, total in (
            ("num_prefill_tokens", batch._prefill),
            ("num_decode_tokens", batch._decode),
        ):
            if total > (1 << 64) - 1:
                raise OverflowError(message("above_u64", name=name, value=total))
        return batch

    @property
    def step_index(self) -> int:
        """Zero-based index of this step among the scheduler's batches."""
        return self._step_index

    @property
    def items(self) -> tuple[BatchItem, ...]:
        """Every request's share of the step, in planned order (decodes first)."""
        return self._items

    @property
    def preempted(self) -> tuple[RequestId, ...]:
        """Requests whose blocks were taken back in this step, worst-ranked first."""
        return self._preempted

    @property
    def sampling_ids(self) -> tuple[RequestId, ...]:
        """Ids of the items that sample, in item order."""
        return self._sampling_ids

    @property
    def num_prefill_tokens(self) -> int:
        """Tokens of the prefill items."""
        return self._prefill

    @property
    def num_decode_tokens(self) -> int:
        """Tokens of the decode items (one each)."""
        return self._decode

    @property
    def num_free_blocks(self) -> int:
        """Blocks in the free queue after this step's allocation."""
        return self._num_free_blocks

    @property
    def request_ids(self) -> tuple[RequestId, ...]:
        """Each item's request id, in item order."""
        return tuple(i._request_id for i in self._items)

    @property
    def starts(self) -> tuple[int, ...]:
        """Each item's first position, in item order."""
        return tuple(i._start for i in self._items)

    @property
    def token_counts(self) -> tuple[int, ...]:
        """Each item's token count, in item order."""
        return tuple(i._tokens for i in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def _key(self) -> tuple[int, tuple[BatchItem, ...], tuple[RequestId, ...], int]:
        return (self._step_index, self._items, self._preempted, self._num_free_blocks)

    def __reduce__(self) -> Any:
        return (_batch_from_key, self._key())

    def __repr__(self) -> str:
        return (
            f"Batch(step_index={self._step_index}, items={self._items!r},"
            f" preempted={self._preempted!r}, num_prefill_tokens={self._prefill},"
            f" num_decode_tokens={self._decode}, num_free_blocks={self._num_free_blocks})"
        )


def _new_batch(
    index: int, items: tuple[BatchItem, ...], preempted: tuple[RequestId, ...], free: int
) -> Batch:
    batch = _object_new(Batch)
    batch._step_index = index
    batch._items = items
    batch._preempted = preempted
    batch._num_free_blocks = free
    batch._sampling_ids = tuple(i._request_id for i in items if i._samples)
    batch._prefill = sum(i._tokens for i in items if i._is_prefill)
    batch._decode = sum(i._tokens for i in items if not i._is_prefill)
    return batch


def _batch_from_key(
    index: int, items: tuple[BatchItem, ...], preempted: tuple[RequestId, ...], free: int
) -> Batch:
    return _new_batch(index, items, preempted, free)


class RequestView(_Value):
    """A read-only snapshot of one tracked request (:meth:`ServingScheduler.request`).

    ``num_tokens`` is the prompt plus the tokens generated so far, ``num_computed`` the
    tokens whose KV is in the cache, ``num_cached_tokens`` the prefix-cache hits of all of
    the request's admissions.
    """

    __slots__ = (
        "_max_new_tokens",
        "_num_cached_tokens",
        "_num_computed",
        "_num_generated",
        "_num_preemptions",
        "_num_tokens",
        "_priority",
        "_request_id",
        "_state",
    )
    _request_id: RequestId
    _state: str
    _num_tokens: int
    _num_computed: int
    _num_generated: int
    _max_new_tokens: int
    _priority: int
    _num_preemptions: int
    _num_cached_tokens: int

    def __new__(cls, *args: Any, **kwargs: Any) -> RequestView:
        raise TypeError("No constructor defined for RequestView")

    def __reduce_ex__(self, protocol: SupportsIndex) -> NoReturn:
        # A snapshot without a constructor cannot be rebuilt: refused when pickled or copied,
        # in the Rust class's words (CPython's own, which name the module from protocol 2),
        # rather than pickled into bytes that no load can read.
        name = "RequestView"
        if operator.index(protocol) >= 2:
            name = f"{type(self).__module__}.{name}"
        raise TypeError(f"cannot pickle '{name}' object")

    @property
    def request_id(self) -> RequestId:
        """The caller's id of the request."""
        return self._request_id

    @property
    def state(self) -> str:
        """``"running"`` (it holds blocks) or ``"waiting"`` (new or preempted)."""
        return self._state

    @property
    def num_tokens(self) -> int:
        """Prompt tokens plus the tokens generated so far."""
        return self._num_tokens

    @property
    def num_computed(self) -> int:
        """Tokens whose KV is in the cache (0 while waiting)."""
        return self._num_computed

    @property
    def num_generated(self) -> int:
        """Tokens sampled for this request so far."""
        return self._num_generated

    @property
    def max_new_tokens(self) -> int:
        """The request finishes when it has this many generated tokens."""
        return self._max_new_tokens

    @property
    def priority(self) -> int:
        """Lower runs first and is preempted last."""
        return self._priority

    @property
    def num_preemptions(self) -> int:
        """How many times the request's blocks were taken back."""
        return self._num_preemptions

    @property
    def num_cached_tokens(self) -> int:
        """Prefix-cache hit tokens summed over the request's admissions."""
        return self._num_cached_tokens

    def _key(self) -> tuple[RequestId, str, int, int, int, int, int, int, int]:
        return (
            self._request_id,
            self._state,
            self._num_tokens,
            self._num_computed,
            self._num_generated,
            self._max_new_tokens,
            self._priority,
            self._num_preemptions,
            self._num_cached_tokens,
        )

    def __repr__(self) -> str:
        return (
            f"RequestView(request_id={self._request_id!r}, state={self._state!r},"
            f" num_tokens={self._num_tokens}, num_computed={self._num_computed},"
            f" num_generated={self._num_generated}, max_new_tokens={self._max_new_tokens},"
            f" priority={self._priority}, num_preemptions={self._num_preemptions},"
            f" num_cached_tokens={self._num_cached_tokens})"
        )


make_final(ServingConfig, BatchItem, Batch, RequestView)
