//! [`ContentTree`]: every block content the prefix cache knows, as a tree of full blocks, so
//! that registration and lookup compare contents instead of hashing them.
//!
//! A block's chain hash is a function of its content: the cache salt and the token ids of
//! every block from the first to itself. Two blocks have the same hash exactly when they have
//! the same content (BLAKE2b-128 collisions aside), and the tree interns contents: a node is
//! a block's ids under its parent node (the first block's under its salt), found by a
//! fingerprint and checked by comparison, so one node stands for one content and one hash.
//! "Is this hash registered?" becomes "does this node have a block?", with no hash computed.
//! A node's hash is computed only when asked for: by an exported state (each once per export),
//! or to match the blocks of a pool restored from one, which are known by hash alone (then it
//! is kept).
//!
//! Nodes live while a request's chain or a registered block refers to them (and so do their
//! ancestors); [`collect`](ContentTree::collect) frees the others once the tree has doubled
//! since the last collection, so a long run keeps about as many nodes as live contents.

use std::collections::HashMap;
use std::hash::BuildHasher;

use hashbrown::hash_table::Entry;
use hashbrown::HashTable;
use hashlink::DefaultHashBuilder;

use super::hash::{block_message_of, hash_message, root_hash, BlockHash};
use super::request::with_room;

/// A node's index in the tree.
pub(crate) type NodeId = u32;

/// `Node::block` of a node no block is registered for.
const NO_BLOCK: usize = usize::MAX;

/// `Node::parent` of a first block, which chains on its salt.
const ROOT: NodeId = NodeId::MAX;

/// Content-table entries reserved at the first content (about one per block): a pool of up
/// to this many blocks never rehashes while its cache fills, which took a tenth of a step's
/// time while a cache warmed up, and a larger pool reserves under 1 MB, not its size.
const PRESIZED_BLOCKS: usize = 1 << 16;

/// Collections wait until the tree holds at least this many nodes.
const MIN_COLLECT: usize = 4096;

#[derive(Debug, Clone)]
struct Node {
    /// The node it extends, or [`ROOT`].
    parent: NodeId,
    /// The cache salt (of the first block; every block of a chain has its first's).
    salt: u64,
    /// The block registered for this content, or [`NO_BLOCK`].
    block: usize,
    /// Its chain hash, once asked for.
    hash: Option<BlockHash>,
    /// In use (a freed node waits in `free` for reuse).
    live: bool,
}

/// Block contents, interned; their ids are in `tokens`, `block_size` per node.
#[derive(Debug)]
pub(crate) struct ContentTree {
    nodes: Vec<Node>,
    tokens: Vec<u32>,
    /// Node ids by fingerprint of `(parent, salt, ids)`.
    table: HashTable<NodeId>,
    fingerprint: DefaultHashBuilder,
    free: Vec<NodeId>,
    block_size: usize,
    /// Table entries reserved at the first node (see [`PRESIZED_BLOCKS`]).
    presized: usize,
    /// Collect when this many nodes are live.
    collect_at: usize,
}

impl Clone for ContentTree {
    /// A copy with the original's spare room, as a copied scheduler's requests keep theirs
    /// (a copy at exact capacity would reallocate its nodes at the first new content).
    fn clone(&self) -> Self {
        Self {
            nodes: with_room(&self.nodes),
            tokens: with_room(&self.tokens),
            table: self.table.clone(),
            fingerprint: self.fingerprint.clone(),
            free: self.free.clone(),
            ..*self
        }
    }
}

impl ContentTree {
    /// An empty tree for a pool of `num_blocks` blocks of `block_size` ids.
    pub(crate) fn new(num_blocks: usize, block_size: usize) -> Self {
        Self {
            presized: num_blocks.min(PRESIZED_BLOCKS),
            nodes: Vec::new(),
            tokens: Vec::new(),
            table: HashTable::new(),
            fingerprint: DefaultHashBuilder::default(),
            free: Vec::new(),
            block_size,
            collect_at: MIN_COLLECT,
        }
    }

    /// The node of `ids` (a full block) under `parent` (`None` for a first block, chained on
    /// `salt`), if the tree holds it.
    pub(crate) fn find(&self, parent: Option<NodeId>, salt: u64, ids: &[u32]) -> Option<NodeId> {
        let (parent, salt) = key(parent, salt);
        self.lookup(self.fingerprint(parent, salt, ids), parent, salt, ids)
    }

    /// The node with this stored key and ids, whose fingerprint is `fingerprint`.
    #[inline]
    fn lookup(&self, fingerprint: u64, parent: NodeId, salt: u64, ids: &[u32]) -> Option<NodeId> {
        let same = |&id: &NodeId| {
            let node = &self.nodes[id as usize];
            node.parent == parent && node.salt == salt && self.ids(id) == ids
        };
        self.table.find(fingerprint, same).copied()
    }

    /// The node of `ids` under `parent`, added if the tree lacks it (one probe of the table
    /// either way).
    pub(crate) fn intern(&mut self, parent: Option<NodeId>, salt: u64, ids: &[u32]) -> NodeId {
        let (parent, salt) = key(parent, salt);
        let fingerprint = self.fingerprint(parent, salt, ids);
        // Split borrows: the table grows while its entries are fingerprinted from the nodes.
        let Self {
            nodes,
            tokens,
            table,
            fingerprint: hasher,
            free,
            block_size,
            presized,
            ..
        } = self;
        let size = *block_size;
        let rehash = |&id: &NodeId| {
            let node = &nodes[id as usize];
            fingerprint_of(hasher, node.parent, node.salt, tokens_of(tokens, size, id))
        };
        if table.capacity() == 0 {
            // Growing the table would fingerprint every node again; the vectors only copy.
            table.reserve(*presized, rehash);
        }
        let same = |&id: &NodeId| {
            let node = &nodes[id as usize];
            node.parent == parent && node.salt == salt && tokens_of(tokens, size, id) == ids
        };
        let vacant = match table.entry(fingerprint, same, rehash) {
            Entry::Occupied(found) => return *found.get(),
            Entry::Vacant(vacant) => vacant,
        };
        let node = Node {
            parent,
            salt,
            block: NO_BLOCK,
            hash: None,
            live: true,
        };
        let id = match free.pop() {
            Some(id) => {
                nodes[id as usize] = node;
                let start = id as usize * size;
                tokens[start..start + size].copy_from_slice(ids);
                id
            }
            None => {
                nodes.push(node);
                tokens.extend_from_slice(ids);
                (nodes.len() - 1) as NodeId
            }
        };
        vacant.insert(id);
        id
    }

    /// The block registered for `node`'s content, if any.
    pub(crate) fn block(&self, node: NodeId) -> Option<usize> {
        let block = self.nodes[node as usize].block;
        (block != NO_BLOCK).then_some(block)
    }

    /// Register `block` for `node`'s content (`None` to drop the registration).
    pub(crate) fn set_block(&mut self, node: NodeId, block: Option<usize>) {
        self.nodes[node as usize].block = block.unwrap_or(NO_BLOCK);
    }

    /// `node`'s chain hash, computed (with its ancestors') the first time and kept.
    pub(crate) fn hash(&mut self, node: NodeId) -> BlockHash {
        let mut computed = HashMap::new();
        let hash = self.hash_with(node, &mut computed);
        for (id, hash) in computed {
            self.nodes[id as usize].hash = Some(hash);
        }
        hash
    }

    /// `node`'s chain hash for a read-only caller: the hashes it computes go to `known`
    /// instead of the tree, so that hashing many nodes computes each once.
    pub(crate) fn hash_with(
        &self,
        node: NodeId,
        known: &mut HashMap<NodeId, BlockHash>,
    ) -> BlockHash {
        let cached = |at: NodeId| {
            self.nodes[at as usize]
                .hash
                .or_else(|| known.get(&at).copied())
        };
        let mut pending = Vec::new();
        let mut at = node;
        while at != ROOT && cached(at).is_none() {
            pending.push(at);
            at = self.nodes[at as usize].parent;
        }
        let mut parent = match at {
            ROOT => root_hash(self.nodes[node as usize].salt),
            at => cached(at).unwrap_or_default(),
        };
        let mut message = Vec::new();
        for &id in pending.iter().rev() {
            block_message_of(&parent, self.ids(id), &mut message);
            parent = hash_message(&message);
            known.insert(id, parent);
        }
        parent
    }

    /// Live nodes.
    pub(crate) fn len(&self) -> usize {
        self.nodes.len() - self.free.len()
    }

    /// Whether the tree has grown enough since the last [`collect`](Self::collect) to run
    /// another.
    pub(crate) fn wants_collect(&self) -> bool {
        self.len() >= self.collect_at
    }

    /// Free every node that neither `used` (the nodes of the requests' chains) nor a
    /// registered block refers to, nor is an ancestor of one that is.
    pub(crate) fn collect(&mut self, used: impl IntoIterator<Item = NodeId>) {
        let mut keep = vec![false; self.nodes.len()];
        let registered = (self.nodes.iter().enumerate())
            .filter(|(_, node)| node.live && node.block != NO_BLOCK)
            .map(|(id, _)| id as NodeId);
        let marked: Vec<NodeId> = registered.chain(used).collect();
        for mut at in marked {
            while at != ROOT && !keep[at as usize] {
                keep[at as usize] = true;
                at = self.nodes[at as usize].parent;
            }
        }
        let unused: Vec<NodeId> = (self.nodes.iter().zip(&keep).enumerate())
            .filter(|(_, (node, &kept))| node.live && !kept)
            .map(|(id, _)| id as NodeId)
            .collect();
        for id in unused {
            self.remove(id);
        }
        self.collect_at = (2 * self.len()).max(MIN_COLLECT);
    }

    fn remove(&mut self, id: NodeId) {
        let node = &self.nodes[id as usize];
        let fingerprint = self.fingerprint(node.parent, node.salt, self.ids(id));
        if let Ok(entry) = self.table.find_entry(fingerprint, |&other| other == id) {
            entry.remove();
        }
        self.nodes[id as usize].live = false;
        self.free.push(id);
    }

    /// Check that every live node is found under its content, and that `registered(node,
    /// block)` holds for each node with a block.
    pub(crate) fn check(&self, registered: impl Fn(NodeId, usize) -> bool) -> Result<(), String> {
        let mut live = 0;
        for (id, node) in self.nodes.iter().enumerate() {
            if !node.live {
                continue;
            }
            live += 1;
            let id = id as NodeId;
            let parent = (node.parent != ROOT).then_some(node.parent);
            if self.find(parent, node.salt, self.ids(id)) != Some(id) {
                return Err(format!("content node {id} is not found under its content"));
            }
            if parent.is_some_and(|p| !self.nodes[p as usize].live) {
                return Err(format!("content node {id} extends a freed node"));
            }
            if node.block != NO_BLOCK && !registered(id, node.block) {
                return Err(format!(
                    "content node {id} names block {}, which is not registered for it",
                    node.block
                ));
            }
        }
        if live != self.table.len() {
            return Err("the content table and the live nodes disagree".into());
        }
        Ok(())
    }

    fn ids(&self, id: NodeId) -> &[u32] {
        tokens_of(&self.tokens, self.block_size, id)
    }

    fn fingerprint(&self, parent: NodeId, salt: u64, ids: &[u32]) -> u64 {
        fingerprint_of(&self.fingerprint, parent, salt, ids)
    }
}

/// The stored `(parent, salt)` of a node: a first block's parent is [`ROOT`]; a later block
/// keeps its chain's salt too (its parent determines it, so it never tells two nodes apart).
fn key(parent: Option<NodeId>, salt: u64) -> (NodeId, u64) {
    (parent.unwrap_or(ROOT), salt)
}

fn tokens_of(tokens: &[u32], block_size: usize, id: NodeId) -> &[u32] {
    let start = id as usize * block_size;
    &tokens[start..start + block_size]
}

fn fingerprint_of(hasher: &DefaultHashBuilder, parent: NodeId, salt: u64, ids: &[u32]) -> u64 {
    hasher.hash_one((parent, salt, ids))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serving::hash::block_hash;

    #[test]
    fn one_node_per_content() {
        let mut tree = ContentTree::new(8, 2);
        let a = tree.intern(None, 0, &[1, 2]);
        let b = tree.intern(Some(a), 0, &[3, 4]);
        assert_eq!(tree.intern(None, 0, &[1, 2]), a);
        assert_eq!(tree.intern(Some(a), 0, &[3, 4]), b);
        assert_ne!(tree.intern(None, 1, &[1, 2]), a, "another salt");
        assert_ne!(tree.intern(Some(b), 0, &[3, 4]), b, "another parent");
        assert_eq!(tree.find(Some(a), 0, &[3, 4]), Some(b));
        assert_eq!(tree.find(Some(a), 0, &[3, 5]), None);
        assert_eq!(tree.check(|_, _| true), Ok(()));
    }

    #[test]
    fn hashes_are_the_chain_hashes() {
        let mut tree = ContentTree::new(8, 2);
        let a = tree.intern(None, 7, &[1, 2]);
        let b = tree.intern(Some(a), 7, &[3, 4]);
        let first = block_hash(&root_hash(7), [1, 2]);
        let second = block_hash(&first, [3, 4]);
        let mut known = HashMap::new();
        assert_eq!(tree.hash_with(b, &mut known), second);
        assert_eq!(known, HashMap::from([(a, first), (b, second)]));
        assert_eq!(tree.hash(b), second);
        assert_eq!(tree.hash(a), first);
        assert_eq!(tree.hash_with(b, &mut HashMap::new()), second);
    }

    #[test]
    fn collect_keeps_used_and_registered_nodes_and_their_ancestors() {
        let mut tree = ContentTree::new(8, 1);
        let a = tree.intern(None, 0, &[1]);
        let b = tree.intern(Some(a), 0, &[2]);
        let c = tree.intern(Some(b), 0, &[3]);
        let d = tree.intern(None, 0, &[4]);
        let e = tree.intern(Some(d), 0, &[5]);
        tree.set_block(b, Some(9));
        tree.collect([e]);
        assert_eq!(tree.find(None, 0, &[1]), Some(a));
        assert_eq!(tree.find(Some(a), 0, &[2]), Some(b));
        assert_eq!(tree.find(Some(b), 0, &[3]), None, "c is freed");
        assert_eq!(tree.find(Some(d), 0, &[5]), Some(e));
        assert_eq!(tree.check(|node, block| node == b && block == 9), Ok(()));
        // A freed node's slot holds the next content.
        let f = tree.intern(Some(e), 0, &[6]);
        assert_eq!(f, c);
        assert_eq!(tree.find(Some(e), 0, &[6]), Some(f));
        assert_eq!(tree.check(|_, _| true), Ok(()));
    }
}
