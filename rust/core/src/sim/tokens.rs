//! What the loop records of each request's sampled tokens: its first token, the gaps between
//! its tokens, its longest gap, without visiting the decodes one by one.
//!
//! A decode that sampled in its replica's previous step samples again at the end of this
//! one, so its gap is this step's end minus the previous step's end: one value for all of
//! them, recorded as one run of that many gaps. Their longest gaps are taken when they stop
//! decoding (finish or preemption), as the largest step gap of their replica since they
//! began ([`StepGaps::max_after`]). The other sampled tokens (first tokens, a prompt's last
//! chunk, a decode after a chunk that left one token) are recorded one by one. Within a
//! step the run comes first, then the others in item order: the pure loop records them in
//! the same order, so the two give the same arrays.

use super::gap_runs::GapRun;
use super::metrics::Outcome;
use crate::serving::ServingScheduler;

/// What the loop follows of one request, 32 bytes of the run's memory per request. Its last
/// token's time and its longest gap so far live in the outcome's `finish` and `max_gap`,
/// which they become once it finishes.
#[derive(Clone, Copy)]
pub(super) struct Track {
    /// Tokens sampled so far, up to its joining the decodes (see [`Track::emitted_before`]).
    pub(super) emitted: u64,
    /// Tokens computed, as far as the prompt goes (0 again after a preemption).
    pub(super) computed: u64,
    /// It samples a token every step of its replica since step `joined` ([`NOT_DECODING`]
    /// when it does not).
    joined: u64,
    /// A chunk left it one token to compute without sampling: its next decode is recorded
    /// on its own.
    pub(super) silent: bool,
}

/// `Track::joined` of a request that is not decoding (no replica runs 2**64 - 1 steps).
const NOT_DECODING: u64 = u64::MAX;

impl Default for Track {
    fn default() -> Self {
        Self {
            emitted: 0,
            computed: 0,
            joined: NOT_DECODING,
            silent: false,
        }
    }
}

impl Track {
    /// Tokens it sampled before the step `step` of its replica.
    pub(super) fn emitted_before(&self, step: u64) -> u64 {
        if self.joined == NOT_DECODING {
            self.emitted
        } else {
            self.emitted + (step - 1 - self.joined)
        }
    }

    /// Request `i` sampled a token at `end` that is not part of a step's run: its first
    /// token or a gap of its own.
    pub(super) fn sampled(&mut self, end: f64, runs: &mut GapRun, out: &mut Outcome, i: usize) {
        if self.emitted == 0 {
            out.first_token[i] = end;
        } else {
            let gap = end - out.finish[i];
            runs.add(gap, 1);
            out.max_gap[i] = out.max_gap[i].max(gap);
        }
        out.finish[i] = end;
        self.emitted += 1;
    }

    /// From step `step` (whose token it just sampled) on, it decodes every step.
    pub(super) fn join(&mut self, step: u64) {
        self.joined = step;
        self.silent = false;
    }

    /// Request `i` stops decoding after its replica's step `last_step` (ended at
    /// `last_end`): its count, last token and longest gap catch up.
    pub(super) fn stop(
        &mut self,
        gaps: &StepGaps,
        last_step: u64,
        last_end: f64,
        out: &mut Outcome,
        i: usize,
    ) {
        if self.joined == NOT_DECODING {
            return;
        }
        self.emitted += last_step - self.joined;
        out.finish[i] = last_end;
        out.max_gap[i] = out.max_gap[i].max(gaps.max_after(self.joined));
        self.joined = NOT_DECODING;
    }
}

/// One replica's completed steps, as its decodes' gaps need them.
#[derive(Clone, Default)]
pub(super) struct StepGaps {
    /// Steps completed.
    pub(super) completed: u64,
    /// When the last one ended.
    pub(super) last_end: f64,
    /// `(step, gap)` of the steps that had a run, each gap larger than every later one (a
    /// step's gap hides the smaller ones before it): the largest gap after a step is the
    /// first entry after it.
    stack: Vec<(u64, f64)>,
}

impl StepGaps {
    /// Step `step` gave its decodes gap `gap`.
    pub(super) fn push(&mut self, step: u64, gap: f64) {
        while self.stack.last().is_some_and(|&(_, g)| g <= gap) {
            self.stack.pop();
        }
        self.stack.push((step, gap));
    }

    /// The largest gap of the steps after `step` (0 if none).
    pub(super) fn max_after(&self, step: u64) -> f64 {
        let at = self.stack.partition_point(|&(s, _)| s <= step);
        self.stack.get(at).map_or(0.0, |&(_, gap)| gap)
    }
}

/// What a completed step sampled.
pub(super) struct Sampled<'a> {
    /// The step's decode tokens, and whether its batch was lean (listed none of them).
    pub(super) decodes: usize,
    pub(super) lean: bool,
    /// The batch's sampling ids (the decodes' first unless lean, then the prefills').
    pub(super) sampling_ids: &'a [u64],
    /// The step's index on its replica, and when it ended.
    pub(super) step: u64,
    pub(super) end: f64,
    pub(super) prompts: &'a [u64],
}

/// The replica's parts that record it.
pub(super) struct Recorder<'a> {
    pub(super) replica_gaps: &'a mut StepGaps,
    pub(super) replica_silent: &'a mut Vec<usize>,
    pub(super) chunks: &'a [(usize, u64)],
    pub(super) sched: &'a ServingScheduler,
}

/// Record the tokens a completed step sampled (see `tokens.rs`): the run of the decodes that
/// sampled in the step before, then the others (this step's silent decodes, in rank order,
/// then the prefill items that sampled, in item order). Returns the step's decodes and how
/// many of them its batch lists.
pub(super) fn record_samples(
    s: Sampled<'_>,
    r: Recorder<'_>,
    tracks: &mut [Track],
    scratch: &mut Vec<usize>,
    runs: &mut GapRun,
    out: &mut Outcome,
) -> (usize, usize) {
    // This step's silent decodes: a chunk of the step before left them one token to compute
    // without sampling (unless preempted since). Rank order, as their items.
    scratch.clear();
    scratch.extend(r.replica_silent.drain(..).filter(|&i| tracks[i].silent));
    scratch.sort_by_key(|&i| r.sched.rank_of(i as u64));
    // This step's chunks that leave one token so: their decode is the next step's.
    for &(i, now) in r.chunks {
        let track = &mut tracks[i];
        if now + 1 == s.prompts[i] + track.emitted {
            track.silent = true;
            r.replica_silent.push(i);
        }
    }
    let decodes = s.decodes;
    let run = (decodes - scratch.len()) as u64;
    if run > 0 {
        let gap = s.end - r.replica_gaps.last_end;
        runs.add(gap, run);
        r.replica_gaps.push(s.step, gap);
    }
    let listed = if s.lean { 0 } else { decodes };
    let prefills = s.sampling_ids[listed..].iter().map(|&id| id as usize);
    for i in scratch.iter().copied().chain(prefills) {
        let track = &mut tracks[i];
        track.sampled(s.end, runs, out, i);
        track.join(s.step);
    }
    (decodes, listed)
}
