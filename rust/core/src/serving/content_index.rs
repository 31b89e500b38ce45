//! [`ContentIndex`]: the registered blocks by content, so that admission finds a cached
//! prefix without hashing it.
//!
//! A block's chain hash is `blake2b(parent hash || its token ids)`, a function of those two
//! alone. When a block is registered under that hash, the index keeps a copy of the parent
//! hash and of the ids; a later lookup with the same parent and ids is then the same block
//! and the same hash, found with a cheap fingerprint and a comparison instead of a BLAKE2b
//! compression (most of the cost of admitting a prompt with a long cached prefix).
//!
//! The index only ever answers what a hash lookup would: every answer is checked against the
//! stored copy, and anything it does not hold (a restored pool, a fingerprint two contents
//! share) is left to the caller's hash lookup.

use std::collections::HashMap;
use std::hash::BuildHasher;

use hashlink::DefaultHashBuilder;

use super::block_pool::PRESIZED_BLOCKS;
use super::hash::BlockHash;
use super::request::with_room;

/// Registered blocks by `(parent hash, token ids)`.
#[derive(Debug, Default)]
pub(crate) struct ContentIndex {
    /// Fingerprint of the content -> the block holding it.
    by_fingerprint: HashMap<u64, usize, DefaultHashBuilder>,
    /// `parents[id]`: the parent hash block `id` was registered with.
    parents: Vec<BlockHash>,
    /// `block_size` ids per block, block `id` at `id * block_size`.
    tokens: Vec<u32>,
    num_blocks: usize,
    block_size: usize,
    fingerprint: DefaultHashBuilder,
}

impl Clone for ContentIndex {
    /// A copy with the original's spare room, as a copied scheduler's requests keep theirs
    /// (a copy at exact capacity would reallocate the copies as soon as it fills a block).
    fn clone(&self) -> Self {
        Self {
            by_fingerprint: self.by_fingerprint.clone(),
            parents: with_room(&self.parents),
            tokens: with_room(&self.tokens),
            fingerprint: self.fingerprint.clone(),
            ..*self
        }
    }
}

impl ContentIndex {
    /// An empty index of a pool of `num_blocks` blocks of `block_size` ids.
    pub(crate) fn new(num_blocks: usize, block_size: usize) -> Self {
        Self {
            num_blocks,
            block_size,
            ..Self::default()
        }
    }

    /// The block registered with this parent hash and these ids, if the index holds it.
    pub(crate) fn find(&self, parent: &BlockHash, tokens: &[u32]) -> Option<usize> {
        let id = *self.by_fingerprint.get(&self.fingerprint(parent, tokens))?;
        (self.parents[id] == *parent && self.tokens_of(id) == tokens).then_some(id)
    }

    /// Remember that block `id`, registered under the hash of `parent` and `tokens`
    /// (`block_size` ids), holds them. A content already remembered, for this block or under
    /// a fingerprint another content shares, is left as it is.
    pub(crate) fn insert(&mut self, id: usize, parent: &BlockHash, tokens: &[u32]) {
        if tokens.len() != self.block_size || self.find(parent, tokens) == Some(id) {
            return;
        }
        if self.by_fingerprint.capacity() == 0 {
            self.by_fingerprint
                .reserve(self.num_blocks.min(PRESIZED_BLOCKS));
        }
        if id >= self.parents.len() {
            // As far as the blocks touched (a pool of any size costs memory only for the
            // blocks it used), the capacity growing by doubling.
            self.parents.resize(id + 1, [0; 16]);
            self.tokens.resize((id + 1) * self.block_size, 0);
        }
        self.remove(id);
        let start = id * self.block_size;
        self.tokens[start..start + self.block_size].copy_from_slice(tokens);
        self.parents[id] = *parent;
        let key = self.fingerprint(parent, tokens);
        self.by_fingerprint.entry(key).or_insert(id);
    }

    /// Forget block `id` (its hash is dropped), if the index holds it.
    pub(crate) fn remove(&mut self, id: usize) {
        if self.by_fingerprint.capacity() == 0 {
            self.by_fingerprint
                .reserve(self.num_blocks.min(PRESIZED_BLOCKS));
        }
        if id >= self.parents.len() {
            return;
        }
        let key = self.fingerprint(&self.parents[id], self.tokens_of(id));
        if self.by_fingerprint.get(&key) == Some(&id) {
            self.by_fingerprint.remove(&key);
        }
    }

    /// Check that every block the index holds is `registered` and held under its content's
    /// fingerprint.
    pub(crate) fn check(&self, registered: impl Fn(usize) -> bool) -> Result<(), String> {
        for (&key, &id) in &self.by_fingerprint {
            if !registered(id) {
                return Err(format!(
                    "the content index holds block {id}, which has no hash"
                ));
            }
            if self.fingerprint(&self.parents[id], self.tokens_of(id)) != key {
                return Err(format!(
                    "the content index holds block {id} under another key"
                ));
            }
        }
        Ok(())
    }

    fn tokens_of(&self, id: usize) -> &[u32] {
        &self.tokens[id * self.block_size..(id + 1) * self.block_size]
    }

    fn fingerprint(&self, parent: &BlockHash, tokens: &[u32]) -> u64 {
        self.fingerprint.hash_one((parent, tokens))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_what_was_inserted_and_nothing_else() {
        let mut index = ContentIndex::new(4, 2);
        index.insert(3, &[1; 16], &[5, 6]);
        assert_eq!(index.find(&[1; 16], &[5, 6]), Some(3));
        assert_eq!(index.find(&[2; 16], &[5, 6]), None);
        assert_eq!(index.find(&[1; 16], &[5, 7]), None);
        index.remove(3);
        assert_eq!(index.find(&[1; 16], &[5, 6]), None);
    }

    #[test]
    fn a_short_block_is_left_out() {
        let mut index = ContentIndex::new(4, 2);
        index.insert(0, &[1; 16], &[5]);
        assert_eq!(index.find(&[1; 16], &[5, 0]), None);
    }

    #[test]
    fn the_first_holder_of_a_content_keeps_it() {
        let mut index = ContentIndex::new(2, 1);
        index.insert(0, &[1; 16], &[5]);
        index.insert(1, &[1; 16], &[5]);
        assert_eq!(index.find(&[1; 16], &[5]), Some(0));
        index.remove(1); // not the holder: changes nothing
        assert_eq!(index.find(&[1; 16], &[5]), Some(0));
        index.remove(0);
        assert_eq!(index.find(&[1; 16], &[5]), None);
    }

    #[test]
    fn a_block_inserted_again_holds_its_new_content() {
        let mut index = ContentIndex::new(2, 1);
        index.insert(0, &[1; 16], &[5]);
        index.remove(0);
        index.insert(0, &[2; 16], &[6]);
        assert_eq!(index.find(&[1; 16], &[5]), None);
        assert_eq!(index.find(&[2; 16], &[6]), Some(0));
    }
}
