//! [`Outcome`]: what a run records, as plain arrays the caller summarises.

use std::collections::TryReserveError;

/// The most points of the KV-usage series before it is thinned (every other point dropped
/// and the recording stride doubled), so a run of any length keeps between
/// `KV_SERIES_CAP / 2` and `KV_SERIES_CAP` points.
pub const KV_SERIES_CAP: usize = 4096;

/// What one run recorded. Per-request arrays are in workload order; times in seconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// When the request first got an item (its first admission); arrival to this is its
    /// queueing time.
    pub admitted: Vec<f64>,
    /// When its first token was sampled (the end of that step).
    pub first_token: Vec<f64>,
    /// When its last token was sampled.
    pub finish: Vec<f64>,
    /// Its longest gap between two successive tokens (0 with one output token).
    pub max_gap: Vec<f64>,
    /// Prompt tokens found in the prefix cache at its first admission.
    pub cached_tokens: Vec<u64>,
    /// Times it was preempted.
    pub preemptions: Vec<u64>,
    /// Tokens computed again after it lost its blocks.
    pub recomputed_tokens: Vec<u64>,
    /// The replica the router sent it to (0 with one replica).
    pub replica: Vec<u64>,
    /// Token gaps, run-length coded: `(gap, count)`, the gap seen `count` times (the decodes
    /// of one step that sampled in the step before share one run); sorted by gap, equal gaps
    /// merged, once the run ends (see `GapRun` in `sim/gap_runs.rs`).
    pub gaps: Vec<(f64, u64)>,
    /// Engine steps run (steps that computed something).
    pub steps: u64,
    /// Prefill tokens computed, recomputation included.
    pub prefill_tokens: u64,
    /// Decode tokens computed.
    pub decode_tokens: u64,
    /// Sum over steps of the blocks in use times the step's duration.
    pub kv_block_seconds: f64,
    /// Sum of the step durations (the time the engine was busy).
    pub busy_s: f64,
    /// The most blocks in use after a step's allocation, on any one replica.
    pub kv_peak_blocks: u64,
    /// KV usage over time: the end of a step and the blocks in use in it, over the whole
    /// fleet (each other replica counted as of its own latest step), every `kv_stride`-th
    /// step (see [`KV_SERIES_CAP`]).
    pub kv_series_t: Vec<f64>,
    /// See `kv_series_t`.
    pub kv_series_blocks: Vec<u64>,
    /// Steps between two points of the KV series.
    pub kv_stride: u64,
}

impl Outcome {
    /// Empty records for `n` requests. The columns of zeros take memory only where the
    /// run writes them, and it writes no zero.
    ///
    /// # Errors
    ///
    /// When they do not fit in memory (`n` comes from the caller's workload).
    pub fn try_new(n: usize) -> Result<Self, TryReserveError> {
        Ok(Self {
            admitted: filled(n, f64::NAN)?,
            first_token: filled(n, f64::NAN)?,
            finish: filled(n, f64::NAN)?,
            max_gap: zeros(n)?,
            cached_tokens: zeros(n)?,
            preemptions: zeros(n)?,
            recomputed_tokens: zeros(n)?,
            replica: zeros(n)?,
            kv_stride: 1,
            ..Self::default()
        })
    }

    /// The KV figures of the step just run: `used` blocks of its replica held for
    /// `duration`, ending at `end`, when the fleet holds `fleet_used` blocks (`used` with
    /// one replica).
    pub fn kv(&mut self, used: u64, fleet_used: u64, duration: f64, end: f64) {
        self.kv_block_seconds += used as f64 * duration;
        self.busy_s += duration;
        if used > self.kv_peak_blocks {
            self.kv_peak_blocks = used;
        }
        // The stride is a power of two: a mask, not a division per step.
        if self.steps & (self.kv_stride - 1) == 0 {
            if self.kv_series_t.len() == KV_SERIES_CAP {
                halve(&mut self.kv_series_t);
                halve(&mut self.kv_series_blocks);
                self.kv_stride *= 2;
            }
            if self.steps & (self.kv_stride - 1) == 0 {
                self.kv_series_t.push(end);
                self.kv_series_blocks.push(fleet_used);
            }
        }
    }
}

/// `n` copies of `value`, or the allocation's failure.
fn filled<T: Clone>(n: usize, value: T) -> Result<Vec<T>, TryReserveError> {
    let mut values = Vec::new();
    values.try_reserve_exact(n)?;
    values.resize(n, value);
    Ok(values)
}

/// `n` zeros, or the allocation's failure. `vec!` takes numbers' zeros from the allocator's
/// zeroed memory (`calloc`), which the system maps only where a value is written: the counts
/// most runs leave at 0 (preemptions, replicas of a single engine) then take no memory.
fn zeros<T: Clone + Default>(n: usize) -> Result<Vec<T>, TryReserveError> {
    // The same size asked fallibly first, then released: `vec!` would abort instead.
    Vec::<T>::new().try_reserve_exact(n)?;
    Ok(vec![T::default(); n])
}

/// Keep the points at even positions.
fn halve<T>(points: &mut Vec<T>) {
    let mut at = 0;
    points.retain(|_| {
        at += 1;
        at % 2 == 1
    });
}
