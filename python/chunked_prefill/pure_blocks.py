"""The KV block pool of the pure serving scheduler: ref counts, prefix hashes, free queue.

It knows nothing of requests: a request's block table is a list of block ids that the
scheduler hands to :meth:`BlockPool.allocate` and :meth:`BlockPool.free`. The free queue is
a doubly linked list threaded through two lists of block ids (``prev``/``next``, ``-1`` for
none), as vLLM v1's ``FreeKVCacheBlockQueue`` threads it through its blocks, so that a cache
hit takes a block out of the middle of the queue in O(1).
"""

from __future__ import annotations

import struct
from hashlib import blake2b

__all__ = ["BlockPool", "chain_hash", "root_hash"]

_NONE = -1


def root_hash(cache_salt: int) -> bytes:
    """The hash every request's chain starts from: blake2b-128 of the salt as 8 LE bytes."""
    return blake2b(cache_salt.to_bytes(8, "little"), digest_size=16).digest()


def chain_hash(parent: bytes, packer: struct.Struct, tokens: list[int]) -> bytes:
    """The hash of one full block: blake2b-128 of the parent hash and its token ids, each a
    little-endian uint32 (``packer`` is ``struct.Struct(f"<{block_size}I")``)."""
    return blake2b(parent + packer.pack(*tokens), digest_size=16).digest()


class BlockPool:
    """``num_blocks`` blocks, each free (``ref[b] == 0``, in the free queue) or held.

    Allocation takes from the head of the free queue. Freed blocks with a hash go to the
    tail (least recently used first), those without one to the head (reused first). A freed
    block keeps its hash, and stays findable through :attr:`by_hash`, until it is allocated
    again.
    """

    __slots__ = ("by_hash", "hash", "head", "next", "num_free", "prev", "ref", "tail")
    ref: list[int]
    hash: list[bytes | None]
    prev: list[int]
    next: list[int]
    head: int
    tail: int
    num_free: int
    # hash -> the one block registered under it (held or free).
    by_hash: dict[bytes, int]

    def __init__(self, num_blocks: int) -> None:
        self.ref = [0] * num_blocks
        self.hash = [None] * num_blocks
        self.prev = list(range(-1, num_blocks - 1))
        self.next = list(range(1, num_blocks + 1))
        if num_blocks:
            self.next[-1] = _NONE
        self.head = 0 if num_blocks else _NONE
        self.tail = num_blocks - 1
        self.num_free = num_blocks
        self.by_hash = {}

    def copy(self) -> BlockPool:
        """A structural copy."""
        other = BlockPool.__new__(BlockPool)
        other.ref = self.ref.copy()
        other.hash = self.hash.copy()
        other.prev = self.prev.copy()
        other.next = self.next.copy()
        other.head, other.tail, other.num_free = self.head, self.tail, self.num_free
        other.by_hash = self.by_hash.copy()
        return other

    def _unlink(self, b: int) -> None:
        p, n = self.prev[b], self.next[b]
        if p == _NONE:
            self.head = n
        else:
            self.next[p] = n
        if n == _NONE:
            self.tail = p
        else:
            self.prev[n] = p
        self.num_free -= 1

    def _push_head(self, b: int) -> None:
        h = self.head
        self.prev[b] = _NONE
        self.next[b] = h
        if h == _NONE:
            self.tail = b
        else:
            self.prev[h] = b
        self.head = b
        self.num_free += 1

    def _push_tail(self, b: int) -> None:
        t = self.tail
        self.next[b] = _NONE
        self.prev[b] = t
        if t == _NONE:
            self.head = b
        else:
            self.next[t] = b
        self.tail = b
        self.num_free += 1

    def allocate(self, count: int, table: list[int]) -> list[int]:
        """Take ``count`` blocks from the head (the caller made sure they are free), drop
        their old hashes, append them to ``table`` and return them."""
        new = []
        for _ in range(count):
            b = self.head
            self._unlink(b)
            h = self.hash[b]
            if h is not None:
                del self.by_hash[h]
                self.hash[b] = None
            self.ref[b] = 1
            new.append(b)
        table.extend(new)
        return new

    def take_hit(self, b: int) -> None:
        """Share the cached block ``b`` with one more request (out of the queue if free)."""
        if self.ref[b] == 0:
            self._unlink(b)
        self.ref[b] += 1

    def free(self, table: list[int]) -> None:
        """Release a request's blocks from its last to its first, then empty ``table``."""
        ref = self.ref
        for b in reversed(table):
            ref[b] -= 1
            if ref[b] == 0:
                if self.hash[b] is None:
                    self._push_head(b)
                else:
                    self._push_tail(b)
        table.clear()

    def register(self, b: int, h: bytes) -> None:
        """Give the held block ``b`` the hash ``h`` unless another block has it already."""
        if h not in self.by_hash:
            self.by_hash[h] = b
            self.hash[b] = h

    def free_queue(self) -> list[int]:
        """The free queue, head first."""
        out = []
        b = self.head
        nxt = self.next
        while b != _NONE:
            out.append(b)
            b = nxt[b]
        return out

    @classmethod
    def restore(cls, ref: list[int], free_queue: list[int], hashes: dict[int, bytes]) -> BlockPool:
        """A pool with these ref counts, this free queue (head first) and these hashes; the
        caller has checked that they agree (free exactly when ``ref == 0``)."""
        pool = cls(0)
        n = len(ref)
        pool.ref = ref
        pool.hash = [None] * n
        pool.prev = [_NONE] * n
        pool.next = [_NONE] * n
        for b in free_queue:
            pool._push_tail(b)
        for b, h in hashes.items():
            pool.hash[b] = h
            pool.by_hash[h] = b
        return pool
