//! [`ServingScheduler::cached_prefix_tokens`]: a read-only question to the prefix cache, for a
//! router choosing among replicas (the simulator's prefix-aware router).

use super::block_pool::BlockPool;
use super::hash::{block_message_of, hash_message, root_hash};
use super::scheduler::ServingScheduler;

impl ServingScheduler {
    /// How many leading tokens of `token_ids`, with this `cache_salt`, the prefix cache
    /// holds: `block_size` times the longest run of leading full blocks whose chain hash is
    /// registered in the pool, held or free but still hashed (0 with prefix caching off).
    ///
    /// Unlike admission, it does not keep the last token back (a whole prompt of full blocks
    /// can be all cached), and it changes nothing: no block is taken, the free queue's order
    /// is untouched.
    #[must_use]
    pub fn cached_prefix_tokens(&self, token_ids: &[u32], cache_salt: u64) -> u128 {
        let config = self.config();
        if !config.prefix_caching {
            return 0;
        }
        let blocks = cached_blocks(&self.pool, token_ids, config.block_size, cache_salt);
        blocks as u128 * config.block_size as u128
    }
}

/// Leading full blocks of `token_ids` found in `pool`, as admission finds them: by content
/// (nothing is interned: a content the tree lacks is no hit), and in a restored pool also by
/// hash, the chain hashed along.
fn cached_blocks(pool: &BlockPool, token_ids: &[u32], block_size: usize, salt: u64) -> usize {
    let tree = pool.tree();
    let by_hash = pool.has_hash_only_blocks();
    // The content so far: its node while the tree holds it, and its hash when needed.
    let mut node = None;
    let mut in_tree = true;
    let mut hash = root_hash(salt);
    let mut message = Vec::new();
    let mut found = 0;
    for ids in token_ids.chunks_exact(block_size) {
        let next = if in_tree {
            tree.find(node, salt, ids)
        } else {
            None
        };
        if by_hash {
            block_message_of(&hash, ids, &mut message);
            hash = hash_message(&message);
        }
        let hit = next.is_some_and(|next| tree.block(next).is_some())
            || (by_hash && pool.has_hash(&hash));
        if !hit {
            break;
        }
        (node, in_tree) = (next, next.is_some());
        found += 1;
    }
    found
}
