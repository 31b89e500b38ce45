//! [`GapRun`]: every token gap the loop counted, as `(gap, count)` runs, put in order on a
//! second thread while the loop goes on.
//!
//! The loop adds one run a step (its decodes' common gap) and one per token sampled on its
//! own: millions of runs in a long run, but far fewer distinct gaps. Sorting them and
//! merging equal gaps was about a thirteenth of the loop's instructions; it needs nothing
//! of the loop but the runs, so full batches of runs go to a compactor thread, which keeps
//! them in canonical form (sorted by gap, equal gaps merged). The result is that form
//! whatever the threads' timing: the same arrays as the pure loop's, as before.

use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

/// Runs in a batch handed to the compactor (a quarter of a megabyte): large enough that
/// the handing over costs nothing per step, small enough that a short run never starts
/// the thread.
const BATCH: usize = 1 << 14;

/// Full batches that may wait for the compactor (two megabytes).
const QUEUED: usize = 8;

/// The token gaps counted so far: the run of equal gaps being counted, the batch of runs
/// not yet handed over, and the compactor that holds the others.
#[derive(Default)]
pub(super) struct GapRun {
    value: f64,
    weight: u64,
    batch: Vec<(f64, u64)>,
    compactor: Option<Compactor>,
}

impl GapRun {
    /// Count `weight` gaps of `gap`.
    pub(super) fn add(&mut self, gap: f64, weight: u64) {
        debug_assert!(gap >= 0.0, "a gap of {gap} s");
        if self.weight > 0 && self.value == gap {
            self.weight += weight;
        } else {
            self.flush();
            (self.value, self.weight) = (gap, weight);
        }
    }

    /// Append the run so far, handing a full batch over first.
    fn flush(&mut self) {
        if self.weight == 0 {
            return;
        }
        if self.batch.len() == BATCH {
            let full = std::mem::take(&mut self.batch);
            let compactor = self.compactor.get_or_insert_with(Compactor::start);
            self.batch = compactor.hand_over(full);
        }
        self.batch.push((self.value, self.weight));
        self.weight = 0;
    }

    /// Every gap counted, as the outcome keeps them: `(gap, count)` sorted by gap, equal
    /// gaps merged.
    pub(super) fn finish(mut self) -> Vec<(f64, u64)> {
        self.flush();
        let last = std::mem::take(&mut self.batch);
        // The last batch goes the way of the others: the thread's last compaction takes it,
        // rather than a second one here while the loop waits (2 ms in 100 000 requests).
        let mut runs = match self.compactor.take() {
            Some(compactor) => compactor.finish_with(last),
            None => Runs::from(last),
        };
        if runs.new_runs() > 0 {
            runs.compact(); // taken in place (no thread)
        }
        runs.runs.shrink_to_fit();
        runs.runs
    }
}

/// The compactor thread and the two queues to it: full batches one way, emptied batches
/// back (reused, so that a long run allocates a handful). Without a thread (the system
/// refused one) the batches are taken in place instead.
struct Compactor {
    to: Option<SyncSender<Vec<(f64, u64)>>>,
    back: Receiver<Vec<(f64, u64)>>,
    thread: Option<JoinHandle<Runs>>,
    /// The runs when there is no thread.
    inline: Runs,
}

impl Compactor {
    fn start() -> Self {
        // Up to QUEUED batches wait while one is taken: the compactor shares its core with
        // whatever else runs (numpy's import while `simulate` runs the loop, a batch every
        // few milliseconds), and falls behind for a while; the loop is held back (rather than
        // memory grown) only past that. One queued batch cost `simulate` 15-30 ms so.
        let (to, batches) = sync_channel::<Vec<(f64, u64)>>(QUEUED);
        let (give_back, back) = sync_channel(QUEUED + 1);
        let thread = std::thread::Builder::new()
            .name("gap compactor".into())
            .spawn(move || {
                let mut runs = Runs::default();
                for mut batch in batches {
                    runs.take(&mut batch);
                    let _ = give_back.try_send(batch);
                    // Ahead of need, so that little is left to sort when the loop ends and
                    // waits for the result: a merge costs the canonical runs, so one per
                    // quarter of them added keeps it a few passes per run.
                    if runs.new_runs() * 4 >= runs.canonical {
                        runs.compact();
                    }
                }
                runs.compact();
                runs
            });
        Self {
            to: thread.is_ok().then_some(to),
            back,
            thread: thread.ok(),
            inline: Runs::default(),
        }
    }

    /// Hand `full` over; returns an empty batch to fill next.
    fn hand_over(&mut self, mut full: Vec<(f64, u64)>) -> Vec<(f64, u64)> {
        if let Some(to) = &self.to {
            match to.send(full) {
                Ok(()) => {
                    let emptied = self.back.try_recv();
                    return emptied.unwrap_or_else(|_| Vec::with_capacity(BATCH));
                }
                // The thread is gone (it panicked): its panic is raised by `finish`.
                Err(returned) => full = returned.0,
            }
        }
        self.inline.take(&mut full);
        full
    }

    /// The runs of every batch handed over and of `last`.
    fn finish_with(mut self, last: Vec<(f64, u64)>) -> Runs {
        if !last.is_empty() {
            let _ = self.hand_over(last);
        }
        self.to = None; // ends the thread's loop
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(runs)) => runs,
            Some(Err(panic)) => std::panic::resume_unwind(panic),
            None => std::mem::take(&mut self.inline),
        }
    }
}

/// The runs as the compactor holds them: millions over a long run, but far fewer distinct
/// gaps. When the list is full it is put in canonical form (sorted, equal gaps merged)
/// before it may grow, so it holds a few times the distinct gaps (at a million requests
/// 80 MB instead of 134, and each run is sorted once either way).
#[derive(Default)]
struct Runs {
    runs: Vec<(f64, u64)>,
    /// `runs[..canonical]` is in canonical form.
    canonical: usize,
}

/// Runs below which the list simply grows.
const COMPACT_FROM: usize = 1 << 12;

impl From<Vec<(f64, u64)>> for Runs {
    /// `runs`, not yet in canonical form.
    fn from(runs: Vec<(f64, u64)>) -> Self {
        Self {
            runs,
            ..Self::default()
        }
    }
}

impl Runs {
    /// Runs added since the list was last put in canonical form.
    fn new_runs(&self) -> usize {
        self.runs.len() - self.canonical
    }

    /// Append the runs of `batch`, emptied.
    fn take(&mut self, batch: &mut Vec<(f64, u64)>) {
        for run in batch.drain(..) {
            if self.runs.len() == self.runs.capacity() && self.runs.len() >= COMPACT_FROM {
                self.compact();
                // Grow once it stays over three quarters full: compacting again soon
                // would sort little for a whole merge.
                if self.runs.len() * 4 > self.runs.capacity() * 3 {
                    self.runs.reserve(self.runs.len());
                }
            }
            self.runs.push(run);
        }
    }

    /// Put the runs in canonical form: the new ones sorted, then merged with the canonical
    /// ones (the stable sort finds the two sorted halves and merges them in one pass).
    fn compact(&mut self) {
        // A gap is a positive duration, so its bits order as it does (and compare in fewer
        // instructions than `total_cmp`). The new runs, hundreds of thousands in a long
        // run, take a radix sort: a pass per byte in which their gaps differ (the
        // exponent's bytes are mostly shared), where a comparison sort takes about
        // log2(n) passes.
        let key = |run: &(f64, u64)| run.0.to_bits();
        radsort::sort_by_key(&mut self.runs[self.canonical..], key);
        self.runs.sort_by_key(key);
        self.runs.dedup_by(|later, kept| {
            let equal = later.0 == kept.0;
            if equal {
                kept.1 += later.1;
            }
            equal
        });
        self.canonical = self.runs.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs of gaps drawn from `distinct` values in a scrambled order, as `(gap, weight)`.
    fn scrambled(count: u64, distinct: u64) -> Vec<(f64, u64)> {
        (0..count)
            .map(|k| {
                let x = k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
                ((x % distinct) as f64 * 0.25, 1 + x % 3)
            })
            .collect()
    }

    fn sorted_merged(runs: &[(f64, u64)]) -> Vec<(f64, u64)> {
        let mut sorted = runs.to_vec();
        sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut expected: Vec<(f64, u64)> = Vec::new();
        for (gap, weight) in sorted {
            match expected.last_mut() {
                Some(last) if last.0 == gap => last.1 += weight,
                _ => expected.push((gap, weight)),
            }
        }
        expected
    }

    #[test]
    fn counted_runs_are_the_sorted_merged_runs() {
        // Below one batch (no thread), a batch and a bit, many batches.
        for (count, distinct) in [(10, 4), (50_000, 1_000), (50_000, 30_000), (200_000, 9_000)] {
            let runs = scrambled(count, distinct);
            let mut counted = GapRun::default();
            for &(gap, weight) in &runs {
                counted.add(gap, weight);
            }
            let started = counted.compactor.is_some();
            assert_eq!(started, count as usize > BATCH, "{count} runs");
            assert_eq!(
                counted.finish(),
                sorted_merged(&runs),
                "{count} runs of {distinct} gaps"
            );
        }
    }

    #[test]
    fn the_runs_held_stay_near_the_distinct_gaps() {
        for (count, distinct) in [(50_000, 1_000), (200_000, 9_000), (200_000, 60_000)] {
            let runs = scrambled(count, distinct);
            let mut held = Runs::default();
            let mut largest = 0;
            for batch in runs.chunks(BATCH) {
                held.take(&mut batch.to_vec());
                largest = largest.max(held.runs.capacity());
            }
            // Never more than 8/3 of the distinct gaps (grown from three quarters full).
            let bound = (sorted_merged(&runs).len() * 8 / 3).max(COMPACT_FROM) + 1;
            assert!(
                largest <= bound,
                "{largest} runs held for {count} of {distinct} gaps"
            );
        }
    }

    #[test]
    fn without_a_thread_the_batches_merge_in_place() {
        let runs = scrambled(100_000, 5_000);
        let mut counted = GapRun::default();
        let (_, back) = sync_channel(1);
        // The state of a compactor whose thread the system refused.
        counted.compactor = Some(Compactor {
            to: None,
            back,
            thread: None,
            inline: Runs::default(),
        });
        for &(gap, weight) in &runs {
            counted.add(gap, weight);
        }
        assert_eq!(counted.finish(), sorted_merged(&runs));
    }
}
