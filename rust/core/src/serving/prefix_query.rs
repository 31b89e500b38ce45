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

/// Leading full blocks of `token_ids` found in `pool`: by content where the pool remembers
/// it (as admission finds them), else by hash, hashing only up to the first miss.
fn cached_blocks(pool: &BlockPool, token_ids: &[u32], block_size: usize, salt: u64) -> usize {
    let mut parent = root_hash(salt);
    let mut message = Vec::new();
    let mut found = 0;
    for ids in token_ids.chunks_exact(block_size) {
        let hit = pool.find_by_content(&parent, ids).or_else(|| {
            block_message_of(&parent, ids, &mut message);
            pool.lookup(&hash_message(&message))
        });
        match hit.and_then(|hit| pool.hash(hit)) {
            Some(hash) => parent = hash,
            None => break,
        }
        found += 1;
    }
    found
}
