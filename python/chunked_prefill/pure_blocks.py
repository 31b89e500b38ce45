"""The KV block pool of the pure serving scheduler: ref counts, prefix hashes, free queue.

It knows nothing of requests: a request's block table is a list of block ids that the
scheduler hands to :meth:`BlockPool.allocate` and :meth:`BlockPool.free`. The free queue is
a doubly linked list threaded through two lists of block ids (``prev``/``next``, ``-1`` for
none), as vLLM v1's ``FreeKVCacheBlockQueue`` threads it through its blocks, so that a cache
hit takes a block out of the middle of the queue in O(1).

Blocks are touched lazily, as in the Rust pool: ids from ``fresh`` up have never been
allocated, are free and unhashed, and sit together in the queue between the blocks freed to
its head (the ``front`` list) and those freed to its tail (the ``back`` list). A pool of any
size thus costs memory only for the blocks that were ever used.
"""

from __future__ import annotations

import struct
import sys
from hashlib import blake2b

__all__ = ["BlockPool", "block_packer", "chain_hash", "root_hash"]

_NONE = -1


def root_hash(cache_salt: int) -> bytes:
    """The hash every request's chain starts from: blake2b-128 of the salt as 8 LE bytes."""
    return blake2b(cache_salt.to_bytes(8, "little"), digest_size=16).digest()


def block_packer(block_size: int) -> struct.Struct:
    """The packer of one full block's ids, ``struct.Struct(f"<{block_size}I")``.

    ``struct`` refuses a format of more than ``sys.maxsize`` bytes, but any ``block_size``
    up to ``2**64 - 1`` is valid (the Rust core accepts it, its sums are 128-bit). A block
    of more ids than a list can hold (``sys.maxsize // 8``) can never be full of known ids,
    so its packer is never called: an empty one stands in for it.
    """
    if block_size > sys.maxsize // 8:
        return struct.Struct("<0I")
    return struct.Struct(f"<{block_size}I")


def chain_hash(parent: bytes, packer: struct.Struct, tokens: list[int]) -> bytes:
    """The hash of one full block: blake2b-128 of the parent hash and its token ids, each a
    little-endian uint32 (``packer`` is ``struct.Struct(f"<{block_size}I")``)."""
    return blake2b(parent + packer.pack(*tokens), digest_size=16).digest()


class _List:
    """One doubly linked list of free blocks: its head, tail and length."""

    __slots__ = ("head", "len", "tail")

    def __init__(self, head: int = _NONE, tail: int = _NONE, length: int = 0) -> None:
        self.head, self.tail, self.len = head, tail, length

    def copy(self) -> _List:
        return _List(self.head, self.tail, self.len)


class BlockPool:
    """``num_blocks`` blocks, each free (``ref[b] == 0``, in the free queue) or held.

    The lists ``ref``, ``hash``, ``prev``, ``next`` and ``in_back`` cover the touched blocks
    ``0..fresh-1``. Allocation takes from the head of the free queue: ``front``, then the
    untouched ids in order, then ``back``. Freed blocks with a hash go to the tail of
    ``back`` (least recently used first), those without one to the head of ``front``
    (reused first). A freed block keeps its hash, and stays findable through
    :attr:`by_hash`, until it is allocated again.
    """

    __slots__ = (
        "back",
        "by_hash",
        "fresh",
        "front",
        "hash",
        "in_back",
        "next",
        "num_blocks",
        "prev",
        "ref",
    )
    num_blocks: int
    ref: list[int]
    hash: list[bytes | None]
    prev: list[int]
    next: list[int]
    # Which list holds a free block: back (True) or front (False).
    in_back: list[bool]
    front: _List
    back: _List
    fresh: int
    # hash -> the one block registered under it (held or free).
    by_hash: dict[bytes, int]

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.ref = []
        self.hash = []
        self.prev = []
        self.next = []
        self.in_back = []
        self.front = _List()
        self.back = _List()
        self.fresh = 0
        self.by_hash = {}

    @property
    def num_free(self) -> int:
        """Blocks in the free queue."""
        return self.front.len + (self.num_blocks - self.fresh) + self.back.len

    def copy(self) -> BlockPool:
        """A structural copy."""
        other = BlockPool.__new__(BlockPool)
        other.num_blocks, other.fresh = self.num_blocks, self.fresh
        other.ref = self.ref.copy()
        other.hash = self.hash.copy()
        other.prev = self.prev.copy()
        other.next = self.next.copy()
        other.in_back = self.in_back.copy()
        other.front, other.back = self.front.copy(), self.back.copy()
        other.by_hash = self.by_hash.copy()
        return other

    def _unlink(self, b: int) -> None:
        lst = self.back if self.in_back[b] else self.front
        p, n = self.prev[b], self.next[b]
        if p == _NONE:
            lst.head = n
        else:
            self.next[p] = n
        if n == _NONE:
            lst.tail = p
        else:
            self.prev[n] = p
        lst.len -= 1

    def _push_head(self, b: int) -> None:
        front = self.front
        h = front.head
        self.prev[b] = _NONE
        self.next[b] = h
        self.in_back[b] = False
        if h == _NONE:
            front.tail = b
        else:
            self.prev[h] = b
        front.head = b
        front.len += 1

    def _push_tail(self, b: int) -> None:
        back = self.back
        t = back.tail
        self.next[b] = _NONE
        self.prev[b] = t
        self.in_back[b] = True
        if t == _NONE:
            back.head = b
        else:
            self.next[t] = b
        back.tail = b
        back.len += 1

    def _touch(self) -> int:
        """The first untouched block, now touched (and out of the queue)."""
        b = self.fresh
        self.fresh += 1
        self.ref.append(0)
        self.hash.append(None)
        self.prev.append(_NONE)
        self.next.append(_NONE)
        self.in_back.append(False)
        return b

    def _take_head(self) -> int:
        if self.front.len:
            b = self.front.head
        elif self.fresh < self.num_blocks:
            return self._touch()
        else:
            b = self.back.head
        self._unlink(b)
        return b

    def allocate(self, count: int, table: list[int]) -> list[int]:
        """Take ``count`` blocks from the head (the caller made sure they are free), drop
        their old hashes, append them to ``table`` and return them."""
        new = []
        for _ in range(count):
            b = self._take_head()
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

    def _walk(self, b: int) -> list[int]:
        out = []
        nxt = self.next
        while b != _NONE:
            out.append(b)
            b = nxt[b]
        return out

    def free_queue(self) -> list[int]:
        """The free queue, head first."""
        untouched = list(range(self.fresh, self.num_blocks))
        return self._walk(self.front.head) + untouched + self._walk(self.back.head)

    @classmethod
    def restore(cls, ref: list[int], free_queue: list[int], hashes: dict[int, bytes]) -> BlockPool:
        """A pool with these ref counts, this free queue (head first) and these hashes; the
        caller has checked that they agree (free exactly when ``ref == 0``). Every block is
        touched; the queue is the ``back`` list, in order."""
        n = len(ref)
        pool = cls(n)
        pool.fresh = n
        pool.ref = ref
        pool.hash = [None] * n
        pool.prev = [_NONE] * n
        pool.next = [_NONE] * n
        pool.in_back = [False] * n
        for b in free_queue:
            pool._push_tail(b)
        for b, h in hashes.items():
            pool.hash[b] = h
            pool.by_hash[h] = b
        return pool
