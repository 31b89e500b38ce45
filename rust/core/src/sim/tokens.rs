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

use super::metrics::Outcome;

/// What the loop follows of one request.
#[derive(Clone, Copy, Default)]
pub(super) struct Track {
    /// Tokens sampled so far, up to its joining the decodes (see [`Track::emitted_before`]).
    pub(super) emitted: u64,
    /// When its last token was (as of its joining the decodes).
    pub(super) last: f64,
    /// Tokens computed, as far as the prompt goes (0 again after a preemption).
    pub(super) computed: u64,
    /// Its longest gap between two tokens so far (the outcome's, once it finishes).
    pub(super) max_gap: f64,
    /// It samples a token every step of its replica since step `joined`.
    pub(super) decoding: bool,
    pub(super) joined: u64,
    /// A chunk left it one token to compute without sampling: its next decode is recorded
    /// on its own.
    pub(super) silent: bool,
}

impl Track {
    /// Tokens it sampled before the step `step` of its replica.
    pub(super) fn emitted_before(&self, step: u64) -> u64 {
        if self.decoding {
            self.emitted + (step - 1 - self.joined)
        } else {
            self.emitted
        }
    }

    /// It sampled a token at `end` that is not part of a step's run: its first token or a
    /// gap of its own.
    pub(super) fn sampled(&mut self, end: f64, runs: &mut GapRun, out: &mut Outcome, i: usize) {
        if self.emitted == 0 {
            out.first_token[i] = end;
        } else {
            let gap = end - self.last;
            runs.add(gap, 1, out);
            if gap > self.max_gap {
                self.max_gap = gap;
            }
        }
        self.last = end;
        self.emitted += 1;
    }

    /// From step `step` (whose token it just sampled) on, it decodes every step.
    pub(super) fn join(&mut self, step: u64) {
        self.decoding = true;
        self.joined = step;
        self.silent = false;
    }

    /// It stops decoding after its replica's step `last_step` (ended at `last_end`): its
    /// count, last token and longest gap catch up.
    pub(super) fn stop(&mut self, gaps: &StepGaps, last_step: u64, last_end: f64) {
        if !self.decoding {
            return;
        }
        self.decoding = false;
        self.emitted += last_step - self.joined;
        self.last = last_end;
        let longest = gaps.max_after(self.joined);
        if longest > self.max_gap {
            self.max_gap = longest;
        }
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

/// The run of equal token gaps being counted: appended to the outcome's run-length coded
/// gaps when another gap ends it or the run ends.
#[derive(Clone, Copy, Default)]
pub(super) struct GapRun {
    value: f64,
    weight: u64,
}

impl GapRun {
    /// Count `weight` gaps of `gap`, appending the run it ends to `out`.
    pub(super) fn add(&mut self, gap: f64, weight: u64, out: &mut Outcome) {
        if self.weight > 0 && self.value == gap {
            self.weight += weight;
        } else {
            self.flush(out);
            *self = Self { value: gap, weight };
        }
    }

    /// Append the run so far to `out` (the outcome merges it with an equal last run, as
    /// one gap after another would).
    pub(super) fn flush(&mut self, out: &mut Outcome) {
        if self.weight == 0 {
            return;
        }
        match out.gaps.last_mut() {
            Some((last, weight)) if *last == self.value => *weight += self.weight,
            _ => out.gaps.push((self.value, self.weight)),
        }
        self.weight = 0;
    }
}
