//! [`EngineModel`]: how long one engine step takes, from the step's [`StepShape`].

/// What one step computes, as the step-time models read it: a few sums over the step's
/// prefill chunks and decoded requests. A model of another form (a roofline, say) reads the
/// same shape; new sums are added as fields here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StepShape {
    /// Prompt tokens computed in the step (`P`, the sum of the chunks' lengths).
    pub prefill_tokens: u64,
    /// Decode tokens in the step (`D`, one per decoded request).
    pub decode_tokens: u64,
    /// Causal (query, key) pairs of the prefill chunks, `Σ chunk_pairs(start, tokens)`.
    pub attention_pairs: u128,
    /// The decoded requests' context lengths, summed.
    pub decode_context_tokens: u128,
    /// The squares of the prefill chunks' lengths, summed (`Σ tokens²`).
    pub prefill_chunk_sq: u128,
    /// Prefill chunks (one per request given prompt tokens; the roofline's LM-head rows).
    pub prefill_chunks: u64,
}

impl StepShape {
    /// Adds a prefill chunk of `tokens` prompt tokens after `start` cached ones.
    pub fn add_chunk(&mut self, start: u128, tokens: u64) {
        let n = u128::from(tokens);
        self.prefill_tokens += tokens;
        self.attention_pairs += chunk_pairs(start, n);
        self.prefill_chunk_sq += n * n;
        self.prefill_chunks += 1;
    }

    /// Adds one decoded request whose context (prompt and generated tokens) is `context`.
    pub fn add_decode(&mut self, context: u128) {
        self.decode_tokens += 1;
        self.decode_context_tokens += context;
    }
}

/// The coefficients of the linear step-time model, in seconds (the fields of Python's
/// `chunked_prefill.sim.EngineModel`, which documents where the presets come from).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EngineModel {
    /// The floor of the token-proportional part: a step reads all weights once.
    pub t_min_s: f64,
    /// Fixed cost per step.
    pub c0_s: f64,
    /// Cost per token in the batch, prefill and decode alike.
    pub c_tok_s: f64,
    /// Cost per causal (query, key) pair of prefill attention.
    pub c_attn_s: f64,
    /// Cost per context token of a decode (reading its KV cache).
    pub c_kv_s: f64,
    /// Cost per squared token of each prefill chunk (`Σ tokens²`): the chunk's attention
    /// among its own tokens, which costs more per pair than attending to the cache.
    pub c_chunk_sq_s: f64,
}

impl EngineModel {
    /// `max(t_min, c0 + c_tok * (P + D)) + c_attn * pairs + c_kv * context +
    /// c_chunk_sq * Σ tokens²`, with the operations of `EngineModel.step_time` in Python in
    /// the same order (each integer is converted to the nearest float, as Python does), so
    /// both give the same bits.
    #[must_use]
    pub fn step_time(&self, shape: &StepShape) -> f64 {
        let tokens = u128::from(shape.prefill_tokens) + u128::from(shape.decode_tokens);
        let mut lin = self.c0_s + self.c_tok_s * to_f64(tokens);
        if lin < self.t_min_s {
            lin = self.t_min_s;
        }
        lin + self.c_attn_s * to_f64(shape.attention_pairs)
            + self.c_kv_s * to_f64(shape.decode_context_tokens)
            + self.c_chunk_sq_s * to_f64(shape.prefill_chunk_sq)
    }
}

/// `value` as the nearest float, as `value as f64`, by the 64-bit conversion when the value
/// fits (always, in practice): it is one instruction where the 128-bit one is a library call
/// (3 % of the simulator's loop).
#[must_use]
#[inline]
pub(crate) fn to_f64(value: u128) -> f64 {
    match u64::try_from(value) {
        Ok(small) => small as f64,
        Err(_) => wide_to_f64(value),
    }
}

/// Out of line, or the compiler sees that both paths of [`to_f64`] agree and makes them the
/// one library call.
#[cold]
#[inline(never)]
fn wide_to_f64(value: u128) -> f64 {
    value as f64
}

/// Causal (query, key) pairs of the positions `start..start + tokens`: each new token
/// attends to every earlier position and itself.
#[must_use]
pub fn chunk_pairs(start: u128, tokens: u128) -> u128 {
    tokens * start + tokens * (tokens + 1) / 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn to_f64_is_the_nearest_float_on_both_paths() {
        let edges = [
            0,
            1,
            (1 << 53) + 1,
            u128::from(u64::MAX),
            u128::from(u64::MAX) + 1,
        ];
        for value in edges.into_iter().chain([u128::MAX, (1 << 100) + 12_345]) {
            assert_eq!(to_f64(value).to_bits(), (value as f64).to_bits(), "{value}");
        }
    }

    #[test]
    fn step_time_adds_every_term() {
        let engine = EngineModel {
            t_min_s: 0.01,
            c0_s: 0.002,
            c_tok_s: 1e-4,
            c_attn_s: 1e-9,
            c_kv_s: 1e-6,
            c_chunk_sq_s: 1e-8,
        };
        let mut shape = StepShape::default();
        shape.add_chunk(100, 200); // pairs 200*100 + 200*201/2 = 40 100; squares 40 000
        shape.add_decode(1000);
        assert_eq!(shape.prefill_tokens, 200);
        assert_eq!(shape.attention_pairs, 40_100);
        assert_eq!(shape.prefill_chunk_sq, 40_000);
        // max(0.01, 0.002 + 1e-4 * 201) + 1e-9 * 40 100 + 1e-6 * 1000 + 1e-8 * 40 000
        let want: f64 = (0.002 + 1e-4 * 201.0) + 1e-9 * 40_100.0 + 1e-6 * 1000.0 + 1e-8 * 40_000.0;
        assert_eq!(engine.step_time(&shape).to_bits(), want.to_bits());
        assert!((engine.step_time(&shape) - 0.0235401).abs() < 1e-12);
    }

    #[test]
    fn an_empty_step_sits_on_the_floor() {
        let engine = EngineModel {
            t_min_s: 0.01,
            c0_s: 0.002,
            c_tok_s: 1e-4,
            c_attn_s: 1e-9,
            c_kv_s: 1e-6,
            c_chunk_sq_s: 1e-8,
        };
        assert_eq!(engine.step_time(&StepShape::default()), 0.01);
    }
}
