//! A step that only decodes, planned and applied without a batch, for the simulator's loop.
//!
//! With nobody waiting and no prefill running, a step is the decode group's: every member
//! computes one token, the members whose last block is full get a block first, and the
//! group's events (filled blocks, finishes) are applied after. `schedule_lean` and
//! `update_step` do that through a sealed batch, which the loop only reads for three counts;
//! [`ServingScheduler::schedule_decodes`] and [`ServingScheduler::update_decodes`] make the
//! same changes in the same order and hand the counts over directly. The plan still happens
//! when the step starts and the update when it ends: requests routed in between are added
//! to the scheduler between the two, as with a batch.

use super::scheduler::ServingScheduler;
use super::step::Room;
use crate::CoreError;

/// What a decode-only step planned: the counts a lean batch would carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DecodeStep {
    pub(crate) step_index: u128,
    /// Decode tokens (the group's members).
    pub(crate) decodes: usize,
    /// Their context tokens.
    pub(crate) context_tokens: u128,
    /// Free blocks once the step's blocks are taken.
    pub(crate) free_blocks: usize,
}

impl ServingScheduler {
    /// Plan the next step as `schedule_lean` would, if it only decodes: nothing pending,
    /// waiting (stale entries included) or prefilling, and a free block for every member
    /// whose last block is full (so no preemption). `None` leaves the scheduler untouched.
    ///
    /// # Errors
    ///
    /// [`CoreError::OutOfMemory`] as `schedule_lean`'s, for the blocks this step can take.
    pub(crate) fn schedule_decodes(&mut self) -> Result<Option<DecodeStep>, CoreError> {
        let decode_only = !self.pending
            && self.prefilling.is_empty()
            && self.waiting.is_empty()
            && self.group.members > 0
            && self.group.needs_block.len() <= self.pool.num_free();
        if !decode_only {
            return Ok(None);
        }
        self.reserve_decode_step()?;
        let step_index = self.step_index;
        self.step_index += 1;
        self.plan_decodes(&mut Room::new(self.config.token_budget), true);
        self.group.lane.switch_off();
        self.pending = true;
        self.decodes_pending = true;
        Ok(Some(DecodeStep {
            step_index,
            decodes: self.group.members,
            context_tokens: self.group.tokens,
            free_blocks: self.pool.num_free(),
        }))
    }

    /// Apply the decode-only step [`schedule_decodes`](Self::schedule_decodes) planned, as
    /// `update_step` with no token ids would; returns the ids that finished.
    pub(crate) fn update_decodes(&mut self) -> &[u64] {
        debug_assert!(self.decodes_pending, "no decode-only step pending");
        self.finished_out.clear();
        self.group.log.skip(self.group.clock);
        self.group.tick();
        self.apply_group_events();
        self.collect_content();
        self.pending = false;
        self.decodes_pending = false;
        self.aborted_pending.clear();
        &self.finished_out
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::serving::{Prompt, SampledTokens, ServingConfig, TokenIds};

    /// A request: the step it arrives in (while that step runs), its prompt's length, its
    /// output's, and whether its prompt's token ids are known (hashed blocks).
    type Arrival = (u64, u64, u64, bool);

    fn add(s: &mut ServingScheduler, id: u64, arrival: &Arrival) -> Result<(), CoreError> {
        let &(_, prompt, output, known) = arrival;
        let prompt = if known {
            Prompt::Tokens((0..prompt).map(|t| (t % 3) as u32).collect())
        } else {
            Prompt::Length(prompt)
        };
        s.add_request(id, prompt, output, 0, 0)
    }

    /// `arrivals` (sorted by step) through two schedulers, one planning every step as a lean
    /// batch, the other each decode-only step without a batch: every step's counts, every
    /// finish and the exported state agree. With `sampled`, the tokens the requests sample
    /// are known (generated blocks are hashed). Returns the steps planned without a batch.
    fn agree(
        config: ServingConfig,
        arrivals: &[Arrival],
        sampled: bool,
    ) -> Result<usize, CoreError> {
        let mut lean = ServingScheduler::new(config)?;
        if sampled {
            let token = |id: u64, at: u128| ((id as u128 + at) % 5) as u32;
            lean.set_sampled_tokens(Some(SampledTokens::new(token)));
        }
        let mut fast = lean.clone();
        let (mut next, mut decode_steps) = (0, 0);
        for step in 0..20_000 {
            if next == arrivals.len() && lean.is_empty() {
                break;
            }
            let planned = lean.schedule_lean()?.clone();
            let decodes = fast.schedule_decodes()?;
            match decodes {
                Some(d) => {
                    assert!(planned.items().is_empty() && planned.preempted().is_empty());
                    let counts = (d.decodes, d.context_tokens, d.free_blocks);
                    assert_eq!(d.step_index, planned.step_index());
                    let batch = (planned.num_decode_tokens(), planned.decode_context_tokens());
                    assert_eq!(counts, (batch.0, batch.1, planned.num_free_blocks()));
                    decode_steps += 1;
                }
                None => assert_eq!(fast.schedule_lean()?, &planned),
            }
            // The requests routed while the step runs.
            while next < arrivals.len() && arrivals[next].0 <= step {
                add(&mut lean, next as u64, &arrivals[next])?;
                add(&mut fast, next as u64, &arrivals[next])?;
                next += 1;
            }
            let index = planned.step_index();
            let finished = lean.update_step(index, TokenIds::None, &[])?.to_vec();
            let got = match decodes {
                Some(_) => fast.update_decodes().to_vec(),
                None => fast.update_step(index, TokenIds::None, &[])?.to_vec(),
            };
            assert_eq!(got, finished, "step {step}");
            assert_eq!(fast.to_state()?, lean.to_state()?, "step {step}");
        }
        assert!(lean.is_empty(), "the run did not end");
        Ok(decode_steps)
    }

    #[test]
    fn a_decode_only_step_without_a_batch_makes_the_changes_of_a_lean_batch(
    ) -> Result<(), CoreError> {
        // Decodes that fill blocks and finish, prefills arriving among them, and a pool of
        // 24 blocks that four requests of 75 tokens outgrow (a fill preempts), then 40.
        let mut config = ServingConfig::new(24);
        config.block_size = 4;
        let arrivals = [
            (0, 9, 70, false),
            (0, 5, 70, true),
            (3, 30, 40, false),
            (4, 7, 60, true),
        ];
        assert!(agree(config.clone(), &arrivals, false)? > 50);
        assert!(agree(config.clone(), &arrivals, true)? > 50);
        config.num_blocks = 40;
        assert!(agree(config, &arrivals, true)? > 50);
        Ok(())
    }

    fn arrival() -> impl Strategy<Value = Arrival> {
        (0_u64..60, 1_u64..60, 1_u64..90, any::<bool>())
    }

    proptest! {
        #[test]
        fn decode_only_steps_agree_with_lean_batches(
            mut arrivals in prop::collection::vec(arrival(), 1..12),
            num_blocks in 12_usize..80,
            block_size in prop::sample::select(vec![1_usize, 2, 4, 16]),
            token_budget in 16_usize..200,
            max_running in 1_usize..8,
            sampled in any::<bool>(),
        ) {
            arrivals.sort_by_key(|a| a.0);
            let mut config = ServingConfig::new(num_blocks);
            config.block_size = block_size;
            config.token_budget = token_budget;
            config.chunk_size = 32;
            config.max_running = max_running;
            // Requests the pool can hold alone (the simulator checks so before it runs).
            let fits = |a: &Arrival| (a.1 + a.2).div_ceil(block_size as u64) <= num_blocks as u64;
            arrivals.retain(fits);
            agree(config, &arrivals, sampled).map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
    }
}
