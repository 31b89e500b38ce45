//! [`Slab`]: the tracked requests in a vector of slots, found by id through one map.
//!
//! The passes of a step reach a request through the slot its running entry or batch item
//! carries, an index instead of a hash lookup per request per pass; only calls that name a
//! request by id (`add_request`, `abort`, `request`, `finished`) use the map. A freed slot is
//! reused by the next request, so slots stay as many as requests ever tracked at once.

use std::collections::HashMap;

use hashlink::DefaultHashBuilder;

use super::request::Request;

/// Tracked requests by slot, with a map from id to slot.
#[derive(Debug, Clone, Default)]
pub(super) struct Slab {
    slots: Vec<Option<Request>>,
    /// Empty slots, reused last-freed first.
    free: Vec<usize>,
    index: HashMap<u64, usize, DefaultHashBuilder>,
}

impl Slab {
    /// Track `request` (its id is not tracked yet); returns its slot.
    pub(super) fn insert(&mut self, request: Request) -> usize {
        let id = request.id;
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot] = Some(request);
                slot
            }
            None => {
                self.slots.push(Some(request));
                self.slots.len() - 1
            }
        };
        self.index.insert(id, slot);
        slot
    }

    /// Stop tracking the request in `slot`, dropping it where it lies.
    pub(super) fn discard(&mut self, slot: usize) {
        let Some(entry) = self.slots.get_mut(slot) else {
            return;
        };
        if let Some(request) = entry {
            self.index.remove(&request.id);
            *entry = None;
            self.free.push(slot);
        }
    }

    /// The slot of request `id`, if tracked.
    pub(super) fn slot_of(&self, id: u64) -> Option<usize> {
        self.index.get(&id).copied()
    }

    /// Request `id`, if tracked.
    pub(super) fn get(&self, id: u64) -> Option<&Request> {
        self.slot_of(id).and_then(|slot| self.at(slot))
    }

    /// The request in `slot`.
    pub(super) fn at(&self, slot: usize) -> Option<&Request> {
        self.slots.get(slot).and_then(Option::as_ref)
    }

    /// The request in `slot`, mutable.
    pub(super) fn at_mut(&mut self, slot: usize) -> Option<&mut Request> {
        self.slots.get_mut(slot).and_then(Option::as_mut)
    }

    /// The request in `slot` if it is request `id` (a slot freed while a batch was pending
    /// may hold another request by `update`).
    pub(super) fn live_mut(&mut self, slot: usize, id: u64) -> Option<&mut Request> {
        self.at_mut(slot).filter(|request| request.id == id)
    }

    /// Whether `id` is tracked.
    pub(super) fn contains(&self, id: u64) -> bool {
        self.index.contains_key(&id)
    }

    /// Tracked requests.
    pub(super) fn len(&self) -> usize {
        self.index.len()
    }

    /// Every tracked request, in slot order.
    pub(super) fn values(&self) -> impl Iterator<Item = &Request> + '_ {
        self.slots.iter().flatten()
    }
}
