//! `check_invariants`: every invariant of the scheduler, for tests.

use std::collections::{HashMap, HashSet};

use super::batch::Batch;
use super::counts::{blocks_for, shortfall};
use super::id_log::TokenSource;
use super::request::{Request, RequestState};
use super::scheduler::{Entry, ServingScheduler};

impl ServingScheduler {
    /// Check every invariant of the scheduler (for tests): blocks free xor held with ref
    /// counts equal to their holders, table sizes, queues and counters.
    ///
    /// # Errors
    ///
    /// A description of the first broken invariant.
    #[doc(hidden)]
    pub fn check_invariants(&self) -> Result<(), String> {
        let block_size = self.config.block_size;
        let mut owners: HashMap<usize, usize> = HashMap::new();
        let mut planned: HashMap<u64, usize> = HashMap::new();
        let pending = self.pending_batch();
        if let Some(batch) = pending {
            for item in batch.items() {
                planned.insert(item.request_id, item.tokens);
            }
        }
        let lean = pending.is_some_and(Batch::is_lean);
        let mut running = 0;
        for request in self.requests.values() {
            let settled = request.settled(self.group.clock, TokenSource::Unknown);
            // A lean batch's decodes are its group's members, one token each.
            let listed = planned.get(&request.id).copied();
            let tokens = listed.unwrap_or(usize::from(lean && request.in_group())) as u128;
            self.check_request(&settled, tokens, &mut owners)?;
            running += usize::from(request.state == RequestState::Running);
        }
        self.check_group()?;
        if running != self.running.len() || self.running.len() > self.config.max_running {
            return Err("running list and running requests disagree".into());
        }
        if !self.running.windows(2).all(|pair| pair[0].0 < pair[1].0) {
            return Err("running list not sorted by rank".into());
        }
        let holds =
            |&(rank, slot): &Entry| self.requests.at(slot).is_some_and(|r| r.rank() == rank);
        if !self.running.iter().all(holds) {
            return Err("a running entry's slot holds another request".into());
        }
        let deficit: usize = (self.requests.values())
            .filter(|request| request.state == RequestState::Running)
            .map(|request| {
                shortfall(
                    &request.settled(self.group.clock, TokenSource::Unknown),
                    block_size,
                )
            })
            .sum();
        if deficit != self.deficit {
            return Err(format!(
                "deficit {} but running requests need {deficit}",
                self.deficit
            ));
        }
        if self.requests.len() - running != self.num_waiting {
            return Err("num_waiting disagrees".into());
        }
        if let Some(batch) = pending {
            let tokens = batch.num_prefill_tokens + batch.num_decode_tokens;
            if tokens > self.config.token_budget {
                return Err(format!("batch carries {tokens} tokens, above the budget"));
            }
        }
        self.pool.check(&owners)
    }

    /// The decode group holds exactly the running requests with one token left, its count and
    /// token sum agree, and the prefills are the other running requests, in rank order.
    fn check_group(&self) -> Result<(), String> {
        let clock = self.group.clock;
        let (mut members, mut tokens) = (0, 0);
        let mut prefilling = Vec::new();
        let mut lane = Vec::new();
        for &(rank, slot) in &self.running {
            let Some(request) = self.requests.at(slot) else {
                return Err("a running entry's slot is empty".into());
            };
            if request.in_group() {
                if request.left() != 1 {
                    return Err(format!(
                        "decode group member {} has {} tokens left",
                        request.id,
                        request.left()
                    ));
                }
                members += 1;
                tokens += request.tokens_at(clock);
                lane.push((rank, slot, request.computed_at(clock)));
            } else {
                prefilling.push((rank, slot));
            }
        }
        if self
            .requests
            .values()
            .any(|r| r.in_group() && r.state != RequestState::Running)
        {
            return Err("a waiting request is in the decode group".into());
        }
        if members != self.group.members || tokens != self.group.tokens {
            return Err(format!(
                "decode group counts {} members and {} tokens, not {members} and {tokens}",
                self.group.members, self.group.tokens
            ));
        }
        if self.group.lane.live(clock).is_some_and(|live| live != lane) {
            return Err("the decode lane is not the group's members in rank order".into());
        }
        if prefilling != self.prefilling {
            return Err("the prefilling list is not the running requests outside the group".into());
        }
        Ok(())
    }

    /// The invariants of one tracked request, with `tokens` planned for it in the pending
    /// batch; counts the blocks it holds into `owners`.
    fn check_request(
        &self,
        request: &Request,
        tokens: u128,
        owners: &mut HashMap<usize, usize>,
    ) -> Result<(), String> {
        let (id, block_size) = (request.id, self.config.block_size);
        let mut seen = HashSet::new();
        for &block in &request.table {
            if !seen.insert(block) {
                return Err(format!("request {id} holds block {block} twice"));
            }
            *owners.entry(block).or_default() += 1;
        }
        for (block, &node) in request.nodes().iter().enumerate() {
            let parent = block.checked_sub(1).map(|before| request.node(before));
            let ids = request.block_ids(block, block_size);
            if self.pool.tree().find(parent, request.cache_salt, &ids) != Some(node) {
                return Err(format!(
                    "request {id}'s block {block} has another content node"
                ));
            }
        }
        let want = blocks_for(request.num_computed + tokens, block_size);
        match request.state {
            RequestState::Running => {
                if request.table.len() != want {
                    return Err(format!(
                        "request {id} holds {} blocks, not {want}",
                        request.table.len()
                    ));
                }
                if request.num_computed + tokens > request.num_tokens()
                    || (tokens == 0 && request.num_computed >= request.num_tokens())
                {
                    return Err(format!("request {id} computed past its tokens"));
                }
                if !self.running.iter().any(|&(rank, _)| rank == request.rank()) {
                    return Err(format!("running request {id} not in the running list"));
                }
            }
            RequestState::Waiting => {
                if !request.table.is_empty() || request.num_computed != 0 || tokens != 0 {
                    return Err(format!("waiting request {id} holds blocks or work"));
                }
            }
        }
        if request.num_generated() >= request.max_new_tokens {
            return Err(format!("request {id} should have finished"));
        }
        Ok(())
    }
}
