//! The prefix-cache content hash: a blake2b-128 chain over the blocks of a request.
//!
//! Both backends compute the same bytes (Python: `hashlib.blake2b(data, digest_size=16)`), on
//! every run and machine, so cache hits and exported states agree everywhere.
//!
//! BLAKE2b with a digest length of 16 (the parameter, not a truncation) is
//! `blake2b_simd`'s: it picks AVX2 or SSE4.1 at run time, about 1.5 times as fast as a
//! portable one on one block. The Rust core computes these hashes only when one is asked for
//! (see `content_tree.rs`); the pure twin computes one per block at `update`.

/// The content hash of a full block, chained on every block before it.
pub type BlockHash = [u8; 16];

/// The hash the chain starts from: `blake2b-128(cache_salt as 8 little-endian bytes)`.
#[must_use]
pub fn root_hash(cache_salt: u64) -> BlockHash {
    hash_message(&cache_salt.to_le_bytes())
}

/// The hash of a block whose predecessor's hash is `parent` (the root for the first block):
/// `blake2b-128(parent || the block's token ids as little-endian u32)`.
#[must_use]
pub fn block_hash(parent: &BlockHash, tokens: impl IntoIterator<Item = u32>) -> BlockHash {
    let mut message = Vec::new();
    block_message(parent, tokens, &mut message);
    hash_message(&message)
}

/// `parent || tokens as little-endian u32` into `message` (emptied first): the bytes
/// [`block_hash`] hashes, built in a buffer the caller keeps, so that the hash is one call
/// over contiguous bytes.
pub(crate) fn block_message(
    parent: &BlockHash,
    tokens: impl IntoIterator<Item = u32>,
    message: &mut Vec<u8>,
) {
    let tokens = tokens.into_iter();
    message.clear();
    message.reserve(parent.len() + 4 * tokens.size_hint().0);
    message.extend_from_slice(parent);
    for token in tokens {
        message.extend_from_slice(&token.to_le_bytes());
    }
}

/// [`block_message`] for a block whose ids are one slice (all in the prompt): written in
/// place, without a capacity check per token.
pub(crate) fn block_message_of(parent: &BlockHash, ids: &[u32], message: &mut Vec<u8>) {
    message.clear();
    message.extend_from_slice(parent);
    message.resize(parent.len() + 4 * ids.len(), 0);
    let tokens = message[parent.len()..].chunks_exact_mut(4);
    for (bytes, id) in tokens.zip(ids) {
        bytes.copy_from_slice(&id.to_le_bytes());
    }
}

/// `blake2b-128(message)`.
pub(crate) fn hash_message(message: &[u8]) -> BlockHash {
    let digest = blake2b_simd::Params::new().hash_length(16).hash(message);
    let mut hash = [0; 16];
    hash.copy_from_slice(digest.as_bytes());
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(hash: &BlockHash) -> String {
        hash.iter().map(|byte| format!("{byte:02x}")).collect()
    }

    #[test]
    fn slice_message_is_the_iterator_message() {
        let parent = root_hash(3);
        let ids = [0, 1, 0x0102_0304, u32::MAX, 77];
        let (mut by_iter, mut by_slice) = (vec![9; 3], vec![9; 40]);
        block_message(&parent, ids, &mut by_iter);
        block_message_of(&parent, &ids, &mut by_slice);
        assert_eq!(by_iter, by_slice);
        assert_eq!(hash_message(&by_slice), block_hash(&parent, ids));
    }

    /// Vectors from `hashlib.blake2b(data, digest_size=16).hexdigest()` in CPython.
    #[test]
    fn matches_python_hashlib() {
        let root = root_hash(0);
        assert_eq!(hex(&root), "c804ce198ec337e3dc762bdd1a09aece");
        assert_eq!(hex(&root_hash(7)), "a5e47192376d46472707aad6430c235b");
        assert_eq!(
            hex(&root_hash(u64::MAX)),
            "c9af5328349644b9d508d8aced3c4f9f"
        );
        let first = block_hash(&root, [1, 2, 3, 4]);
        assert_eq!(hex(&first), "4b42ae07c15673e7bf5f1149cb2072c6");
        let second = block_hash(&first, [5, 6, 7, u32::MAX]);
        assert_eq!(hex(&second), "e72f49baa46ca30a4189cf04bbaca8b5");
    }
}
