//! What the simulation tests share: an engine whose every step lasts one second, and a
//! workload from plain columns.

use chunked_prefill::sim::{EngineModel, Workload};

/// Every step lasts exactly one second.
pub const ONE_SECOND: EngineModel = EngineModel {
    t_min_s: 1.0,
    c0_s: 0.0,
    c_tok_s: 0.0,
    c_attn_s: 0.0,
    c_kv_s: 0.0,
    c_chunk_sq_s: 0.0,
};

/// Requests with these arrivals and lengths, no token ids (nothing shared).
pub fn plain(arrival_s: &[f64], prompt: &[u64], output: &[u64]) -> Workload {
    Workload {
        arrival_s: arrival_s.to_vec(),
        prompt_tokens: prompt.to_vec(),
        output_tokens: output.to_vec(),
        ..Workload::default()
    }
}
