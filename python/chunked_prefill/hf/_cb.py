"""A transformers continuous-batching scheduler that takes its decisions from this package.

Imported only after :func:`chunked_prefill.hf.check_transformers_version`: it subclasses
internals of transformers 5.x (``transformers.generation.continuous_batching.scheduler``).
"""

from __future__ import annotations

import contextlib
from types import ModuleType
from typing import Any

from transformers.generation.continuous_batching.cache import PagedAttentionCache
from transformers.generation.continuous_batching.requests import (
    FutureRequestState,
    RequestState,
    RequestStatus,
)
from transformers.generation.continuous_batching.scheduler import Scheduler

from ._backend import resolve_backend

__all__ = ["ChunkedPrefillCBScheduler", "configured"]

_DEFAULT_CHUNK_SIZE = 512
_DEFAULT_MAX_PREFILLS = 4


class ChunkedPrefillCBScheduler(Scheduler):
    """transformers ``Scheduler`` whose batches are planned by :class:`chunked_prefill.Scheduler`.

    Each ``schedule_batch(token_budget, cache_budget)`` asks this package's scheduler, in
    budgeted mode with ``token_budget`` as the step budget, for one step: decodes first
    (``decode_tokens`` of the decoding requests, oldest first), then prompt chunks of up to
    ``max_prefills_per_step`` requests, at most ``chunk_size`` tokens each, requests whose
    prefill has started first. transformers' own checks then apply to every planned item, as in
    its FIFO scheduler: the cache budget (KV entries read by a varlen batch), block allocation,
    the safety margin, ``block_new_requests`` and ``max_requests_per_batch``. A chunk those
    checks refuse (or that transformers shortens, e.g. to fork a request with children) is
    handed back to the planner at the position the KV cache really reached, ahead of requests
    that have not started, so it is planned again next batch.

    Class attributes set by :func:`chunked_prefill.hf.register`: ``chunk_size``,
    ``max_prefills_per_step`` (``None``: the defaults described there) and ``backend``.
    """

    chunk_size: int | None = None
    max_prefills_per_step: int | None = None
    backend: ModuleType | None = None

    def __init__(
        self,
        cache: PagedAttentionCache,
        safety_margin: float | None,
        max_requests_per_batch: int,
    ) -> None:
        """Same arguments as transformers' FIFO scheduler (default safety margin 0.15)."""
        if safety_margin is None:
            safety_margin = 0.15
        self._module = resolve_backend(self.backend)
        self._budget = 0
        super().__init__(cache, safety_margin, max_requests_per_batch)

    # -- bookkeeping ---------------------------------------------------------------------

    def reset(self) -> None:
        """Reset for a new generation loop: forget every request, start a fresh planner."""
        super().reset()
        # Planner id by transformers request id, for the requests with prompt work left.
        self._ids: dict[str, int] = {}
        # The request and its prompt length in positions (cached prefix included), by planner id.
        self._states: dict[int, tuple[RequestState, int]] = {}
        self._next_id = 0
        self._build_planner(self.cache.max_batch_tokens)

    def _build_planner(self, token_budget: int) -> None:
        if token_budget < 2:
            raise ValueError(
                f"the chunked_prefill scheduler needs max_batch_tokens >= 2, got {token_budget}"
            )
        mrpb = self.max_requests_per_batch
        prefills = self.max_prefills_per_step or _DEFAULT_MAX_PREFILLS
        if mrpb > 1:
            prefills = min(prefills, mrpb - 1)
        self._prefills = max(prefills, 1)
        chunk = self.chunk_size or _DEFAULT_CHUNK_SIZE
        if self.chunk_size is None:
            chunk = min(chunk, token_budget)
        config = self._module.Config(
            chunk_size=chunk,
            max_decode_tokens=min(mrpb, token_budget - 1),
            interleave_decode=True,
            token_budget=token_budget,
            max_prefills_per_step=self._prefills,
        )
        old = getattr(self, "_planner", None)
        self._planner = self._module.Scheduler(config)
        self._budget = token_budget
        if old is not None:
            # A new budget mid-run: carry every tracked request over at its real position.
            for pid, (state, total) in self._states.items():
                self._planner.enqueue(
                    pid, total, cached_tokens=state.position_offset, priority=self._module.I64_MIN
                )

    def _enqueue(self, state: RequestState, *, resumed: bool = False) -> None:
        """Give ``state``'s prompt work to the planner, from the position its cache reached."""
        rid = state.request_id
        pid = self._ids.get(rid)
        if pid is None:
            pid = self._next_id
            self._next_id += 1
            self._ids[rid] = pid
        done = state.position_offset
        total = done + len(state.remaining_prefill_tokens)
        self._states[pid] = (state, total)
        # Resumed requests (a refused chunk, a fork, offloaded ones) go ahead of new ones.
        priority = self._module.I64_MIN if resumed else 0
        self._planner.enqueue(pid, total, cached_tokens=done, priority=priority)

    def _forget(self, request_id: str) -> None:
        pid = self._ids.pop(request_id, None)
        if pid is not None:
            del self._states[pid]
            with contextlib.suppress(KeyError):  # completed and already drained
                self._planner.abort(pid)

    def _requeue(self, pid: int, done: int) -> None:
        """Hand request ``pid`` back to the planner with ``done`` prompt positions computed."""
        state, total = self._states[pid]
        self._planner.abort(pid)
        if done >= total:
            self._forget(state.request_id)
        else:
            self._planner.enqueue(pid, total, cached_tokens=done, priority=self._module.I64_MIN)

    def add_waiting_request(self, state: RequestState) -> None:
        """Queue a new (or offloaded, or unforked child) request and give it to the planner."""
        super().add_waiting_request(state)
        self._forget(state.request_id)
        # Offloaded and soft-reset requests were running: they resume ahead of new ones.
        resumed = state.is_cpu_offloaded or getattr(state, "_true_initial_tokens", 0) > 0
        self._enqueue(state, resumed=resumed)

    def finish_request(self, request_id: str) -> None:
        """Free the request's cache and drop it from the planner if it still had prompt left."""
        super().finish_request(request_id)
        self._forget(request_id)

    def clear_cancelled_requests(self) -> list[RequestState]:
        """Remove cancelled requests from the queues and from the planner."""
        cancelled: list[RequestState] = super().clear_cancelled_requests()
        for state in cancelled:
            self._forget(state.request_id)
        return cancelled

    # -- one batch -----------------------------------------------------------------------

    def schedule_batch(
        self, token_budget: int, cache_budget: int
    ) -> tuple[list[FutureRequestState] | None, bool, int, int]:
        """Plan one batch: decodes first, then the planner's prompt chunks.

        Returns what transformers' schedulers return: the scheduled requests (``None`` when
        nothing fits because the cache is full), whether the decode fast path applies, the
        number of query tokens and the most KV entries read.
        """
        if token_budget != self._budget:
            self._build_planner(token_budget)
        planner = self._planner

        decoding: list[RequestState] = []
        for state in self.active_requests.values():
            status = state.status
            if status == RequestStatus.DECODING:
                decoding.append(state)
            elif status == RequestStatus.PREFILLING and state.request_id not in self._ids:
                # A forked child arrives here directly, with its last prompt token left.
                self._enqueue(state, resumed=True)

        # The planner bounds decodes by token_budget; max_requests_per_batch bounds decodes
        # plus chunks, so while prompts wait, leave room for their chunks.
        mrpb = self.max_requests_per_batch
        room = mrpb - self._prefills if self._ids else mrpb
        step = planner.next_step(min(len(decoding), max(room, 0)))

        self.starved_requests = list[tuple[RequestState, int]]()
        removed: set[str] = set()
        batch = _Batch(self, token_budget, cache_budget, removed)
        for state in decoding[: step.decode_tokens]:
            batch.admit(state, state.tokens_to_process, len(state.tokens_to_process))
        for chunk in step.chunks:
            self._place_chunk(batch, chunk, removed)
        planner.drain_completed()

        if removed:
            self._cleanup_waiting_queue(removed)
        if not batch.scheduled and batch.one_allocation_failed:
            return None, batch.fast_path, 0, 0
        return (
            batch.scheduled,
            batch.fast_path,
            token_budget - batch.tokens_left,
            cache_budget - batch.cache_left,
        )

    def _place_chunk(self, batch: _Batch, chunk: Any, removed: set[str]) -> None:
        """Schedule one planned prompt chunk, or hand it back to the planner."""
        pid = chunk.request_id
        state = self._states[pid][0]
        if (
            batch.closed
            or (not batch.in_margin and batch.scheduled)
            or (self.block_new_requests and state.status == RequestStatus.PENDING)
        ):
            self._requeue(pid, state.position_offset)
            return
        # May find a prefix already in the cache, which moves position_offset forward.
        request_tokens = self._infer_request_tokens(state, removed)
        start = state.position_offset
        n = min(chunk.tokens, len(request_tokens))
        if not batch.admit(state, request_tokens, n):
            self._requeue(pid, state.position_offset)
            return
        done = start + len(state.tokens_to_process)
        if start != chunk.start or done != chunk.start + chunk.tokens:
            # A prefix-cache hit moved the start, or transformers shortened the chunk.
            self._requeue(pid, done)
        elif chunk.is_last:
            del self._ids[state.request_id]
            del self._states[pid]


class _Batch:
    """One batch being filled: transformers' FIFO checks and bookkeeping, item by item."""

    def __init__(
        self,
        owner: ChunkedPrefillCBScheduler,
        token_budget: int,
        cache_budget: int,
        removed: set[str],
    ) -> None:
        cache = owner.cache
        self.owner = owner
        self.cache = cache
        self.removed = removed
        self.scheduled: list[FutureRequestState] = []
        self.one_allocation_failed = False
        self.fast_path = cache.max_blocks_per_request > 0
        self.tokens_left = token_budget
        self.cache_left = cache_budget
        self.requests_left = owner.max_requests_per_batch
        self.in_margin = owner._try_to_meet_safety_margin()
        self.read_limit = cache.read_cache_limit
        self.fast_limit = cache.max_decode_fast_path_length
        self.closed = False  # no more room: FIFO's early exit

    def admit(self, state: RequestState, request_tokens: list[int], n: int) -> bool:
        """transformers' checks and bookkeeping for ``n`` tokens of ``state``."""
        if self.closed or n > self.tokens_left:
            return False
        if not self.in_margin and self.scheduled and state.status != RequestStatus.DECODING:
            return False
        read = state.current_len()
        if self.read_limit is not None:
            read = min(read, self.read_limit)
        eligible = n == 1 and state.position_offset < self.fast_limit
        if not (self.fast_path and eligible) and self.cache_left < read:
            return False
        owner = self.owner
        if not self.cache.can_store_request_tokens(state, n):
            self.one_allocation_failed = True
            if state.request_id in owner.active_requests:
                owner.starved_requests.append((state, n))
            return False
        owner._schedule_request(state, request_tokens, n, self.removed)
        self._record(state, read)
        return True

    def _record(self, state: RequestState, read: int) -> None:
        n = len(state.tokens_to_process)
        self.fast_path &= n == 1 and state.position_offset < self.fast_limit
        self.tokens_left -= n
        self.cache_left -= read
        self.requests_left -= 1
        blocks = self.cache.count_new_complete_blocks(state, n)
        self.scheduled.append(
            FutureRequestState(state, not state.remaining_prefill_tokens, blocks, n)
        )
        if self.owner.waiting_requests.pop(state.request_id, None) is not None:
            self.removed.add(state.request_id)
        if (
            self.tokens_left == 0
            or (self.cache_left <= 0 and not self.fast_path)
            or self.requests_left <= 0
        ):
            self.closed = True


def configured(
    *,
    chunk_size: int | None,
    max_prefills_per_step: int | None,
    backend: ModuleType | None,
) -> type[ChunkedPrefillCBScheduler]:
    """A subclass of :class:`ChunkedPrefillCBScheduler` with these policy options."""
    attrs: dict[str, Any] = {
        "chunk_size": chunk_size,
        "max_prefills_per_step": max_prefills_per_step,
        "backend": backend,
        "__doc__": ChunkedPrefillCBScheduler.__doc__,
        "__module__": __name__,
    }
    return type("ChunkedPrefillCBScheduler", (ChunkedPrefillCBScheduler,), attrs)
