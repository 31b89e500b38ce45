//! [`Roofline`]: a step's duration from the model's architecture and the GPU's datasheet.
//!
//! The coefficients are derived in Python (`chunked_prefill.sim.roofline.RooflineModel.build`,
//! which documents each one and `docs/engines.md` its sources); here is only the formula, with
//! the float operations of `RooflineModel.step_time` in the same order so both give the same
//! bits.

use super::engine::{to_f64, StepShape};

/// The coefficients of the roofline model of one model on one tensor-parallel group of GPUs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Roofline {
    /// The GPU's fixed time per step (each layer's small kernels).
    pub overhead_s: f64,
    /// Linear-layer GEMM time per token, at the GEMMs' full efficiency.
    pub token_s: f64,
    /// What the GEMMs' lower efficiency at few tokens adds to the compute branch: their time
    /// is `token_s * (N + half)`, `half` the token count at which they reach half of it.
    pub gemm_fixed_s: f64,
    /// The same for each expert a MoE step touches (each expert's GEMM pads its own tokens).
    pub expert_fixed_s: f64,
    /// LM-head GEMM time per sampled row (one per decode token and per prefill chunk).
    pub head_row_s: f64,
    /// Time to read the weights every step reads (all but the experts).
    pub dense_read_s: f64,
    /// Time to read one expert's weights in every layer (MoE).
    pub expert_read_s: f64,
    /// Experts per layer, `E` (0 for a dense model).
    pub experts: f64,
    /// `1 - k/E`: the chance one token's routing misses a given expert.
    pub expert_miss: f64,
    /// Prefill attention time per causal (query, key) pair.
    pub pair_s: f64,
    /// Extra cost per squared token of each prefill chunk (its attention among its own
    /// tokens).
    pub chunk_sq_s: f64,
    /// Decode attention time per context token (reading its K and V).
    pub kv_token_s: f64,
    /// All-reduce latency per step.
    pub allreduce_call_s: f64,
    /// All-reduce transfer time per token of the step.
    pub allreduce_token_s: f64,
    /// The CPU time to launch the step's kernels one by one (eager mode): the step lasts at
    /// least this long, as the GPU waits for the launches when its kernels are shorter.
    pub launch_s: f64,
    /// The serving engine's CPU time per step that does not overlap the GPU (scheduling,
    /// input preparation, output processing).
    pub cpu_step_s: f64,
    /// The serving engine's CPU time per sequence of the step (one per decode and per
    /// prefill chunk).
    pub seq_s: f64,
    /// The sliding window of the windowed layers, `W` tokens (0: none; `pair_s` and
    /// `kv_token_s` are then the other layers').
    pub window_tokens: f64,
    /// Prefill attention time per (query, key) pair of the windowed layers, up to `W` keys
    /// a query.
    pub window_pair_s: f64,
    /// Decode attention time per context token of the windowed layers, up to `W` a
    /// sequence.
    pub window_kv_token_s: f64,
    /// The decode sequences at which the KV reads run at half their rate: `D` sequences
    /// take `1 + kv_half_seqs / D` times their full-rate time (too few thread blocks to keep
    /// the GPU's memory busy; 0: no such loss).
    pub kv_half_seqs: f64,
}

/// `base` to the power `n` by repeated squaring (as Python's `pow_int`: a libm `pow` might
/// differ between the two by an ulp).
#[must_use]
pub fn pow_int(base: f64, mut n: u128) -> f64 {
    let mut result = 1.0;
    let mut b = base;
    while n != 0 {
        if n & 1 == 1 {
            result *= b;
        }
        b *= b;
        n >>= 1;
    }
    result
}

impl Roofline {
    /// Expected distinct experts `tokens` tokens route to, each picking `k` of `E`
    /// uniformly: `E * (1 - (1 - k/E)^tokens)`.
    #[must_use]
    pub fn experts_touched(&self, tokens: u128) -> f64 {
        self.experts * (1.0 - pow_int(self.expert_miss, tokens))
    }

    /// `min(total, W * count)`: the step's sum of keys with each of its `count` queries (or
    /// sequences) capped at the window `W`, at most (`total` without a window); as
    /// `RooflineModel._capped` in Python.
    #[must_use]
    fn capped(&self, total: u128, count: u64) -> f64 {
        let value = to_f64(total);
        if self.window_tokens == 0.0 {
            return value;
        }
        let cap = self.window_tokens * to_f64(u128::from(count));
        if value < cap {
            value
        } else {
            cap
        }
    }

    /// `max(GPU time, kernel launches) + CPU per step + CPU per sequence`, the GPU time
    /// `overhead + max(compute, weight reads) + prefill attention + chunks + decode KV reads
    /// + all-reduces`, as `RooflineModel.step_time` in Python.
    #[must_use]
    pub fn step_time(&self, shape: &StepShape) -> f64 {
        let n = u128::from(shape.prefill_tokens) + u128::from(shape.decode_tokens);
        let rows = u128::from(shape.decode_tokens) + u128::from(shape.prefill_chunks);
        let mut compute =
            self.token_s * to_f64(n) + self.gemm_fixed_s + self.head_row_s * to_f64(rows);
        let mut memory = self.dense_read_s;
        if self.experts > 0.0 {
            let touched = self.experts_touched(n);
            compute += self.expert_fixed_s * touched;
            memory += self.expert_read_s * touched;
        }
        let mut gpu = self.overhead_s + if compute > memory { compute } else { memory };
        gpu += self.pair_s * to_f64(shape.attention_pairs);
        gpu += self.window_pair_s * self.capped(shape.attention_pairs, shape.prefill_tokens);
        gpu += self.chunk_sq_s * to_f64(shape.prefill_chunk_sq);
        let reads = self.kv_token_s * to_f64(shape.decode_context_tokens);
        let window_reads =
            self.window_kv_token_s * self.capped(shape.decode_context_tokens, shape.decode_tokens);
        gpu += reads;
        gpu += window_reads;
        if self.kv_half_seqs > 0.0 && shape.decode_tokens > 0 {
            gpu += (reads + window_reads)
                * (self.kv_half_seqs / to_f64(u128::from(shape.decode_tokens)));
        }
        gpu += self.allreduce_call_s + self.allreduce_token_s * to_f64(n);
        let mut t = if gpu > self.launch_s {
            gpu
        } else {
            self.launch_s
        };
        t += self.cpu_step_s + self.seq_s * to_f64(rows);
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every coefficient 0: each test sets the ones it reads.
    const ZERO: Roofline = Roofline {
        overhead_s: 0.0,
        token_s: 0.0,
        gemm_fixed_s: 0.0,
        expert_fixed_s: 0.0,
        head_row_s: 0.0,
        dense_read_s: 0.0,
        expert_read_s: 0.0,
        experts: 0.0,
        expert_miss: 0.0,
        pair_s: 0.0,
        chunk_sq_s: 0.0,
        kv_token_s: 0.0,
        allreduce_call_s: 0.0,
        allreduce_token_s: 0.0,
        launch_s: 0.0,
        cpu_step_s: 0.0,
        seq_s: 0.0,
        window_tokens: 0.0,
        window_pair_s: 0.0,
        window_kv_token_s: 0.0,
        kv_half_seqs: 0.0,
    };

    #[test]
    fn pow_int_squares() {
        assert_eq!(pow_int(0.75, 0), 1.0);
        assert_eq!(pow_int(0.75, 1), 0.75);
        assert_eq!(pow_int(0.5, 10), 1.0 / 1024.0);
    }

    #[test]
    fn moe_touches_k_experts_for_one_token_and_at_most_all() {
        let r = Roofline {
            dense_read_s: 1.0,
            expert_read_s: 1.0,
            experts: 8.0,
            expert_miss: 0.75,
            ..ZERO
        };
        assert_eq!(r.experts_touched(1), 2.0);
        assert_eq!(r.experts_touched(100_000), 8.0);
        let one = StepShape {
            decode_tokens: 1,
            ..StepShape::default()
        };
        assert_eq!(r.step_time(&one), 3.0);
    }

    #[test]
    fn launches_bound_a_short_step_and_cpu_adds() {
        let r = Roofline {
            overhead_s: 1.0,
            dense_read_s: 2.0,
            launch_s: 5.0,
            cpu_step_s: 0.5,
            seq_s: 0.25,
            ..ZERO
        };
        let two = StepShape {
            decode_tokens: 2,
            ..StepShape::default()
        };
        // The GPU's 3 s hide behind 5 s of launches; the CPU adds 0.5 + 2 x 0.25.
        assert_eq!(r.step_time(&two), 6.0);
        let fast = Roofline { launch_s: 0.0, ..r };
        assert_eq!(fast.step_time(&two), 4.0);
    }

    #[test]
    fn few_decodes_read_slower() {
        let r = Roofline {
            kv_token_s: 2.0,
            window_tokens: 100.0,
            window_kv_token_s: 20.0,
            kv_half_seqs: 3.0,
            ..ZERO
        };
        // One decode of 40 tokens: (2 x 40 + 20 x 40) x (1 + 3 / 1).
        let one = StepShape {
            decode_tokens: 1,
            decode_context_tokens: 40,
            ..StepShape::default()
        };
        assert_eq!(r.step_time(&one), 880.0 * 4.0);
        // Three decodes of 40 tokens each: at half the rate, twice the full-rate time.
        let three = StepShape {
            decode_tokens: 3,
            decode_context_tokens: 120,
            ..StepShape::default()
        };
        assert_eq!(r.step_time(&three), (2.0 * 120.0 + 20.0 * 120.0) * 2.0);
        // A prefill reads no KV cache of decodes: nothing to slow down.
        let prefill = StepShape {
            prefill_tokens: 4,
            prefill_chunks: 1,
            ..StepShape::default()
        };
        assert_eq!(r.step_time(&prefill), 0.0);
    }

    #[test]
    fn windowed_layers_read_at_most_the_window() {
        let r = Roofline {
            pair_s: 1.0,
            kv_token_s: 2.0,
            window_tokens: 100.0,
            window_pair_s: 10.0,
            window_kv_token_s: 20.0,
            ..ZERO
        };
        // Two decodes of 30 and 250 tokens: the full layer reads 280, the windowed ones
        // min(280, 2 x 100) = 200.
        let decodes = StepShape {
            decode_tokens: 2,
            decode_context_tokens: 280,
            ..StepShape::default()
        };
        assert_eq!(r.step_time(&decodes), 2.0 * 280.0 + 20.0 * 200.0);
        // Below the window nothing is capped: 4 tokens from the start pair 10 times.
        let short = StepShape {
            prefill_tokens: 4,
            attention_pairs: 10,
            prefill_chunks: 1,
            ..StepShape::default()
        };
        assert_eq!(r.step_time(&short), 10.0 + 10.0 * 10.0);
        let none = Roofline {
            window_tokens: 0.0,
            ..r
        };
        assert_eq!(none.step_time(&decodes), 2.0 * 280.0 + 20.0 * 280.0);
    }
}
