//! `update`'s prefix-cache registration: the full blocks a batch computed get their chain
//! hashes, several requests' chains at a time, and are then registered in item order.
//!
//! Hashing is most of a step's work, and one request's chain is sequential (each hash is
//! part of the next one's input), but the chains of different requests are not: extending
//! [`LANES`] of them together fills the SIMD lanes that a single BLAKE2b leaves idle. The
//! hashes do not depend on registration, so registering afterwards, item by item, gives
//! each block the same outcome as hashing and registering it in place.

use super::batch::BatchItem;
use super::counts::full_blocks;
use super::hash::{hash_lanes, BlockHash, LANES};
use super::scheduler::ServingScheduler;

/// The blocks `first..end` of the request in `slot`, filled by one item.
#[derive(Debug, Clone, Copy)]
struct Filled {
    slot: usize,
    first: usize,
    end: usize,
}

/// The buffers of [`ServingScheduler::register_filled`], kept between updates.
#[derive(Debug, Clone, Default)]
pub(crate) struct Registration {
    filled: Vec<Filled>,
    /// The bytes each lane hashes.
    messages: [Vec<u8>; LANES],
}

impl ServingScheduler {
    /// Note the blocks `item` filled, to be hashed and registered by
    /// [`register_filled`](Self::register_filled) while its request's chain of known tokens
    /// lasts.
    pub(super) fn note_filled(&mut self, item: &BatchItem, slot: usize) {
        let block_size = self.config.block_size;
        let Some(request) = self.requests.at(slot) else {
            return;
        };
        let first = full_blocks(item.start, block_size);
        let end = full_blocks(item.start + item.tokens as u128, block_size);
        let end = end.min(request.table.len());
        if end <= first || request.hashable_blocks(block_size) <= first {
            // Filled no block (most decodes), or no block it fills can be hashed (the
            // chain stopped at an unknown token: an int prompt, say).
            return;
        }
        self.registration.filled.push(Filled { slot, first, end });
    }

    /// Hash the blocks noted since the last call and register each, in the order noted;
    /// a block whose hash another block holds stays unhashed.
    pub(super) fn register_filled(&mut self) {
        self.extend_chains();
        for &Filled { slot, first, end } in &self.registration.filled {
            let Some(request) = self.requests.at(slot) else {
                continue;
            };
            for block in first..request.num_hashed().min(end) {
                self.pool
                    .register(request.table[block], request.hash(block));
            }
        }
        self.registration.filled.clear();
    }

    /// Extend the hash chain of each noted request to the end of its run (as far as its
    /// tokens are known), up to [`LANES`] chains a block at a time.
    fn extend_chains(&mut self) {
        let block_size = self.config.block_size;
        let Registration { filled, messages } = &mut self.registration;
        // The slot and chain target of each busy lane.
        let mut lanes = [(0, 0); LANES];
        let mut hashes: [BlockHash; LANES] = [[0; 16]; LANES];
        let (mut busy, mut next) = (0, 0);
        loop {
            while busy < LANES && next < filled.len() {
                let Filled { slot, end, .. } = filled[next];
                next += 1;
                let Some(request) = self.requests.at(slot) else {
                    continue;
                };
                let target = request.chain_limit(end, block_size);
                if request.num_hashed() < target {
                    lanes[busy] = (slot, target);
                    busy += 1;
                }
            }
            if busy == 0 {
                return;
            }
            for (&(slot, _), message) in lanes[..busy].iter().zip(messages.iter_mut()) {
                if let Some(request) = self.requests.at(slot) {
                    request.next_message(block_size, message);
                }
            }
            hash_lanes(&messages[..busy], &mut hashes[..busy]);
            let mut lane = 0;
            while lane < busy {
                let (slot, target) = lanes[lane];
                let request = self.requests.at_mut(slot);
                let done = request.is_none_or(|request| {
                    request.push_hash(hashes[lane]);
                    request.num_hashed() >= target
                });
                if done {
                    // The last busy lane moves here, hash included, and is handled next.
                    busy -= 1;
                    lanes[lane] = lanes[busy];
                    hashes[lane] = hashes[busy];
                } else {
                    lane += 1;
                }
            }
        }
    }
}
