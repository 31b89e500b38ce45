//! A step's life on one replica: [`Loop::start`] plans it and puts it in flight,
//! [`Loop::complete`] records what it sampled and reports it back. A step that only decodes
//! goes through the scheduler without a batch (`start_decodes`, `complete_decodes`), every
//! other step through a lean batch; both record alike.

use super::{Flight, Loop, Replica};
use crate::serving::TokenIds;
use crate::sim::engine::StepShape;
use crate::sim::error::SimError;
use crate::sim::metrics::Outcome;
use crate::sim::router::outstanding;
use crate::sim::tokens::{record_samples, Recorder, Sampled, StepGaps, Track};
use crate::CoreError;

impl Replica {
    /// Close its step `step`, which ended at `end`: its step count, and the blocks it holds
    /// now in `fleet_used` (the fleet's blocks in use).
    #[inline(always)]
    fn close_step(&mut self, step: u64, end: f64, fleet_used: &mut u64) {
        self.gaps.completed = step + 1;
        self.gaps.last_end = end;
        let num_blocks = self.sched.config().num_blocks;
        let held = (num_blocks - self.sched.num_free_blocks()) as u64;
        *fleet_used = *fleet_used - self.held + held;
        self.held = held;
    }
}

/// Record that the requests `finished` did at step `step` of a replica (`gaps`), which
/// ended at `end`; returns how many. Inlined: it runs every step, mostly over none.
#[inline(always)]
fn record_finished(
    finished: &[u64],
    gaps: &StepGaps,
    (step, end): (u64, f64),
    tracks: &mut [Track],
    out: &mut Outcome,
) -> usize {
    for &id in finished {
        let i = id as usize;
        tracks[i].stop(gaps, step, end, out, i);
        out.finish[i] = end;
    }
    finished.len()
}

impl Loop<'_> {
    /// Plan a step on replica `r` at the current time and put it in flight (an empty plan,
    /// nothing fits until something changes, is reported at once and leaves it idle).
    pub(super) fn start(&mut self, r: usize) -> Result<(), SimError> {
        if self.started == self.max_steps {
            return Err(SimError::StepLimit {
                steps: self.max_steps,
                done: self.done,
                requests: self.workload.len(),
            });
        }
        if self.start_decodes(r)? {
            return Ok(());
        }
        let replica = &mut self.replicas[r];
        let num_blocks = replica.sched.config().num_blocks;
        // Decodes are counted, not listed: their known tokens come from the plan (above).
        let planned = replica.sched.schedule_lean();
        let batch = match planned {
            Ok(batch) => batch,
            Err(CoreError::OutOfMemory { what }) => return Err(SimError::OutOfMemory { what }),
            Err(_) => return Ok(()),
        };
        let step_index = batch.step_index();
        if batch.is_empty() {
            let _ = replica.sched.update_step(step_index, TokenIds::None, &[]);
            return Ok(());
        }
        let out = &mut self.out;
        let start = self.now;
        let mut shape = StepShape::default();
        let last_step = replica.gaps.completed.wrapping_sub(1);
        for &id in batch.preempted() {
            let i = id as usize;
            out.preemptions[i] += 1;
            let track = &mut self.tracks[i];
            track.stop(&replica.gaps, last_step, replica.gaps.last_end, out, i);
            track.silent = false;
        }
        replica.chunks.clear();
        for item in batch.items() {
            let i = item.request_id as usize;
            if item.is_prefill {
                let now = u64::try_from(item.start + item.tokens as u128).unwrap_or(u64::MAX);
                replica.chunks.push((i, now));
                // A request's first item is its admission's, a prefill.
                if out.admitted[i].is_nan() {
                    out.admitted[i] = start;
                    if item.cached_tokens > 0 {
                        out.cached_tokens[i] = item.cached_tokens as u64;
                    }
                }
                shape.add_chunk(item.start, item.tokens as u64);
                if out.preemptions[i] > 0 {
                    out.recomputed_tokens[i] += item.tokens as u64;
                }
            }
        }
        let prefill = batch.num_prefill_tokens() as u64;
        let decode = batch.num_decode_tokens() as u64;
        // The batch's own counts (as the pure loop reads them), not the sums of the items.
        (shape.prefill_tokens, shape.decode_tokens) = (prefill, decode);
        shape.decode_context_tokens = batch.decode_context_tokens();
        let duration = self.engine.step_time(&shape);
        let used = (num_blocks - batch.num_free_blocks()) as u64;
        self.fleet_used = self.fleet_used - replica.held + used;
        replica.held = used;
        replica.flight = Some(Flight {
            step_index,
            end: start + duration,
            duration,
            used,
            decodes: None,
        });
        self.started += 1;
        Ok(())
    }

    /// Put replica `r`'s next step in flight without a batch if it only decodes (as
    /// [`start`](Self::start) a lean batch of decodes alone); `false` if it does more.
    ///
    /// # Errors
    ///
    /// [`SimError::OutOfMemory`] as `start`'s.
    fn start_decodes(&mut self, r: usize) -> Result<bool, SimError> {
        let replica = &mut self.replicas[r];
        let step = match replica.sched.schedule_decodes() {
            Ok(Some(step)) => step,
            Ok(None) => return Ok(false),
            Err(CoreError::OutOfMemory { what }) => return Err(SimError::OutOfMemory { what }),
            Err(_) => return Ok(true), // nothing planned, as `start` leaves a refused plan
        };
        let num_blocks = replica.sched.config().num_blocks;
        replica.chunks.clear();
        let shape = StepShape {
            decode_tokens: step.decodes as u64,
            decode_context_tokens: step.context_tokens,
            ..StepShape::default()
        };
        let duration = self.engine.step_time(&shape);
        let used = (num_blocks - step.free_blocks) as u64;
        self.fleet_used = self.fleet_used - replica.held + used;
        replica.held = used;
        replica.flight = Some(Flight {
            step_index: step.step_index,
            end: self.now + duration,
            duration,
            used,
            decodes: Some(step.decodes),
        });
        self.started += 1;
        Ok(true)
    }

    /// Complete replica `r`'s step in flight: record it, sample its tokens, report it back.
    pub(super) fn complete(&mut self, r: usize) {
        let replica = &mut self.replicas[r];
        let Some(flight) = replica.flight.take() else {
            return;
        };
        if let Some(decodes) = flight.decodes {
            self.complete_decodes(r, flight, decodes);
            return;
        }
        let replica = &mut self.replicas[r];
        let Some(batch) = replica.sched.pending_batch() else {
            return;
        };
        let out = &mut self.out;
        let end = flight.end;
        out.kv(flight.used, self.fleet_used, flight.duration, end);
        out.steps += 1;
        out.prefill_tokens += batch.num_prefill_tokens() as u64;
        out.decode_tokens += batch.num_decode_tokens() as u64;
        let wl = self.workload;
        for &id in batch.preempted() {
            let i = id as usize;
            replica.load += outstanding(wl.prompt_tokens[i], 0, 0, 0);
            replica.load -= outstanding(wl.prompt_tokens[i], 0, self.tracks[i].computed, 0);
            self.tracks[i].computed = 0;
        }
        for &(i, now) in &replica.chunks {
            replica.load -= outstanding(wl.prompt_tokens[i], 0, self.tracks[i].computed, 0);
            replica.load += outstanding(wl.prompt_tokens[i], 0, now, 0);
            self.tracks[i].computed = now;
        }
        let step = replica.gaps.completed;
        self.sampled.clear();
        let plan = &wl.tokens;
        if !plan.known.is_empty() {
            for &id in batch.sampling_ids() {
                let (i, prompt) = (id as usize, wl.prompt_tokens[id as usize]);
                let at = prompt + self.tracks[i].emitted_before(step);
                self.sampled.push(plan.output_token(i, at));
            }
        }
        let (decodes, listed) = record_samples(
            Sampled {
                decodes: batch.num_decode_tokens(),
                lean: batch.is_lean(),
                sampling_ids: batch.sampling_ids(),
                step,
                end,
                prompts: &wl.prompt_tokens,
            },
            Recorder {
                replica_gaps: &mut replica.gaps,
                replica_silent: &mut replica.silent,
                chunks: &replica.chunks,
                sched: &replica.sched,
            },
            &mut self.tracks,
            &mut self.silent_now,
            &mut self.gaps,
            out,
        );
        // One outstanding token less per token sampled.
        let sampled = decodes + batch.sampling_ids().len() - listed;
        replica.load -= sampled as u128;
        let ids = if plan.known.is_empty() {
            TokenIds::None
        } else {
            TokenIds::Aligned(&self.sampled)
        };
        if let Ok(finished) = replica.sched.update_step(flight.step_index, ids, &[]) {
            let at = (step, end);
            self.done += record_finished(finished, &replica.gaps, at, &mut self.tracks, out);
        }
        replica.close_step(step, end, &mut self.fleet_used);
    }

    /// Complete replica `r`'s decode-only step in flight (as [`complete`](Self::complete)
    /// a lean batch of `decodes` alone).
    fn complete_decodes(&mut self, r: usize, flight: Flight, decodes: usize) {
        let replica = &mut self.replicas[r];
        let out = &mut self.out;
        let end = flight.end;
        out.kv(flight.used, self.fleet_used, flight.duration, end);
        out.steps += 1;
        out.decode_tokens += decodes as u64;
        let step = replica.gaps.completed;
        record_samples(
            Sampled {
                decodes,
                lean: true,
                sampling_ids: &[],
                step,
                end,
                prompts: &self.workload.prompt_tokens,
            },
            Recorder {
                replica_gaps: &mut replica.gaps,
                replica_silent: &mut replica.silent,
                chunks: &replica.chunks,
                sched: &replica.sched,
            },
            &mut self.tracks,
            &mut self.silent_now,
            &mut self.gaps,
            out,
        );
        replica.load -= decodes as u128; // a token sampled by each
        let finished = replica.sched.update_decodes();
        let at = (step, end);
        self.done += record_finished(finished, &replica.gaps, at, &mut self.tracks, out);
        replica.close_step(step, end, &mut self.fleet_used);
    }
}
