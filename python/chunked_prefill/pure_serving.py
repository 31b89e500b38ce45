"""The pure-Python twin of the Rust serving scheduler (``docs/serving-contract.md``).

Same classes, results, reprs, state exports, exception classes and messages as
``chunked_prefill._core``'s ``ServingScheduler``, and the same data structures (running
requests in a list sorted by rank, waiting ones in a heap with lazy deletion, the block pool's
free queue as an index-linked list, a dict hash -> block), so that it is both the reference of
the differential tests and the baseline of the benchmarks.

Thread safety: each public call that reads or changes several fields holds the scheduler's
lock, and converts its arguments (which may run user code through ``__index__``, ``__len__``
or a mapping's ``items``) before taking it, so no user code runs while the lock is held. If a
call on the same scheduler nevertheless re-enters from the thread that holds the lock (a
finalizer or a signal handler that runs in the middle of a call), it raises ``RuntimeError``
(``serving_reentrant``) instead of deadlocking or seeing a half-made change.

Interrupts: an exception can escape from any line (a signal handler's ``KeyboardInterrupt``, a
``MemoryError``). Each update does its checks and its allocations that grow with the caller's
numbers before its first change, and marks the changes in progress (``_mutating``); an
exception that escapes between the first and the last change leaves the mark, and every later
call raises ``RuntimeError`` (``serving_broken``) rather than plan from a half-made change. One
that escapes before the first change leaves the scheduler as it was.
"""

from __future__ import annotations

import mmap
import struct
import sys
import threading
from bisect import bisect_left, insort
from collections.abc import Iterable
from heapq import heapify, heappop, heappush, nsmallest
from types import FrameType
from typing import Any

from . import _serving_state
from ._validate import (
    RequestId,
    as_i64,
    as_prompt,
    as_request_id,
    as_token,
    as_tokens,
    as_u64,
    is_sequence,
    iterate,
    make_final,
    message,
    token_pairs,
    type_error,
)
from .pure_blocks import BlockPool, block_packer, chain_hash, root_hash
from .pure_values import (
    Batch,
    BatchItem,
    RequestView,
    ServingConfig,
    _new_batch,
    _new_item,
)

__all__ = ["Batch", "BatchItem", "RequestView", "ServingConfig", "ServingScheduler"]

_object_new = object.__new__


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class _Req:
    """One tracked request. ``prompt`` is ``None`` for a length-only prompt; ``out`` holds
    the generated tokens (``None`` where the engine did not report the id); ``known`` is
    the length of the all-known prefix of prompt + out; ``hashes`` caches the chain hashes
    of its full known blocks (pure functions of content)."""

    __slots__ = (
        "cache_salt",
        "hashes",
        "known",
        "max_new",
        "num_cached",
        "num_computed",
        "num_preemptions",
        "num_tokens",
        "out",
        "priority",
        "prompt",
        "prompt_len",
        "rid",
        "running",
        "seq",
        "table",
    )
    rid: RequestId
    seq: int
    priority: int
    cache_salt: int
    max_new: int
    prompt_len: int
    prompt: list[int | None] | None
    out: list[int | None]
    known: int
    num_tokens: int
    num_computed: int
    table: list[int]
    hashes: list[bytes]
    num_preemptions: int
    num_cached: int
    running: bool

    def copy(self) -> _Req:
        other = _object_new(_Req)
        for name in _Req.__slots__:
            setattr(other, name, getattr(self, name))
        other.out = self.out.copy()
        other.table = self.table.copy()
        other.hashes = self.hashes.copy()
        return other

    def tokens(self) -> list[int | None]:
        """Prompt + generated tokens, ``None`` where unknown."""
        prompt = self.prompt if self.prompt is not None else [None] * self.prompt_len
        return [*prompt, *self.out]

    def block_tokens(self, i: int, bs: int) -> list[int]:
        """The ids of block ``i``, which is full and all known."""
        s, e, pl = i * bs, (i + 1) * bs, self.prompt_len
        if e <= pl:
            got = self.prompt[s:e]  # type: ignore[index]
        elif s >= pl:
            got = self.out[s - pl : e - pl]
        else:
            got = self.prompt[s:] + self.out[: e - pl]  # type: ignore[index]
        return got  # type: ignore[return-value]


# A step or an update that needs more than this many blocks (allocated, or hashed) first
# checks that the memory they take is there, so that a MemoryError comes before its first
# change; below it, what they take is small next to what the scheduler already holds.
_PROBE_BLOCKS = 1 << 16
# A generous bound on the bytes one block costs the twin in a step or an update: five pool
# slots, its id, its places in the table, the new-block list and the item's tuple, its hash.
_BYTES_PER_BLOCK = 256


def _probe(blocks: int, what: str) -> None:
    """Raise ``MemoryError`` (the Rust core's message; ``what`` names the call and its
    blocks) unless ``blocks`` blocks' worth of memory can be had now (an address-space
    reservation, released at once and never touched)."""
    if blocks <= _PROBE_BLOCKS:
        return
    try:
        mmap.mmap(-1, blocks * _BYTES_PER_BLOCK).close()
    except (OSError, OverflowError, ValueError):
        raise MemoryError(message("out_of_memory", what=what.format(blocks))) from None


# An item of a plan: (id, start, tokens, is_prefill, samples, new blocks, cached tokens).
_Item = tuple[RequestId, int, int, bool, bool, tuple[int, ...], int]


class _Plan:
    """The scratch of one ``schedule()``: items (``None`` once removed by a preemption),
    where each request's item is, the budget and prefill count left, preempted ids."""

    __slots__ = ("budget", "items", "preempted", "prefills", "where")

    def __init__(self, budget: int) -> None:
        self.items: list[_Item | None] = []
        self.where: dict[RequestId, int] = {}
        self.budget = budget
        self.prefills = 0
        self.preempted: list[RequestId] = []

    def add(self, item: _Item) -> None:
        self.where[item[0]] = len(self.items)
        self.items.append(item)
        self.budget -= item[2]
        if item[3]:
            self.prefills += 1


def _convert_token_ids(
    batch: Batch, token_ids: object
) -> tuple[list[int] | None, dict[RequestId, int] | None]:
    """``update``'s ``token_ids`` as a list aligned with ``sampling_ids`` or a dict."""
    if token_ids is None:
        return None, None
    sampled = batch._sampling_ids
    if hasattr(token_ids, "keys") and hasattr(token_ids, "items"):
        index = set(sampled)
        by_id: dict[RequestId, int] = {}
        for key, value in token_pairs(token_ids):
            rid = as_request_id("token_ids key", key)
            if rid not in index:
                raise ValueError(
                    message(
                        "token_ids_not_sampled", request_id=repr(rid), step_index=batch._step_index
                    )
                )
            by_id[rid] = as_token(f"token_ids[{rid!r}]", value)
        return None, by_id
    if not is_sequence(token_ids):
        raise type_error("token_ids_type", "token_ids", token_ids)
    n = len(token_ids)  # type: ignore[arg-type]
    if n != len(sampled):
        raise ValueError(message("token_ids_length", expected=len(sampled), got=n))
    return as_tokens("token_ids", token_ids), None


def _convert_finished(finished: Iterable[object]) -> list[RequestId]:
    ids = [
        as_request_id(f"finished[{i}]", r)
        for i, r in enumerate(iterate("finished", "request ids", finished))
    ]
    seen: set[RequestId] = set()
    for rid in ids:
        if rid in seen:
            raise ValueError(message("finished_duplicate", request_id=repr(rid)))
        seen.add(rid)
    return ids


class ServingScheduler:
    """Owns the request lifecycle of a paged-attention engine: plans every step (decodes
    first, then prefill chunks, then admissions), owns the KV block pool with prefix caching,
    and preempts the worst-ranked request when a running one needs a block.

    The engine loop: :meth:`add_request` as requests arrive; ``batch = s.schedule()``; run
    ``batch.items`` in one forward pass; ``s.update(batch, token_ids=...)``, which returns
    the requests that finished.
    """

    __slots__ = (
        "_aborted",
        "_config",
        "_deficit",
        "_heap",
        "_lock",
        "_mutating",
        "_num_cached",
        "_num_preemptions",
        "_num_waiting",
        "_packer",
        "_pending",
        "_pending_ids",
        "_pool",
        "_reqs",
        "_running",
        "_seq",
        "_step",
    )
    _config: ServingConfig
    # Every tracked request by id, in add_request (seq) order.
    _reqs: dict[RequestId, _Req]
    # Running requests as (priority, seq, id), sorted: the last one is the worst-ranked.
    _running: list[tuple[int, int, RequestId]]
    # Waiting requests as (priority, seq, id); an entry is live when its id is tracked,
    # waiting and has that seq.
    _heap: list[tuple[int, int, RequestId]]
    _num_waiting: int
    _pool: BlockPool
    # R: the blocks running requests still need to reach their num_tokens, kept up to date.
    _deficit: int
    _seq: int
    _step: int
    _num_preemptions: int
    _num_cached: int
    _pending: Batch | None
    _pending_ids: set[RequestId]
    # Requests aborted since the pending batch was planned (update skips their items).
    _aborted: set[RequestId]
    _packer: struct.Struct
    # Held by every call that reads or changes several fields (see `_locked`).
    _lock: threading.RLock
    # The update in progress, named from its first change to its last: still set after the
    # call only if an exception cut it short.
    _mutating: str | None

    def __new__(cls, config: ServingConfig) -> ServingScheduler:
        if not isinstance(config, ServingConfig):
            raise type_error("not_serving_config", "config", config)
        self = _object_new(cls)
        self._config = config
        self._reqs = {}
        self._running = []
        self._heap = []
        self._num_waiting = 0
        self._pool = BlockPool(config._num_blocks)
        self._deficit = 0
        self._seq = 0
        self._step = 0
        self._num_preemptions = 0
        self._num_cached = 0
        self._pending = None
        self._pending_ids = set()
        self._aborted = set()
        self._packer = block_packer(config._block_size)
        self._lock = threading.RLock()
        self._mutating = None
        return self

    def _locked(self) -> threading.RLock:
        """The lock, for a ``with`` statement. It is written in C, so no Python code (no
        signal handler) runs between taking it and entering the block, nor (CPython 3.10
        and later) between leaving the block and releasing it. Held already by this thread,
        it is either held by a call in progress below (a finalizer or a signal handler
        re-entered: refused) or left by an interrupt that landed in the one instruction
        CPython 3.9 runs between a ``with`` block and its release (let go)."""
        lock = self._lock
        if lock._is_owned():  # type: ignore[attr-defined]
            if self._call_in_progress(sys._getframe(2)):
                raise RuntimeError(message("serving_reentrant"))
            while lock._is_owned():  # type: ignore[attr-defined]
                lock.release()
        return lock

    def _call_in_progress(self, frame: FrameType | None) -> bool:
        """Whether a call on this scheduler that takes its lock is running at ``frame`` or
        below it (its frame exists before it takes the lock and until it has let go)."""
        while frame is not None:
            if frame.f_code in _LOCKED_CODES and frame.f_locals.get("self") is self:
                return True
            frame = frame.f_back
        return False

    def _usable(self) -> None:
        """Refuse every call once an update was cut short half done."""
        if self._mutating is not None:
            raise RuntimeError(message("serving_broken", method=self._mutating))

    @property
    def config(self) -> ServingConfig:
        """The scheduler's configuration."""
        return self._config

    @property
    def num_free_blocks(self) -> int:
        """Blocks in the free queue (cached ones included)."""
        with self._locked():
            self._usable()
            return self._pool.num_free

    @property
    def num_running(self) -> int:
        """Requests that hold blocks."""
        with self._locked():
            self._usable()
            return len(self._running)

    @property
    def num_waiting(self) -> int:
        """Requests waiting for admission (new or preempted)."""
        with self._locked():
            self._usable()
            return self._num_waiting

    @property
    def num_preemptions(self) -> int:
        """Preemptions so far."""
        with self._locked():
            self._usable()
            return self._num_preemptions

    @property
    def num_cached_tokens(self) -> int:
        """Prefix-cache hit tokens so far, over every admission."""
        with self._locked():
            self._usable()
            return self._num_cached

    @property
    def step_index(self) -> int:
        """The index the next batch will get (the first batch is 0)."""
        with self._locked():
            self._usable()
            return self._step

    def add_request(
        self,
        request_id: RequestId,
        prompt: Any,
        max_new_tokens: int,
        *,
        priority: int = 0,
        cache_salt: int = 0,
    ) -> None:
        """Track a request. ``prompt`` is its token ids (a sequence or a numpy integer
        array) or just its length (an int: no prefix caching for it). Lower ``priority``
        runs first, ties in the order of the calls; ``cache_salt`` separates prefix caches.
        """
        rid = as_request_id("request_id", request_id)
        tokens = as_prompt(prompt)
        max_new = as_u64("max_new_tokens", max_new_tokens)
        prio = as_i64("priority", priority)
        salt = as_u64("cache_salt", cache_salt)
        plen = tokens if isinstance(tokens, int) else len(tokens)
        if plen == 0:
            raise ValueError(message("prompt_empty"))
        if max_new == 0:
            raise ValueError(message("max_new_tokens_zero"))
        cfg = self._config
        with self._locked():
            self._usable()
            if rid in self._reqs:
                raise ValueError(message("serving_duplicate", request_id=repr(rid)))
            if rid in self._pending_ids:
                index = self._pending._step_index  # type: ignore[union-attr]
                raise ValueError(message("request_pending", request_id=repr(rid), step_index=index))
            needed = _cdiv(plen + max_new - 1, cfg._block_size)
            usable = cfg._num_blocks - cfg._watermark_blocks
            if needed > usable:
                raise ValueError(
                    message(
                        "request_never_fits",
                        request_id=repr(rid),
                        prompt_tokens=plen,
                        max_new_tokens=max_new,
                        needed=needed,
                        block_size=cfg._block_size,
                        usable=usable,
                        num_blocks=cfg._num_blocks,
                        watermark_blocks=cfg._watermark_blocks,
                    )
                )
            r = _object_new(_Req)
            r.rid, r.seq, r.priority, r.cache_salt, r.max_new = rid, self._seq, prio, salt, max_new
            r.prompt_len = r.num_tokens = plen
            r.prompt = None if isinstance(tokens, int) else tokens  # type: ignore[assignment]
            r.known = 0 if r.prompt is None else plen
            r.out, r.table, r.hashes = [], [], []
            r.num_computed = r.num_preemptions = r.num_cached = 0
            r.running = False
            self._mutating = "add_request"
            self._seq += 1
            self._reqs[rid] = r
            heappush(self._heap, (prio, r.seq, rid))
            self._num_waiting += 1
            self._mutating = None

    def cached_prefix_tokens(self, prompt: Any, *, cache_salt: int = 0) -> int:
        """How many leading tokens of ``prompt`` (as :meth:`add_request` takes it; a bare
        length has no ids, so none), with this ``cache_salt``, the prefix cache holds:
        ``block_size`` times the longest run of leading full blocks whose chain hash is in
        the pool, held or free but still hashed (0 with prefix caching off). Unlike
        admission it keeps no last token back, and it changes nothing (no block is taken,
        the free queue keeps its order)."""
        tokens = as_prompt(prompt)
        salt = as_u64("cache_salt", cache_salt)
        cfg = self._config
        bs = cfg._block_size
        with self._locked():
            self._usable()
            if isinstance(tokens, int) or not cfg._prefix_caching:
                return 0
            by_hash = self._pool.by_hash
            parent = root_hash(salt)
            found = 0
            for start in range(0, len(tokens) - bs + 1, bs):
                parent = chain_hash(parent, self._packer, tokens[start : start + bs])
                if parent not in by_hash:
                    break
                found += 1
        return found * bs

    # -- the step rule -------------------------------------------------------------------

    def schedule(self) -> Batch:
        """Plan the next step: decodes, then started prefills, then admissions (none in a
        step that preempted), each pass in rank order. The batch awaits :meth:`update`."""
        with self._locked():
            self._usable()
            if self._pending is not None:
                raise RuntimeError(message("batch_pending", step_index=self._pending._step_index))
            _probe(self._step_blocks(), "schedule(): a step of up to {} KV blocks")
            self._mutating = "schedule"
            batch = self._plan_step()
            self._mutating = None
            return batch

    def _step_blocks(self) -> int:
        """How many blocks the next step may allocate at most, or 0 if few. Started requests
        take at most the blocks they miss (the deficit), admitted ones at most their prompt's
        and the free ones, and any item at most a chunk's worth plus one: so a large bound
        is the size of a request that is really there, not of the configuration."""
        cfg = self._config
        bs, running = cfg._block_size, self._running
        per_item = _cdiv(min(cfg._chunk_size, cfg._token_budget), bs) + 1
        admit = max(0, min(cfg._max_prefills_per_step, cfg._max_running - len(running)))
        free = self._pool.num_free
        if min(free + self._deficit, (len(running) + admit) * per_item) <= _PROBE_BLOCKS:
            return 0
        reqs = self._reqs
        started = 0
        for _, _, rid in running:
            req = reqs[rid]
            started += min(_cdiv(req.num_tokens, bs) - len(req.table), per_item)
        live = [e for e in self._heap if (r := reqs.get(e[2])) and not r.running and r.seq == e[1]]
        admitted = sum(
            min(_cdiv(reqs[e[2]].num_tokens, bs), per_item) for e in nsmallest(admit, live)
        )
        return min(self._deficit, started) + min(free, admitted)

    def _plan_step(self) -> Batch:
        """The three passes of :meth:`schedule`, changing the scheduler as they go."""
        cfg = self._config
        bs, chunk = cfg._block_size, cfg._chunk_size
        maxp = cfg._max_prefills_per_step
        pool, reqs, running = self._pool, self._reqs, self._running
        plan = _Plan(cfg._token_budget)
        # Pass 1: every decode gets its 1 token (max_running < token_budget: room).
        i = 0
        while i < len(running):
            r = reqs[running[i][2]]
            nc = r.num_computed
            if r.num_tokens - nc == 1:
                need = 1 if nc == bs * len(r.table) else 0
                if need and not self._reserve(r, 1, plan):
                    continue
                new = pool.allocate(need, r.table) if need else []
                self._deficit -= need
                plan.add((r.rid, nc, 1, False, True, tuple(new), 0))
            i += 1
        # Pass 2: started prefills, while the prefill count and the budget allow.
        i = 0
        while i < len(running) and plan.prefills < maxp and plan.budget > 0:
            r = reqs[running[i][2]]
            nc = r.num_computed
            left = r.num_tokens - nc
            if left > 1:
                n = min(left, chunk, plan.budget)
                need = _cdiv(nc + n, bs) - len(r.table)
                if need > 0 and not self._reserve(r, need, plan):
                    continue
                new = pool.allocate(need, r.table) if need > 0 else []
                self._deficit -= len(new)
                plan.add((r.rid, nc, n, True, nc + n == r.num_tokens, tuple(new), 0))
            i += 1
        # Pass 3: admission, never in a step that preempted, never skipping ahead.
        if not plan.preempted:
            self._admit(plan)
        items = tuple(_new_item(*t) for t in plan.items if t is not None)
        batch = _new_batch(self._step, items, tuple(plan.preempted), pool.num_free)
        self._step += 1
        self._pending = batch
        self._pending_ids = {t[0] for t in plan.items if t is not None}
        self._aborted = set()
        return batch

    def _reserve(self, r: _Req, need: int, plan: _Plan) -> bool:
        """Preempt worst-ranked running requests until ``need`` blocks are free; false if
        ``r`` itself was the worst-ranked and was preempted."""
        pool, running, reqs = self._pool, self._running, self._reqs
        while pool.num_free < need:
            victim = reqs[running[-1][2]]
            self._preempt(victim, plan)
            if victim is r:
                return False
        return True

    def _preempt(self, r: _Req, plan: _Plan) -> None:
        """Take back the blocks of ``r``, the last of the running list, and drop its item."""
        self._deficit -= _cdiv(r.num_tokens, self._config._block_size) - len(r.table)
        self._pool.free(r.table)
        self._running.pop()
        r.running = False
        r.num_computed = 0
        r.num_preemptions += 1
        self._num_preemptions += 1
        heappush(self._heap, (r.priority, r.seq, r.rid))
        self._num_waiting += 1
        plan.preempted.append(r.rid)
        index = plan.where.pop(r.rid, None)
        if index is not None:
            item = plan.items[index]
            assert item is not None
            plan.items[index] = None
            plan.budget += item[2]
            if item[3]:
                plan.prefills -= 1

    def _peek(self) -> _Req | None:
        """The best-ranked waiting request (dead heap entries are dropped on the way)."""
        heap, reqs = self._heap, self._reqs
        while heap:
            _, seq, rid = heap[0]
            r = reqs.get(rid)
            if r is not None and not r.running and r.seq == seq:
                return r
            heappop(heap)
        return None

    def _hits(self, r: _Req) -> list[int]:
        """The blocks of ``r``'s longest cached prefix, at most ``num_tokens - 1`` tokens."""
        bs = self._config._block_size
        limit = min((r.num_tokens - 1) // bs, r.known // bs)
        by_hash = self._pool.by_hash
        hashes = r.hashes
        hits: list[int] = []
        for i in range(limit):
            if i == len(hashes):
                parent = hashes[-1] if hashes else root_hash(r.cache_salt)
                hashes.append(chain_hash(parent, self._packer, r.block_tokens(i, bs)))
            b = by_hash.get(hashes[i])
            if b is None:
                break
            hits.append(b)
        return hits

    def _admit(self, plan: _Plan) -> None:
        cfg = self._config
        bs, chunk, wm = cfg._block_size, cfg._chunk_size, cfg._watermark_blocks
        pool, running = self._pool, self._running
        while (
            plan.budget > 0
            and plan.prefills < cfg._max_prefills_per_step
            and len(running) < cfg._max_running
        ):
            r = self._peek()
            if r is None:
                return
            hits = self._hits(r) if cfg._prefix_caching else []
            free = pool.num_free - sum(1 for b in hits if pool.ref[b] == 0)
            blocks = _cdiv(r.num_tokens, bs)
            if blocks - len(hits) > free - self._deficit - wm:
                return
            heappop(self._heap)
            self._num_waiting -= 1
            for b in hits:
                pool.take_hit(b)
            r.table = hits
            start = len(hits) * bs
            r.num_computed = start
            r.num_cached += start
            self._num_cached += start
            r.running = True
            insort(running, (r.priority, r.seq, r.rid))
            n = min(r.num_tokens - start, chunk, plan.budget)
            need = _cdiv(start + n, bs) - len(hits)
            pool.allocate(need, r.table)
            self._deficit += blocks - len(r.table)
            samples = start + n == r.num_tokens
            plan.add((r.rid, start, n, True, samples, tuple(r.table), start))

    # -- reports from the engine ---------------------------------------------------------

    def _check_pending(self, batch: Batch) -> None:
        pending = self._pending
        if pending is None:
            raise RuntimeError(message("batch_not_pending", got=batch._step_index))
        if pending != batch:
            raise RuntimeError(
                message("batch_stale", got=batch._step_index, expected=pending._step_index)
            )

    def update(
        self, batch: Batch, *, token_ids: Any = None, finished: Iterable[RequestId] = ()
    ) -> list[RequestId]:
        """Report that ``batch`` ran: each item's request computed its tokens, and each
        sampling item got a token (``token_ids``: a sequence aligned with
        ``batch.sampling_ids`` or a mapping id -> token id; a token not given is unknown,
        which ends that request's prefix caching). ``finished`` names tracked requests that
        stopped now. Returns the ids that finished, in the order their blocks were freed.
        """
        if not isinstance(batch, Batch):
            raise type_error("not_batch", "batch", batch)
        with self._locked():
            self._usable()
            self._check_pending(batch)
        by_pos, by_id = _convert_token_ids(batch, token_ids)
        done = _convert_finished(finished)
        with self._locked():
            self._usable()
            self._check_pending(batch)
            reqs = self._reqs
            for rid in done:
                if rid not in reqs:
                    raise KeyError(message("unknown_request", request_id=repr(rid)))
            _probe(self._hash_blocks(batch), "update(): hashing {} KV blocks")
            self._mutating = "update"
            out = self._apply(batch, by_pos, by_id, done)
            self._mutating = None
            return out

    def _hash_blocks(self, batch: Batch) -> int:
        """How many blocks ``batch``'s report may hash at most, or 0 if few: the blocks of
        each reported item that become full and all known."""
        cfg = self._config
        bs, items = cfg._block_size, batch._items
        if not cfg._prefix_caching or sum(i._tokens for i in items) // bs + len(items) <= (
            _PROBE_BLOCKS
        ):
            return 0
        reqs, aborted, count = self._reqs, self._aborted, 0
        for item in items:
            if item._request_id not in aborted:
                r = reqs[item._request_id]
                old = r.num_computed
                count += max(0, min(old + item._tokens, r.known + 1) // bs - old // bs)
        return count

    def _apply(
        self,
        batch: Batch,
        by_pos: list[int] | None,
        by_id: dict[RequestId, int] | None,
        done: list[RequestId],
    ) -> list[RequestId]:
        cfg = self._config
        bs = cfg._block_size
        reqs, aborted = self._reqs, self._aborted
        live: list[tuple[_Req, int]] = []
        k = 0
        for item in batch._items:
            rid = item._request_id
            token = None
            if item._samples:
                if by_pos is not None:
                    token = by_pos[k]
                elif by_id is not None:
                    token = by_id.get(rid)
                k += 1
            if rid in aborted:
                continue
            r = reqs[rid]
            old = r.num_computed
            r.num_computed = old + item._tokens
            if item._samples:
                if r.known == r.num_tokens and token is not None:
                    r.known += 1
                r.out.append(token)
                if r.num_tokens % bs == 0:
                    self._deficit += 1
                r.num_tokens += 1
            live.append((r, old))
        # Hash every block that became full and computed, before any block is freed.
        if cfg._prefix_caching:
            pool, packer = self._pool, self._packer
            for r, old in live:
                hashes = r.hashes
                for i in range(old // bs, min(r.num_computed, r.known) // bs):
                    while len(hashes) <= i:
                        j = len(hashes)
                        parent = hashes[-1] if hashes else root_hash(r.cache_salt)
                        hashes.append(chain_hash(parent, packer, r.block_tokens(j, bs)))
                    pool.register(r.table[i], hashes[i])
        stopped = set(done)
        out = [r.rid for r, _ in live if len(r.out) == r.max_new or r.rid in stopped]
        listed = set(out)
        out.extend(rid for rid in done if rid not in listed)
        for rid in out:
            self._forget(reqs[rid])
        self._pending = None
        self._pending_ids = set()
        self._aborted = set()
        return out

    def _forget(self, r: _Req) -> None:
        """Free ``r``'s blocks and stop tracking it."""
        if r.running:
            self._deficit -= _cdiv(r.num_tokens, self._config._block_size) - len(r.table)
            self._pool.free(r.table)
            running = self._running
            del running[bisect_left(running, (r.priority, r.seq, r.rid))]
        else:
            self._num_waiting -= 1
            if len(self._heap) > 2 * self._num_waiting + 16:
                self._compact_heap(r)
        del self._reqs[r.rid]

    def _compact_heap(self, gone: _Req) -> None:
        reqs = self._reqs
        self._heap = [
            e
            for e in self._heap
            if e[2] != gone.rid
            and (r := reqs.get(e[2])) is not None
            and not r.running
            and r.seq == e[1]
        ]
        heapify(self._heap)

    def abort(self, request_id: RequestId) -> None:
        """Cancel a tracked request at any time: its blocks are freed at once, and the
        pending batch's item for it (if any) is skipped by :meth:`update`."""
        rid = as_request_id("request_id", request_id)
        with self._locked():
            self._usable()
            r = self._reqs.get(rid)
            if r is None:
                raise KeyError(message("unknown_request", request_id=repr(rid)))
            self._mutating = "abort"
            self._forget(r)
            if rid in self._pending_ids:
                self._aborted.add(rid)
            self._mutating = None

    # -- lookups -------------------------------------------------------------------------

    def _get(self, request_id: object) -> _Req:
        rid = as_request_id("request_id", request_id)
        r = self._reqs.get(rid)
        if r is None:
            raise KeyError(message("unknown_request", request_id=repr(rid)))
        return r

    def block_table(self, request_id: RequestId) -> list[int]:
        """The request's block ids, in position order (empty while waiting)."""
        rid = as_request_id("request_id", request_id)
        with self._locked():
            self._usable()
            return list(self._get(rid).table)

    def request(self, request_id: RequestId) -> RequestView:
        """A snapshot of one tracked request."""
        rid = as_request_id("request_id", request_id)
        with self._locked():
            self._usable()
            r = self._get(rid)
            view = _object_new(RequestView)
            view._request_id = rid
            view._state = "running" if r.running else "waiting"
            view._num_tokens = r.num_tokens
            view._num_computed = r.num_computed
            view._num_generated = len(r.out)
            view._max_new_tokens = r.max_new
            view._priority = r.priority
            view._num_preemptions = r.num_preemptions
            view._num_cached_tokens = r.num_cached
            return view

    def __len__(self) -> int:
        with self._locked():
            self._usable()
            return len(self._reqs)

    def __contains__(self, request_id: object) -> bool:
        try:
            rid: RequestId | None = as_request_id("request_id", request_id)
        except (TypeError, ValueError, OverflowError):
            rid = None
        with self._locked():
            self._usable()
            return rid in self._reqs

    def __repr__(self) -> str:
        with self._locked():
            self._usable()
            return (
                f"ServingScheduler(config={self._config!r}, running={len(self._running)},"
                f" waiting={self._num_waiting}, free_blocks={self._pool.num_free},"
                f" next_step_index={self._step})"
            )

    # -- state, pickling, copies ---------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        """The whole scheduler as plain Python values (see ``docs/serving-contract.md``);
        refused while a batch awaits :meth:`update`."""
        with self._locked():
            self._usable()
            if self._pending is not None:
                raise RuntimeError(
                    message("state_batch_pending", step_index=self._pending._step_index)
                )
            pool = self._pool
            return {
                "version": 1,
                "kind": "serving",
                "config": self._config.to_dict(),
                "step_index": self._step,
                "num_preemptions": self._num_preemptions,
                "num_cached_tokens": self._num_cached,
                "requests": [
                    {
                        "request_id": r.rid,
                        "priority": r.priority,
                        "cache_salt": r.cache_salt,
                        "max_new_tokens": r.max_new,
                        "prompt_len": r.prompt_len,
                        "tokens": _serving_state.listed(
                            f"requests[{at}].tokens", r.num_tokens, r.tokens
                        ),
                        "num_computed": r.num_computed,
                        "state": "running" if r.running else "waiting",
                        "block_table": list(r.table),
                        "num_preemptions": r.num_preemptions,
                        "num_cached_tokens": r.num_cached,
                    }
                    for at, r in enumerate(self._reqs.values())
                ],
                "free_queue": _serving_state.listed("free_queue", pool.num_free, pool.free_queue),
                "block_hashes": [[b, h.hex()] for b, h in enumerate(pool.hash) if h is not None],
            }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> ServingScheduler:
        """Rebuild a scheduler from :meth:`to_state`'s form (of either backend), checking
        every value and every rule; seqs are renumbered in list order."""
        parsed = _serving_state.parse(state, ServingConfig)
        self = cls(parsed.config)
        cfg = parsed.config
        bs = cfg._block_size
        for seq, p in enumerate(parsed.requests):
            r = _object_new(_Req)
            r.rid, r.seq, r.priority, r.cache_salt = p.request_id, seq, p.priority, p.cache_salt
            r.max_new, r.prompt_len = p.max_new_tokens, p.prompt_len
            prompt = p.tokens[: p.prompt_len]
            r.prompt = None if all(t is None for t in prompt) else prompt
            r.out = p.tokens[p.prompt_len :]
            r.num_tokens = len(p.tokens)
            r.known = next((j for j, t in enumerate(p.tokens) if t is None), r.num_tokens)
            r.num_computed = p.num_computed
            r.table = list(p.block_table)
            r.hashes = []
            r.num_preemptions, r.num_cached = p.num_preemptions, p.num_cached_tokens
            r.running = p.running
            self._reqs[r.rid] = r
            if r.running:
                self._running.append((r.priority, seq, r.rid))
                self._deficit += _cdiv(r.num_tokens, bs) - len(r.table)
            else:
                self._heap.append((r.priority, seq, r.rid))
                self._num_waiting += 1
        self._running.sort()
        heapify(self._heap)
        self._seq = len(parsed.requests)
        self._pool = BlockPool.restore(parsed.ref, parsed.free_queue, parsed.hashes)
        self._step, self._num_preemptions, self._num_cached = parsed.counters
        return self

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any]]]:
        return (ServingScheduler.from_state, (self.to_state(),))

    def _clone(self) -> ServingScheduler:
        """A structural copy (a pending batch stays pending in the copy)."""
        with self._locked():
            self._usable()
            other = ServingScheduler(self._config)
            other._reqs = {rid: r.copy() for rid, r in self._reqs.items()}
            other._running = self._running.copy()
            other._heap = self._heap.copy()
            other._num_waiting = self._num_waiting
            other._pool = self._pool.copy()
            other._deficit = self._deficit
            other._seq, other._step = self._seq, self._step
            other._num_preemptions, other._num_cached = self._num_preemptions, self._num_cached
            other._pending = self._pending
            other._pending_ids = set(self._pending_ids)
            other._aborted = set(self._aborted)
            return other

    def __copy__(self) -> ServingScheduler:
        return self._clone()

    def __deepcopy__(self, memo: Any) -> ServingScheduler:
        return self._clone()


# The code of every call that takes the scheduler's lock: a frame running one of them on
# this scheduler is a call in progress (`ServingScheduler._call_in_progress`).
_LOCKED_CODES = frozenset(
    code
    for f in vars(ServingScheduler).values()
    if (code := getattr(getattr(f, "fget", f), "__code__", None)) and "_locked" in code.co_names
)
make_final(ServingScheduler)
