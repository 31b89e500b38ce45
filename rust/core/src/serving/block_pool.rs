//! [`BlockPool`]: KV-cache blocks, their reference counts and hashes, and the free queue.
//!
//! It knows nothing of requests: callers hold block ids and hand them back.
//!
//! The free queue is an index-linked list (prev/next are block ids), so a cache hit takes a
//! block out of the middle in O(1). Blocks are touched lazily: ids from `fresh` up have never
//! been allocated, are free and unhashed, and sit together in the queue between the blocks
//! freed to its head (`front`) and those freed to its tail (`back`). A pool of any size thus
//! costs memory only for the blocks that were ever used.

use std::collections::HashMap;

use hashlink::DefaultHashBuilder;

use super::content_index::ContentIndex;
use super::hash::BlockHash;

const NIL: usize = usize::MAX;

/// Hash-map entries reserved at the first registration (at most one per block): a pool of up
/// to this many blocks never rehashes while its cache fills, which took a tenth of a step's
/// time while a cache warmed up, and a larger pool reserves about 2 MB per map, not its size.
pub(crate) const PRESIZED_BLOCKS: usize = 1 << 16;

/// One touched block.
#[derive(Debug, Clone)]
struct Block {
    ref_count: usize,
    /// Set only while the hash map points at this block.
    hash: Option<BlockHash>,
    prev: usize,
    next: usize,
    /// Which list holds it while free: `back` (true) or `front` (false).
    in_back: bool,
}

/// A doubly linked list threaded through `Block::prev/next`.
#[derive(Debug, Clone, Copy)]
struct List {
    head: usize,
    tail: usize,
    len: usize,
}

impl List {
    const EMPTY: Self = Self {
        head: NIL,
        tail: NIL,
        len: 0,
    };
}

/// The pool of `num_blocks` blocks.
#[derive(Debug, Clone)]
pub(crate) struct BlockPool {
    num_blocks: usize,
    blocks: Vec<Block>,
    /// Free blocks before the untouched ones, head first.
    front: List,
    /// Free blocks after the untouched ones, head first.
    back: List,
    /// The first untouched id (`blocks.len()`).
    fresh: usize,
    by_hash: HashMap<BlockHash, usize, DefaultHashBuilder>,
    /// The registered blocks again, by content (see [`ContentIndex`]).
    by_content: ContentIndex,
}

impl BlockPool {
    /// All `num_blocks` blocks of `block_size` tokens free, in id order.
    pub(crate) fn new(num_blocks: usize, block_size: usize) -> Self {
        Self {
            num_blocks,
            blocks: Vec::new(),
            front: List::EMPTY,
            back: List::EMPTY,
            fresh: 0,
            by_hash: HashMap::default(),
            by_content: ContentIndex::new(num_blocks, block_size),
        }
    }

    /// Blocks in the free queue.
    pub(crate) fn num_free(&self) -> usize {
        self.front.len + (self.num_blocks - self.fresh) + self.back.len
    }

    pub(crate) fn ref_count(&self, block: usize) -> usize {
        self.blocks.get(block).map_or(0, |b| b.ref_count)
    }

    pub(crate) fn hash(&self, block: usize) -> Option<BlockHash> {
        self.blocks.get(block).and_then(|b| b.hash)
    }

    /// The block registered for `hash`, held or free.
    pub(crate) fn lookup(&self, hash: &BlockHash) -> Option<usize> {
        self.by_hash.get(hash).copied()
    }

    /// The block registered with this parent hash and these token ids, found without
    /// hashing when the pool kept their copy; `None` tells the caller to look the hash up.
    pub(crate) fn find_by_content(&self, parent: &BlockHash, tokens: &[u32]) -> Option<usize> {
        self.by_content.find(parent, tokens)
    }

    /// Take the head of the free queue for a new owner; its old hash is forgotten.
    pub(crate) fn allocate(&mut self) -> Option<usize> {
        let id = if self.front.len > 0 {
            let id = self.front.head;
            self.unlink(id);
            id
        } else if self.fresh < self.num_blocks {
            let id = self.fresh;
            self.blocks.push(Block {
                ref_count: 0,
                hash: None,
                prev: NIL,
                next: NIL,
                in_back: false,
            });
            self.fresh += 1;
            id
        } else if self.back.len > 0 {
            let id = self.back.head;
            self.unlink(id);
            id
        } else {
            return None;
        };
        let block = &mut self.blocks[id];
        block.ref_count = 1;
        if let Some(hash) = block.hash.take() {
            self.by_hash.remove(&hash);
            self.by_content.remove(id);
        }
        Some(id)
    }

    /// Share a cached block with one more owner, taking it out of the free queue if it was
    /// free.
    pub(crate) fn take_hit(&mut self, id: usize) {
        if self.blocks[id].ref_count == 0 {
            self.unlink(id);
        }
        self.blocks[id].ref_count += 1;
    }

    /// Drop one owner; a block left without owners goes to the tail of the free queue if it
    /// has a hash (it stays findable, evicted last), to the head otherwise.
    pub(crate) fn release(&mut self, id: usize) {
        let block = &mut self.blocks[id];
        block.ref_count -= 1;
        if block.ref_count > 0 {
            return;
        }
        if block.hash.is_some() {
            self.push_back(id);
        } else {
            self.push_front(id);
        }
    }

    /// Register `hash` for the held block `id`, unless another block has it already.
    pub(crate) fn register(&mut self, id: usize, hash: BlockHash) -> bool {
        if self.by_hash.contains_key(&hash) {
            return false;
        }
        if self.by_hash.capacity() == 0 {
            self.by_hash.reserve(self.num_blocks.min(PRESIZED_BLOCKS));
        }
        self.by_hash.insert(hash, id);
        self.blocks[id].hash = Some(hash);
        true
    }

    /// Keep a copy of the content of the registered block `id` (its parent hash and
    /// `tokens`), so that [`find_by_content`](Self::find_by_content) finds it from now on.
    pub(crate) fn remember_content(&mut self, id: usize, parent: &BlockHash, tokens: &[u32]) {
        self.by_content.insert(id, parent, tokens);
    }

    /// The free queue, head first.
    pub(crate) fn free_queue(&self) -> impl Iterator<Item = usize> + '_ {
        self.walk(self.front.head)
            .chain(self.fresh..self.num_blocks)
            .chain(self.walk(self.back.head))
    }

    /// Every block with a hash, by id.
    pub(crate) fn hashes(&self) -> impl Iterator<Item = (usize, BlockHash)> + '_ {
        (self.blocks.iter().enumerate()).filter_map(|(id, b)| b.hash.map(|hash| (id, hash)))
    }

    /// A pool rebuilt from an export: `held[id]` owners per block (touched for all ids), the
    /// free queue head first, and the registered hashes. The caller has checked that they are
    /// consistent. The export has no token ids: its blocks are found by hash alone.
    pub(crate) fn restore(
        held: &[usize],
        block_size: usize,
        free_queue: &[usize],
        hashes: &[(usize, BlockHash)],
    ) -> Self {
        let mut pool = Self::new(held.len(), block_size);
        pool.blocks = held
            .iter()
            .map(|&ref_count| Block {
                ref_count,
                hash: None,
                prev: NIL,
                next: NIL,
                in_back: false,
            })
            .collect();
        pool.fresh = held.len();
        for &(id, hash) in hashes {
            pool.register(id, hash);
        }
        for &id in free_queue {
            pool.push_back(id);
        }
        pool
    }

    fn walk(&self, head: usize) -> impl Iterator<Item = usize> + '_ {
        std::iter::successors((head != NIL).then_some(head), move |&id| {
            let next = self.blocks[id].next;
            (next != NIL).then_some(next)
        })
    }

    fn list(&mut self, in_back: bool) -> &mut List {
        if in_back {
            &mut self.back
        } else {
            &mut self.front
        }
    }

    fn unlink(&mut self, id: usize) {
        let Block {
            prev,
            next,
            in_back,
            ..
        } = self.blocks[id];
        if prev == NIL {
            self.list(in_back).head = next;
        } else {
            self.blocks[prev].next = next;
        }
        if next == NIL {
            self.list(in_back).tail = prev;
        } else {
            self.blocks[next].prev = prev;
        }
        self.list(in_back).len -= 1;
        self.blocks[id].prev = NIL;
        self.blocks[id].next = NIL;
    }

    fn push_front(&mut self, id: usize) {
        let head = self.front.head;
        let block = &mut self.blocks[id];
        (block.prev, block.next, block.in_back) = (NIL, head, false);
        if head == NIL {
            self.front.tail = id;
        } else {
            self.blocks[head].prev = id;
        }
        self.front.head = id;
        self.front.len += 1;
    }

    fn push_back(&mut self, id: usize) {
        let tail = self.back.tail;
        let block = &mut self.blocks[id];
        (block.prev, block.next, block.in_back) = (tail, NIL, true);
        if tail == NIL {
            self.back.head = id;
        } else {
            self.blocks[tail].next = id;
        }
        self.back.tail = id;
        self.back.len += 1;
    }

    /// Check the pool against the owners the scheduler counted per touched block.
    pub(crate) fn check(&self, owners: &HashMap<usize, usize>) -> Result<(), String> {
        let mut in_queue = vec![false; self.blocks.len()];
        let mut queued = 0;
        for id in self.walk(self.front.head).chain(self.walk(self.back.head)) {
            let block = self
                .blocks
                .get(id)
                .ok_or(format!("queued block {id} untouched"))?;
            if block.ref_count != 0 || in_queue[id] {
                return Err(format!("block {id} queued twice or while held"));
            }
            in_queue[id] = true;
            queued += 1;
        }
        if queued != self.front.len + self.back.len {
            return Err("free list lengths disagree with the lists".into());
        }
        for (id, block) in self.blocks.iter().enumerate() {
            let holders = owners.get(&id).copied().unwrap_or(0);
            if block.ref_count != holders {
                return Err(format!(
                    "block {id}: ref_count {} but {holders} holders",
                    block.ref_count
                ));
            }
            if (block.ref_count == 0) != in_queue[id] {
                return Err(format!("block {id} neither free nor held, or both"));
            }
            if let Some(hash) = block.hash {
                if self.by_hash.get(&hash) != Some(&id) {
                    return Err(format!("block {id}'s hash is not registered for it"));
                }
            }
        }
        if owners.keys().any(|&id| id >= self.blocks.len()) {
            return Err("a request holds an untouched block".into());
        }
        for (hash, &id) in &self.by_hash {
            if self.hash(id) != Some(*hash) {
                return Err(format!(
                    "hash map points at block {id}, which lacks the hash"
                ));
            }
        }
        self.by_content.check(|id| self.hash(id).is_some())
    }
}
