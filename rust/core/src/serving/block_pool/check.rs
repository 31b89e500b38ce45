//! [`BlockPool::check`]: the pool's records, queues and registrations against the owners
//! the scheduler counts (`ServingScheduler::check_invariants`, for tests).

use std::collections::HashMap;

use super::{BlockPool, Registration, NOT_QUEUED};

impl BlockPool {
    /// Check the pool against the owners the scheduler counted per touched block.
    pub(crate) fn check(&self, owners: &HashMap<usize, usize>) -> Result<(), String> {
        let mut in_queue = vec![false; self.blocks.len()];
        let mut queued = 0;
        for id in (self.front.iter().copied()).chain(self.queued()) {
            let block = self
                .blocks
                .get(id)
                .ok_or_else(|| format!("queued block {id} untouched"))?;
            if block.shares != 0 || in_queue[id] {
                return Err(format!("block {id} queued twice or while held"));
            }
            if queued < self.front.len() && block.registration != Registration::None {
                return Err(format!("block {id} is hashed but freed to the head"));
            }
            in_queue[id] = true;
            queued += 1;
        }
        if self.stamps.len() != self.blocks.len() {
            return Err("block records and stamps disagree in length".into());
        }
        let stamped = (self.stamps.iter()).filter(|&&s| s != NOT_QUEUED).count();
        let hashed = (self.blocks.iter())
            .filter(|b| b.registration != Registration::None)
            .count();
        if hashed != self.registered {
            return Err(format!(
                "{hashed} blocks hashed, {} counted",
                self.registered
            ));
        }
        if queued != self.front.len() + self.back_len || stamped != self.back_len {
            return Err("free list lengths disagree with the lists".into());
        }
        let shares: usize = self.blocks.iter().map(|b| b.shares).sum();
        if shares != self.shares {
            return Err(format!(
                "{shares} shares of blocks, {} counted",
                self.shares
            ));
        }
        for (id, block) in self.blocks.iter().enumerate() {
            let holders = owners.get(&id).copied().unwrap_or(0);
            // A queued block is free (its `shares` is 0, checked above), any other held.
            let ref_count = if in_queue[id] { 0 } else { block.shares + 1 };
            if ref_count != holders {
                return Err(format!(
                    "block {id}: {ref_count} owners but {holders} holders"
                ));
            }
            match block.registration {
                Registration::Hash if self.by_hash.get(&self.restored[id]) != Some(&id) => {
                    return Err(format!("block {id}'s hash is not registered for it"));
                }
                Registration::Node(node) if self.tree.block(node) != Some(id) => {
                    return Err(format!("block {id}'s content is not registered for it"));
                }
                _ => {}
            }
        }
        if owners.keys().any(|&id| id >= self.blocks.len()) {
            return Err("a request holds an untouched block".into());
        }
        for (hash, &id) in &self.by_hash {
            if self.blocks[id].registration != Registration::Hash || self.restored[id] != *hash {
                return Err(format!(
                    "hash map points at block {id}, which lacks the hash"
                ));
            }
        }
        let by_node = |node, id: usize| self.blocks[id].registration == Registration::Node(node);
        self.tree.check(by_node)
    }
}
