"""The token ids the serving simulation gives prefix caching, as ``rust/core/src/sim/workload.rs``.

A request's ids are a pure function of its position, made when it arrives: positions below
``prefix_tokens`` come from its group's stream, positions its trace block hashes cover from
those hashes (``hash_block`` tokens each), the rest from its session's stream. The tokens
it samples are its stream's next ids, so a later turn of its session finds them cached.
"""

from __future__ import annotations

import operator
from collections import Counter

from .types import Workload

__all__ = ["TokenPlan", "token_id"]

_M64 = 2**64 - 1
_M32 = 2**32 - 1
_GROUP, _SESSION, _HASH = 1, 2, 3
NO_GROUP = _M64


def _mix(x: int) -> int:
    """splitmix64's finaliser."""
    z = (x + 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def token_id(kind: int, key: int, pos: int) -> int:
    """The id at ``pos`` of the stream ``(kind, key)``: ``a + pos * b`` modulo 2**32, ``a``
    the low 32 bits of the stream's mix and ``b`` its high 32 with the lowest bit set (see
    ``id_at`` in ``rust/core/src/sim/workload.rs`` for why that suffices)."""
    stream = _mix(_mix(kind) ^ key)
    return ((stream & _M32) + pos * ((stream >> 32) | 1)) & _M32


class TokenPlan:
    """Where each request's token ids come from, as plain columns (see the module docs).

    Trace hashes: block ``k`` of ``hash_block`` prompt tokens comes from ``hash_ids[k]``,
    so requests with equal hashes share those blocks and distinct hashes share nothing.
    """

    def __init__(self, workload: Workload) -> None:
        n = len(workload)
        self.prefix_tokens = workload.prefix_tokens
        self.hash_block = workload.hash_block
        self.group = [NO_GROUP if g < 0 else g for g in workload.group]
        self.session = list(workload.session)
        self.hash_offsets: list[int] = []
        self.hash_ids: list[int] = []
        if any(workload.hash_ids):
            self.hash_offsets.append(0)
            for ids in workload.hash_ids:
                self.hash_ids.extend(ids)
                self.hash_offsets.append(len(self.hash_ids))
        self.known: list[bool] = []
        if workload.shares_tokens:
            self.known = self._known(n)

    def _known(self, n: int) -> list[bool]:
        """Whether each request shares a token with another: it is in a group (with a
        prefix), has trace hashes, or its session has another turn. Column by column, as
        most workloads have one of the three (a third of the time of the request loop)."""
        reasons: list[list[bool]] = []
        if self.prefix_tokens > 0 and self.group:
            reasons.append(list(map(NO_GROUP.__ne__, self.group)))
        if self.hash_offsets:
            offsets = self.hash_offsets
            reasons.append(list(map(operator.lt, offsets[:-1], offsets[1:])))
        if self.session:
            turns = Counter(self.session)
            reasons.append([turns[s] > 1 for s in self.session])
        if not reasons:
            return [False] * n
        if len(reasons) == 1:
            return reasons[0]
        return list(map(any, zip(*reasons)))

    def token(self, i: int, pos: int, prompt_len: int) -> int:
        """Request ``i``'s id at position ``pos``, its prompt being ``prompt_len`` tokens
        (trace hashes cover the prompt only)."""
        if pos < self.prefix_tokens and self.group and self.group[i] != NO_GROUP:
            return token_id(_GROUP, self.group[i], pos)
        if self.hash_offsets and self.hash_block and pos < prompt_len:
            start, end = self.hash_offsets[i], self.hash_offsets[i + 1]
            block = pos // self.hash_block
            if block < end - start:
                return token_id(_HASH, self.hash_ids[start + block], pos % self.hash_block)
        session = self.session[i] if self.session else i
        return token_id(_SESSION, session, pos)

    def prompt(self, i: int, length: int) -> list[int]:
        """Request ``i``'s first ``length`` ids."""
        return [self.token(i, p, length) for p in range(length)]
