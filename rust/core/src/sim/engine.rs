//! [`EngineModel`]: how long one engine step takes.

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
}

impl EngineModel {
    /// `max(t_min, c0 + c_tok * (prefill + decode)) + c_attn * pairs + c_kv * context`, with
    /// the operations of `EngineModel.step_time` in Python in the same order (each integer is
    /// converted to the nearest float, as Python does), so both give the same bits.
    #[must_use]
    pub fn step_time(
        &self,
        prefill_tokens: u64,
        decode_tokens: u64,
        attention_pairs: u128,
        decode_context_tokens: u128,
    ) -> f64 {
        let tokens = u128::from(prefill_tokens) + u128::from(decode_tokens);
        let mut lin = self.c0_s + self.c_tok_s * tokens as f64;
        if lin < self.t_min_s {
            lin = self.t_min_s;
        }
        lin + self.c_attn_s * attention_pairs as f64 + self.c_kv_s * decode_context_tokens as f64
    }
}

/// Causal (query, key) pairs of the positions `start..start + tokens`: each new token
/// attends to every earlier position and itself.
#[must_use]
pub fn chunk_pairs(start: u128, tokens: u128) -> u128 {
    tokens * start + tokens * (tokens + 1) / 2
}
