"""The planner's value types of the pure-Python twin: ``Config``, ``Chunk``, ``Step`` and
``PrefillChunkState``, with the helpers the twin's ``Scheduler`` uses on them.

They are re-exported by :mod:`chunked_prefill.pure`, which is their public home: their
``__module__`` says so, so that pickles and reprs name ``chunked_prefill.pure`` as before.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterable
from types import FrameType
from typing import Any

from ._validate import (
    U64_MAX,
    as_bool,
    as_i64,
    as_optional_u64,
    as_u64,
    as_u128,
    iterate,
    make_final,
    message,
    type_error,
)

_object_new = object.__new__
_CONFIG_FIELDS = (
    "chunk_size",
    "max_decode_tokens",
    "interleave_decode",
    "token_budget",
    "max_prefills_per_step",
)


class Config:
    """How the scheduler splits prompts and fills each step.

    ``chunk_size``: the most prompt tokens one request receives in one step.
    ``max_decode_tokens``: the most decode tokens one step runs.
    ``interleave_decode``: whether steps carry decode tokens at all.
    ``token_budget``: the most tokens (decode + prefill) one step carries; ``None`` keeps
    the original rule (one chunk per step, decodes counted beside it).
    ``max_prefills_per_step``: how many requests may receive a chunk in one step.
    """

    __slots__ = (
        "_chunk_size",
        "_interleave_decode",
        "_max_decode_tokens",
        "_max_prefills_per_step",
        "_token_budget",
    )
    _chunk_size: int
    _max_decode_tokens: int
    _interleave_decode: bool
    _token_budget: int | None
    _max_prefills_per_step: int

    def __new__(
        cls,
        *,
        chunk_size: int = 512,
        max_decode_tokens: int = 128,
        interleave_decode: bool = True,
        token_budget: int | None = None,
        max_prefills_per_step: int = 1,
    ) -> Config:
        chunk = as_u64("chunk_size", chunk_size)
        max_decode = as_u64("max_decode_tokens", max_decode_tokens)
        interleave = as_bool("interleave_decode", interleave_decode)
        budget = as_optional_u64("token_budget", token_budget)
        max_prefills = as_u64("max_prefills_per_step", max_prefills_per_step)
        if chunk == 0:
            raise ValueError(message("chunk_size_zero", value=chunk))
        if budget is not None:
            if budget == 0:
                raise ValueError(message("token_budget_zero", value=budget))
            if interleave and budget <= max_decode:
                raise ValueError(
                    message(
                        "token_budget_too_small", max_decode_tokens=max_decode, token_budget=budget
                    )
                )
        if max_prefills == 0:
            raise ValueError(message("max_prefills_zero", value=max_prefills))
        if max_prefills > 1 and budget is None:
            raise ValueError(message("max_prefills_needs_budget", value=max_prefills))
        self = object.__new__(cls)
        self._chunk_size = chunk
        self._max_decode_tokens = max_decode
        self._interleave_decode = interleave
        self._token_budget = budget
        self._max_prefills_per_step = max_prefills
        return self

    @property
    def chunk_size(self) -> int:
        """The most prompt tokens one request receives in one step."""
        return self._chunk_size

    @property
    def max_decode_tokens(self) -> int:
        """The most decode tokens one step runs."""
        return self._max_decode_tokens

    @property
    def interleave_decode(self) -> bool:
        """Whether steps carry decode tokens; when false every step has 0."""
        return self._interleave_decode

    @property
    def token_budget(self) -> int | None:
        """The most tokens one step carries, or ``None`` for the original one-chunk rule."""
        return self._token_budget

    @property
    def max_prefills_per_step(self) -> int:
        """How many requests may receive a prefill chunk in one step."""
        return self._max_prefills_per_step

    def replace(self, **changes: Any) -> Config:
        """A copy with ``changes`` applied, validated like the constructor."""
        for name in changes:
            if name not in _CONFIG_FIELDS:
                raise TypeError(message("unexpected_keyword", owner="Config.replace", name=name))
        fields = self.to_dict()
        fields.update(changes)
        return Config(**fields)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict of plain values (the constructor's keywords)."""
        return {
            "chunk_size": self._chunk_size,
            "max_decode_tokens": self._max_decode_tokens,
            "interleave_decode": self._interleave_decode,
            "token_budget": self._token_budget,
            "max_prefills_per_step": self._max_prefills_per_step,
        }

    def _key(self) -> tuple[int, int, bool, int | None, int]:
        return (
            self._chunk_size,
            self._max_decode_tokens,
            self._interleave_decode,
            self._token_budget,
            self._max_prefills_per_step,
        )

    def __reduce__(self) -> Any:
        return (_config_from_dict, (self.to_dict(),))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Config):
            return NotImplemented
        return self._key() == other._key()

    def __ne__(self, other: object) -> bool:
        if not isinstance(other, Config):
            return NotImplemented
        return self._key() != other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"Config(chunk_size={self._chunk_size}, max_decode_tokens={self._max_decode_tokens},"
            f" interleave_decode={self._interleave_decode}, token_budget={self._token_budget},"
            f" max_prefills_per_step={self._max_prefills_per_step})"
        )


def _config_from_dict(fields: dict[str, Any]) -> Config:
    return Config(**fields)


class Chunk:
    """One request's share of a step: prompt tokens ``[start, start + tokens)``.

    ``is_last`` is true when the chunk finishes the prompt: the engine samples the
    request's first output token from this chunk's last position.
    """

    __slots__ = ("_is_last", "_request_id", "_start", "_tokens")
    _request_id: int
    _start: int
    _tokens: int
    _is_last: bool

    def __new__(cls, request_id: int, start: int, tokens: int, is_last: bool) -> Chunk:
        return _new_chunk(
            as_u64("request_id", request_id),
            as_u64("start", start),
            as_u64("tokens", tokens),
            as_bool("is_last", is_last),
        )

    @property
    def request_id(self) -> int:
        """The request whose prompt this chunk belongs to."""
        return self._request_id

    @property
    def start(self) -> int:
        """Position in the prompt of the chunk's first token."""
        return self._start

    @property
    def tokens(self) -> int:
        """How many prompt tokens the chunk holds."""
        return self._tokens

    @property
    def is_last(self) -> bool:
        """Whether this chunk completes the request's prompt."""
        return self._is_last

    def _key(self) -> tuple[int, int, int, bool]:
        return (self._request_id, self._start, self._tokens, self._is_last)

    def __reduce__(self) -> Any:
        return (Chunk, self._key())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Chunk):
            return NotImplemented
        return self._key() == other._key()

    def __ne__(self, other: object) -> bool:
        if not isinstance(other, Chunk):
            return NotImplemented
        return self._key() != other._key()

    def __lt__(self, other: Chunk) -> bool:
        if not isinstance(other, Chunk):
            return NotImplemented
        return self._key() < other._key()

    def __le__(self, other: Chunk) -> bool:
        if not isinstance(other, Chunk):
            return NotImplemented
        return self._key() <= other._key()

    def __gt__(self, other: Chunk) -> bool:
        if not isinstance(other, Chunk):
            return NotImplemented
        return self._key() > other._key()

    def __ge__(self, other: Chunk) -> bool:
        if not isinstance(other, Chunk):
            return NotImplemented
        return self._key() >= other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"Chunk(request_id={self._request_id}, start={self._start},"
            f" tokens={self._tokens}, is_last={self._is_last})"
        )


def _new_chunk(request_id: int, start: int, tokens: int, is_last: bool) -> Chunk:
    chunk = _object_new(Chunk)
    chunk._request_id = request_id
    chunk._start = start
    chunk._tokens = tokens
    chunk._is_last = is_last
    return chunk


class Step:
    """The plan of one engine step: prefill chunks plus a count of decode tokens.

    The engine runs every chunk in ``chunks`` (in order) and ``decode_tokens`` decode
    tokens, one for each of that many decoding requests. ``prefill_request_id``,
    ``prefill_start`` and ``is_last_chunk`` describe the first chunk, as the original did.

    ``chunks`` may be any iterable of ``Chunk``; it is drawn once, item by item, and the first
    item that is not a ``Chunk`` is refused before the next is drawn.
    """

    __slots__ = ("_chunks", "_decode_tokens", "_prefill_tokens", "_step_index")
    _step_index: int
    _decode_tokens: int
    _chunks: tuple[Chunk, ...]
    _prefill_tokens: int

    def __new__(cls, *, step_index: int, decode_tokens: int, chunks: Iterable[Chunk] = ()) -> Step:
        index = as_u128("step_index", step_index)
        decode = as_u64("decode_tokens", decode_tokens)
        # Item by item, as the binding does: the first item that is not a Chunk is refused
        # before the next is drawn, so an endless iterator of anything else fails at once.
        items = []
        for chunk in iterate("chunks", "Chunk values", chunks):
            if not isinstance(chunk, Chunk):
                raise type_error("not_chunk", "chunks", chunk)
            items.append(chunk)
        total = sum(c._tokens for c in items)
        if total > U64_MAX:
            raise OverflowError(message("above_u64", name="prefill_tokens", value=total))
        return _new_step(index, decode, tuple(items), total)

    @property
    def step_index(self) -> int:
        """Zero-based count of ``next_step`` calls before this one."""
        return self._step_index

    @property
    def decode_tokens(self) -> int:
        """How many decode tokens (one per decoding request) the step runs."""
        return self._decode_tokens

    @property
    def chunks(self) -> tuple[Chunk, ...]:
        """Every prefill chunk of the step, in scheduling order."""
        return self._chunks

    @property
    def prefill_tokens(self) -> int:
        """Total prompt tokens of the step (the sum over ``chunks``)."""
        return self._prefill_tokens

    @property
    def prefill_request_id(self) -> int | None:
        """The first chunk's request, or ``None`` for a pure decode step."""
        return self._chunks[0]._request_id if self._chunks else None

    @property
    def prefill_start(self) -> int:
        """Prompt position where the first chunk starts (0 without a chunk)."""
        return self._chunks[0]._start if self._chunks else 0

    @property
    def is_last_chunk(self) -> bool:
        """Whether the first chunk completes its prompt (``False`` without a chunk)."""
        return self._chunks[0]._is_last if self._chunks else False

    def _key(self) -> tuple[int, int, tuple[Chunk, ...]]:
        return (self._step_index, self._decode_tokens, self._chunks)

    def __reduce__(self) -> Any:
        kwargs = {
            "step_index": self._step_index,
            "decode_tokens": self._decode_tokens,
            "chunks": self._chunks,
        }
        return (_step_from_kwargs, (kwargs,))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Step):
            return NotImplemented
        return self._key() == other._key()

    def __ne__(self, other: object) -> bool:
        if not isinstance(other, Step):
            return NotImplemented
        return self._key() != other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        chunks = ", ".join(repr(c) for c in self._chunks)
        if len(self._chunks) == 1:
            chunks += ","
        return (
            f"Step(step_index={self._step_index}, decode_tokens={self._decode_tokens},"
            f" prefill_tokens={self._prefill_tokens}, chunks=({chunks}))"
        )


def _step_from_kwargs(kwargs: dict[str, Any]) -> Step:
    return Step(**kwargs)


def _new_step(step_index: int, decode_tokens: int, chunks: tuple[Chunk, ...], total: int) -> Step:
    step = _object_new(Step)
    step._step_index = step_index
    step._decode_tokens = decode_tokens
    step._chunks = chunks
    step._prefill_tokens = total
    return step


# `PrefillChunkState.advance` is a read-modify-write: one lock for all states makes it atomic
# (the section is a few integer operations, so sharing it costs nothing). A same-thread
# re-entry (a signal handler or finalizer calling advance() of the state whose update is
# running) is recognised from the stack, not from a mark: an exception from a signal handler
# can land anywhere, and a mark it left set would refuse every later call.
_ADVANCE_LOCK = threading.RLock()


def _advance_lock() -> threading.RLock:
    """The lock, for a ``with`` statement. It is written in C, so no Python code runs between
    taking it and entering the block, nor (CPython 3.10 and later) between leaving the block
    and releasing it. Held already by this thread with no advance() inside its block on the
    stack, it was left by an interrupt that landed in the one instruction CPython 3.9 runs
    between a ``with`` block and its release: let go, or every other thread would wait."""
    lock = _ADVANCE_LOCK
    if lock._is_owned() and not _in_advance(sys._getframe(2), None):  # type: ignore[attr-defined]
        while lock._is_owned():  # type: ignore[attr-defined]
            lock.release()
    return lock


def _in_advance(frame: FrameType | None, state: object) -> bool:
    """Whether an advance() runs at ``frame`` or below it: of ``state`` and inside its
    update, or (``state`` None) of any state at any point (it may hold the lock)."""
    while frame is not None:
        if frame.f_code is _ADVANCE_CODE:
            if state is None:
                return True
            local = frame.f_locals
            if local.get("inside") and local.get("self") is state:
                return True
        frame = frame.f_back
    return False


def _prefill_start(total_tokens: int, cached_tokens: int) -> int:
    """Where prefill starts: after the cached prefix, but the last token is always computed."""
    return total_tokens - 1 if cached_tokens >= total_tokens else cached_tokens


class PrefillChunkState:
    """One request's progress through prefill.

    ``processed_tokens`` is the position in the prompt up to which the KV cache is filled:
    it starts at ``cached_tokens`` (or ``total_tokens - 1`` when the whole prompt is cached,
    since the last token's logits are still needed) and reaches ``total_tokens``.

    ``advance`` is atomic: calls from several threads never lose an update.
    """

    __slots__ = ("_cached", "_priority", "_processed", "_request_id", "_total")
    _request_id: int
    _total: int
    _processed: int
    _cached: int
    _priority: int

    def __new__(
        cls,
        request_id: int,
        total_tokens: int,
        *,
        cached_tokens: int = 0,
        priority: int = 0,
        processed_tokens: int | None = None,
    ) -> PrefillChunkState:
        rid = as_u64("request_id", request_id)
        total = as_u64("total_tokens", total_tokens)
        cached = as_u64("cached_tokens", cached_tokens)
        prio = as_i64("priority", priority)
        processed = as_optional_u64("processed_tokens", processed_tokens)
        _check_prompt(total, cached)
        start = _prefill_start(total, cached)
        if processed is None:
            processed = start
        elif not start <= processed <= total:
            raise ValueError(
                message(
                    "processed_out_of_range",
                    start=start,
                    total_tokens=total,
                    processed_tokens=processed,
                )
            )
        self = object.__new__(cls)
        self._request_id = rid
        self._total = total
        self._processed = processed
        self._cached = cached
        self._priority = prio
        return self

    @property
    def request_id(self) -> int:
        """The caller's id of the request."""
        return self._request_id

    @property
    def total_tokens(self) -> int:
        """Prompt length in tokens."""
        return self._total

    @property
    def processed_tokens(self) -> int:
        """Prompt position up to which prefill is done (cached prefix included)."""
        return self._processed

    @property
    def is_complete(self) -> bool:
        """Whether the whole prompt is prefilled."""
        return self._processed >= self._total

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens the engine's prefix cache already held at enqueue."""
        return self._cached

    @property
    def priority(self) -> int:
        """Scheduling priority: lower values start first."""
        return self._priority

    def advance(self, n: int) -> None:
        """Advance by ``n`` tokens, clamped to ``total_tokens``, atomically.

        ``n`` is converted first (its ``__index__`` may run any code, even code that uses
        this state), then the update runs under a lock, so concurrent calls never lose an
        update. A finalizer or signal handler that calls ``advance`` on this same state while
        the update is running (on the same thread) is refused with ``RuntimeError``, leaving
        the state unchanged; the Rust backend runs no Python code during its update, so there
        such a call simply runs before or after it.
        """
        step = as_u64("n", n)
        with _advance_lock():
            if _in_advance(sys._getframe(1), self):
                raise RuntimeError(message("state_reentered"))
            inside = True  # read by _in_advance(): this frame is inside its update
            self._processed = min(self._processed + step, self._total)
            del inside

    def remaining(self) -> int:
        """Prompt tokens still to prefill."""
        return self._total - self._processed

    def progress(self) -> float:
        """``processed_tokens / total_tokens`` as a float in ``0.0..=1.0``.

        Both counts are converted to ``float`` first, as the Rust core does, so the two
        backends agree bit for bit even past 2**53.
        """
        return float(self._processed) / float(self._total)

    def next_chunk_size(self, config: Config) -> int:
        """Size of the next chunk under ``config``: ``min(remaining(), chunk_size)``."""
        if not isinstance(config, Config):
            raise type_error("not_config", "config", config)
        return min(self._total - self._processed, config._chunk_size)

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain values (the form of ``Scheduler.to_state()['requests']``)."""
        return {
            "request_id": self._request_id,
            "total_tokens": self._total,
            "processed_tokens": self._processed,
            "cached_tokens": self._cached,
            "priority": self._priority,
        }

    def _copy(self) -> PrefillChunkState:
        other = _object_new(PrefillChunkState)
        other._request_id = self._request_id
        other._total = self._total
        other._processed = self._processed
        other._cached = self._cached
        other._priority = self._priority
        return other

    def __reduce__(self) -> Any:
        return (_state_from_dict, (self.to_dict(),))

    def __copy__(self) -> PrefillChunkState:
        return self._copy()

    def __deepcopy__(self, memo: Any) -> PrefillChunkState:
        return self._copy()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PrefillChunkState):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    def __ne__(self, other: object) -> bool:
        if not isinstance(other, PrefillChunkState):
            return NotImplemented
        return self.to_dict() != other.to_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        processed = self._processed  # read once: another thread may advance meanwhile
        return (
            f"PrefillChunkState(request_id={self._request_id}, total_tokens={self._total},"
            f" processed_tokens={processed}, is_complete={processed >= self._total},"
            f" cached_tokens={self._cached}, priority={self._priority})"
        )


def _state_from_dict(fields: dict[str, Any]) -> PrefillChunkState:
    return PrefillChunkState(
        fields["request_id"],
        fields["total_tokens"],
        cached_tokens=fields["cached_tokens"],
        priority=fields["priority"],
        processed_tokens=fields["processed_tokens"],
    )


_ADVANCE_CODE = PrefillChunkState.advance.__code__


def _advance(state: PrefillChunkState, chunk_size: int, left: int) -> Chunk:
    """Give ``state`` its next chunk: ``min(remaining, chunk_size, left)`` tokens."""
    start = state._processed
    tokens = min(state._total - start, chunk_size, left)
    state._processed = start + tokens
    return _new_chunk(state._request_id, start, tokens, state._processed == state._total)


def _check_prompt(total: int, cached: int) -> None:
    if total == 0:
        raise ValueError(message("total_tokens_zero", value=total))
    if cached > total:
        raise ValueError(message("cached_exceeds_total", total_tokens=total, cached_tokens=cached))


# Their public home is chunked_prefill.pure (pickles and the docs name it).
for _cls in (Config, Chunk, Step, PrefillChunkState):
    _cls.__module__ = "chunked_prefill.pure"
make_final(Config, Chunk, Step, PrefillChunkState)
