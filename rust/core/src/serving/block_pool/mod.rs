//! [`BlockPool`]: KV-cache blocks, their owner counts and prefix-cache registrations, and
//! the free queue.
//!
//! It knows nothing of requests: callers hold block ids and hand them back, and name block
//! contents by their nodes in the pool's [`ContentTree`]. A block is registered ("has a
//! hash") for at most one content and a content for at most one block, as the rule's one
//! block per hash; the hashes themselves are computed only when asked for (an export), or
//! where a restored pool knows blocks by hash alone.
//!
//! The free queue has three parts, head first: the blocks freed to its head (`front`), the
//! untouched ones and the blocks freed to its tail (`back`). Blocks are touched lazily: ids
//! from `fresh` up have never been allocated, are free and unhashed, so a pool of any size
//! costs memory only for the blocks that were ever used. `front` holds unhashed blocks, which
//! only ever leave from the head: it is a stack of ids. `back` holds the hashed blocks, which a
//! cache hit also takes out of the middle: it is a queue of `(id, stamp)` entries, a block's
//! current entry the one whose stamp it carries, so a hit only clears the block's stamp and
//! leaves a stale entry behind (skipped at the head, swept once they outnumber the live
//! ones). Neither touches another block's record to free, allocate or hit one: a linked
//! list's neighbours are scattered over the pool in a long run, and their cache misses were a
//! seventh of the simulator's loop.

use std::collections::{HashMap, TryReserveError, VecDeque};

use hashlink::DefaultHashBuilder;

use super::content_tree::{ContentTree, NodeId};
use super::hash::BlockHash;
use super::request::with_room;

mod check;

/// The stamp of a block with no entry in `back`.
const NOT_QUEUED: u64 = u64::MAX;

/// Stale entries `back` may hold beyond as many as its live ones before it is swept.
const STALE_SLACK: usize = 64;

/// How a block is registered in the prefix cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Registration {
    /// Unhashed.
    None,
    /// By its content node (whose `block` is this block).
    Node(NodeId),
    /// By hash alone, in `by_hash` (the hash in `BlockPool::restored`): a block restored
    /// from an export, whose ids are unknown.
    Hash,
}

/// What sharing or freeing a touched block reads of it, 16 bytes: its stamp in `back`
/// and a restored block's hash are kept apart (the record was 40 bytes), so that fewer of
/// a long run's scattered block ids miss the cache (a finished request frees dozens of
/// them, and their misses were a third of a simulation's).
///
/// It counts the owners beyond the first, so that a free block and a block with one owner
/// read alike: taking a block from `front` (unhashed, unshared) writes nothing, and while
/// no block is hashed or shared a table is freed without reading its blocks' records at all
/// (see [`release_table`](BlockPool::release_table)).
#[derive(Debug, Clone)]
struct Block {
    /// Owners beyond the first while held; 0 while free.
    shares: usize,
    registration: Registration,
}

/// The pool of `num_blocks` blocks.
#[derive(Debug)]
pub(crate) struct BlockPool {
    num_blocks: usize,
    blocks: Vec<Block>,
    /// Per touched block, the stamp of its entry in `back` while it is there, else
    /// [`NOT_QUEUED`].
    stamps: Vec<u64>,
    /// Per block of a restored pool, the hash it was exported with (read while it is
    /// registered by hash alone); empty in a pool that was never restored.
    restored: Vec<BlockHash>,
    /// Free blocks before the untouched ones, head last: all unhashed.
    front: Vec<usize>,
    /// Free blocks after the untouched ones, head first, as `(id, stamp)`: an entry counts
    /// while its block carries its stamp. Hashed blocks (and every free block of a restored
    /// pool, which reserves room for all).
    back: VecDeque<(usize, u64)>,
    /// Blocks in `back` (its live entries).
    back_len: usize,
    /// The stamp of the next entry of `back`.
    next_stamp: u64,
    /// Blocks registered (hashed), held or free: `back` keeps room for twice as many and
    /// [`STALE_SLACK`] (see [`register`](Self::register)).
    registered: usize,
    /// The owners beyond the first, summed over the blocks (every block's `shares`): a
    /// block is shared only through a cache hit, so this stays 0 while nothing is hashed.
    shares: usize,
    /// The first untouched id (`blocks.len()`).
    fresh: usize,
    /// Blocks registered by hash alone (restored from an export, until a lookup names their
    /// content): empty in a pool that was never restored, and then no hash is computed.
    by_hash: HashMap<BlockHash, usize, DefaultHashBuilder>,
    /// Every content known, with the blocks registered for them (see [`ContentTree`]).
    tree: ContentTree,
}

impl Clone for BlockPool {
    /// A copy with the original's spare room in its records and `front`, which grow a step
    /// at a time: a copy at exact capacity would copy all of them at its first step.
    fn clone(&self) -> Self {
        Self {
            blocks: with_room(&self.blocks),
            stamps: with_room(&self.stamps),
            restored: self.restored.clone(),
            front: with_room(&self.front),
            back: self.back.clone(),
            by_hash: self.by_hash.clone(),
            tree: self.tree.clone(),
            ..*self
        }
    }
}

impl BlockPool {
    /// All `num_blocks` blocks of `block_size` tokens free, in id order.
    pub(crate) fn new(num_blocks: usize, block_size: usize) -> Self {
        Self {
            num_blocks,
            blocks: Vec::new(),
            stamps: Vec::new(),
            restored: Vec::new(),
            front: Vec::new(),
            back: VecDeque::new(),
            back_len: 0,
            next_stamp: 0,
            registered: 0,
            shares: 0,
            fresh: 0,
            by_hash: HashMap::default(),
            tree: ContentTree::new(num_blocks, block_size),
        }
    }

    /// Make room for `blocks` more blocks to be touched (at most the untouched ones), and in
    /// `front` for every touched block to be freed there, or fail: a step's allocation never
    /// aborts the process (a failure leaves `front` larger, which changes nothing). `back`
    /// has room for every hashed block already (see [`register`](Self::register)).
    pub(crate) fn try_reserve_fresh(&mut self, blocks: usize) -> Result<(), TryReserveError> {
        let untouched = self.num_blocks - self.fresh;
        // The records and their stamps grow together; the smaller room counts (one of the
        // two may have grown in a call that failed on the other).
        let spare = (self.blocks.capacity() - self.blocks.len())
            .min(self.stamps.capacity() - self.stamps.len());
        if let Some(more) = blocks.min(untouched).checked_sub(spare).filter(|&m| m > 0) {
            self.blocks.try_reserve(more)?;
            self.stamps.try_reserve(more)?;
        }
        let touched = self.fresh + blocks.min(untouched);
        self.front
            .try_reserve(touched.saturating_sub(self.front.len()))
    }

    /// Blocks ever taken from the untouched ones (each has a record).
    pub(crate) fn touched(&self) -> usize {
        self.fresh
    }

    /// Blocks in the free queue.
    pub(crate) fn num_free(&self) -> usize {
        self.front.len() + (self.num_blocks - self.fresh) + self.back_len
    }

    /// Whether the hashed block `id` (a cache hit) is free: a hashed free block is in
    /// `back`, with its stamp.
    pub(crate) fn is_free_hashed(&self, id: usize) -> bool {
        self.stamps
            .get(id)
            .is_some_and(|&stamp| stamp != NOT_QUEUED)
    }

    /// The node of `ids` under `parent` (see [`ContentTree::intern`]).
    pub(crate) fn intern(&mut self, parent: Option<NodeId>, salt: u64, ids: &[u32]) -> NodeId {
        self.tree.intern(parent, salt, ids)
    }

    /// The contents known, read-only.
    pub(crate) fn tree(&self) -> &ContentTree {
        &self.tree
    }

    /// Whether a block is registered for the hash `hash` by hash alone (a restored pool).
    pub(crate) fn has_hash(&self, hash: &BlockHash) -> bool {
        self.by_hash.contains_key(hash)
    }

    /// Whether blocks are registered by hash alone: only then do lookups need hashes.
    pub(crate) fn has_hash_only_blocks(&self) -> bool {
        !self.by_hash.is_empty()
    }

    /// The block registered for `node`'s content, held or free. A restored block found by
    /// its hash is registered by content from then on.
    pub(crate) fn cached(&mut self, node: NodeId) -> Option<usize> {
        if let Some(block) = self.tree.block(node) {
            return Some(block);
        }
        if self.by_hash.is_empty() {
            return None;
        }
        let block = self.by_hash.remove(&self.tree.hash(node))?;
        self.blocks[block].registration = Registration::Node(node);
        self.tree.set_block(node, Some(block));
        Some(block)
    }

    /// Take the head of the free queue for a new owner; its old hash is forgotten.
    pub(crate) fn allocate(&mut self) -> Option<usize> {
        // A block of `front` or an untouched one has no hash: its record reads as held.
        if let Some(id) = self.front.pop() {
            return Some(id);
        }
        if self.fresh < self.num_blocks {
            let id = self.fresh;
            self.blocks.push(Block {
                shares: 0,
                registration: Registration::None,
            });
            self.stamps.push(NOT_QUEUED);
            self.fresh += 1;
            return Some(id);
        }
        let id = self.pop_back_head()?;
        let block = &mut self.blocks[id];
        let registration = std::mem::replace(&mut block.registration, Registration::None);
        self.registered -= usize::from(!matches!(registration, Registration::None));
        match registration {
            Registration::None => {}
            Registration::Node(node) => self.tree.set_block(node, None),
            Registration::Hash => {
                self.by_hash.remove(&self.restored[id]);
            }
        }
        Some(id)
    }

    /// Take `count` blocks from the head of the free queue for new owners, appending their
    /// ids to `out` in the order as many calls of [`allocate`](Self::allocate) give them;
    /// returns how many there were. A prefill chunk takes dozens of blocks at once, and most
    /// come from `front` or the untouched ones, which have no registration to forget.
    pub(crate) fn allocate_into(&mut self, count: usize, out: &mut Vec<usize>) -> usize {
        let from_front = count.min(self.front.len());
        let keep = self.front.len() - from_front;
        // Unhashed and unshared: their records read as held already.
        out.extend(self.front.drain(keep..).rev());
        // Untouched ones next, in id order (`try_reserve_fresh` made room for their records).
        let from_fresh = (count - from_front).min(self.num_blocks - self.fresh);
        let fresh = self.fresh..self.fresh + from_fresh;
        if from_fresh > 0 {
            self.blocks.extend(fresh.clone().map(|_| Block {
                shares: 0,
                registration: Registration::None,
            }));
            self.stamps.extend(fresh.clone().map(|_| NOT_QUEUED));
            out.extend(fresh);
            self.fresh += from_fresh;
        }
        // Then hashed blocks from `back`, one by one (a registration to forget each).
        let mut taken = from_front + from_fresh;
        while taken < count {
            let Some(id) = self.allocate() else {
                break;
            };
            out.push(id);
            taken += 1;
        }
        taken
    }

    /// Share a cached block with one more owner, taking it out of the free queue if it was
    /// free (then it is in `back`: a cached block is hashed).
    pub(crate) fn take_hit(&mut self, id: usize) {
        if self.is_free_hashed(id) {
            self.unlink(id);
        } else {
            self.blocks[id].shares += 1;
            self.shares += 1;
        }
    }

    /// Drop one owner; a block left without owners goes to the tail of the free queue if it
    /// has a hash (it stays findable, evicted last), to the head otherwise.
    pub(crate) fn release(&mut self, id: usize) {
        let block = &mut self.blocks[id];
        if block.shares > 0 {
            block.shares -= 1;
            self.shares -= 1;
            return;
        }
        if !matches!(block.registration, Registration::None) {
            self.push_back(id);
        } else {
            self.front.push(id);
        }
    }

    /// Release a request's `table`, its last block first (as a request is freed, preempted
    /// or finished).
    pub(crate) fn release_table(&mut self, table: &[usize]) {
        if self.registered == 0 && self.shares == 0 {
            // Each block has this one owner and no hash: it goes to the head, its record
            // untouched (reading them was a third of a simulation's cache misses).
            self.front.extend(table.iter().rev());
            return;
        }
        for &id in table.iter().rev() {
            self.release(id);
        }
    }

    /// Register the held block `id` for `node`'s content, unless another block has it
    /// already (by content, or by its hash in a restored pool).
    pub(crate) fn register(&mut self, id: usize, node: NodeId) -> bool {
        if self.tree.block(node).is_some()
            || (!self.by_hash.is_empty() && self.by_hash.contains_key(&self.tree.hash(node)))
        {
            return false;
        }
        self.tree.set_block(node, Some(id));
        self.blocks[id].registration = Registration::Node(node);
        self.registered += 1;
        // Room in `back` for every hashed block and its stale entries, so that freeing one
        // (a preemption in `schedule()` too) never allocates.
        let room = 2 * self.registered + STALE_SLACK + 1;
        self.back.reserve(room.saturating_sub(self.back.len()));
        true
    }

    /// Whether the tree has grown enough for a [`collect`](Self::collect).
    pub(crate) fn wants_collect(&self) -> bool {
        self.tree.wants_collect()
    }

    /// Free the content nodes that neither `used` (the requests' chains) nor a registered
    /// block needs.
    pub(crate) fn collect(&mut self, used: impl IntoIterator<Item = NodeId>) {
        self.tree.collect(used);
    }

    /// The free queue, head first.
    pub(crate) fn free_queue(&self) -> impl Iterator<Item = usize> + '_ {
        (self.front.iter().rev().copied())
            .chain(self.fresh..self.num_blocks)
            .chain(self.queued())
    }

    /// Every block with a hash, by id.
    pub(crate) fn hashes(&self) -> Vec<(usize, BlockHash)> {
        let mut known = HashMap::new();
        (self.blocks.iter().enumerate())
            .filter_map(|(id, b)| match b.registration {
                Registration::None => None,
                Registration::Node(node) => Some((id, self.tree.hash_with(node, &mut known))),
                Registration::Hash => Some((id, self.restored[id])),
            })
            .collect()
    }

    /// A pool rebuilt from an export: `held[id]` owners per block (touched for all ids), the
    /// free queue head first, and the registered hashes. The caller has checked that they are
    /// consistent. The export has no token ids: its blocks are found by hash alone. Fails,
    /// rather than aborting, when the pool's records do not fit in memory.
    pub(crate) fn restore(
        held: &[usize],
        block_size: usize,
        free_queue: &[usize],
        hashes: &[(usize, BlockHash)],
    ) -> Result<Self, TryReserveError> {
        let mut pool = Self::new(held.len(), block_size);
        pool.blocks.try_reserve_exact(held.len())?;
        pool.stamps.try_reserve_exact(held.len())?;
        pool.restored.try_reserve_exact(held.len())?;
        pool.front.try_reserve_exact(held.len())?;
        pool.back
            .try_reserve_exact(2 * held.len() + STALE_SLACK + 1)?;
        pool.registered = hashes.len();
        pool.blocks.extend(held.iter().map(|&owners| Block {
            shares: owners.saturating_sub(1),
            registration: Registration::None,
        }));
        pool.shares = held.iter().map(|&owners| owners.saturating_sub(1)).sum();
        pool.stamps.resize(held.len(), NOT_QUEUED);
        pool.restored.resize(held.len(), BlockHash::default());
        pool.fresh = held.len();
        for &(id, hash) in hashes {
            pool.by_hash.insert(hash, id);
            pool.blocks[id].registration = Registration::Hash;
            pool.restored[id] = hash;
        }
        for &id in free_queue {
            pool.push_back(id);
        }
        Ok(pool)
    }

    /// The blocks in `back`, head first.
    fn queued(&self) -> impl Iterator<Item = usize> + '_ {
        let live = |&&(id, stamp): &&(usize, u64)| self.stamps[id] == stamp;
        self.back.iter().filter(live).map(|&(id, _)| id)
    }

    /// Take the head of `back`, if any.
    fn pop_back_head(&mut self) -> Option<usize> {
        while let Some((id, stamp)) = self.back.pop_front() {
            if self.stamps[id] == stamp {
                self.stamps[id] = NOT_QUEUED;
                self.back_len -= 1;
                return Some(id);
            }
        }
        None
    }

    /// Take `id` out of `back`: its entry goes stale.
    fn unlink(&mut self, id: usize) {
        self.stamps[id] = NOT_QUEUED;
        self.back_len -= 1;
    }

    /// Put `id` at the tail of `back`, sweeping the stale entries first once they outnumber
    /// the live ones (so `back` holds at most twice its blocks and [`STALE_SLACK`]: room that
    /// [`register`](Self::register) and [`restore`](Self::restore) keep).
    fn push_back(&mut self, id: usize) {
        if self.back.len() >= 2 * self.back_len + STALE_SLACK {
            let stamps = &self.stamps;
            self.back.retain(|&(id, stamp)| stamps[id] == stamp);
        }
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        self.stamps[id] = stamp;
        self.back.push_back((id, stamp));
        self.back_len += 1;
    }
}

#[cfg(test)]
mod tests;
