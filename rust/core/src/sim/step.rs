//! [`StepShape`] (what a step computes) and [`StepModel`] (how long that takes: the linear
//! model or the roofline).

use super::engine::EngineModel;
use super::roofline::Roofline;

/// What one step computes, as the step-time models see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StepShape {
    /// Prompt tokens computed.
    pub prefill_tokens: u64,
    /// Decode tokens (one per decoding request).
    pub decode_tokens: u64,
    /// Prefill chunks (one per request given prompt tokens).
    pub prefill_chunks: u64,
    /// Causal (query, key) pairs of the chunks.
    pub attention_pairs: u128,
    /// The decoding requests' context lengths, summed.
    pub decode_context_tokens: u128,
    /// The squares of the chunks' lengths, summed.
    pub prefill_chunk_sq: u128,
}

/// The engine's step-time model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StepModel {
    /// Coefficients fitted to measured steps (`EngineModel`).
    Linear(EngineModel),
    /// Derived from the model's architecture and the GPU's datasheet.
    Roofline(Roofline),
}

impl StepModel {
    /// The modelled duration of a step of `shape`, in seconds.
    #[must_use]
    pub fn step_time(&self, shape: &StepShape) -> f64 {
        match self {
            Self::Linear(m) => m.step_time(
                shape.prefill_tokens,
                shape.decode_tokens,
                shape.attention_pairs,
                shape.decode_context_tokens,
            ),
            Self::Roofline(r) => r.step_time(shape),
        }
    }
}
