//! A simulation run without Python, for profilers (`valgrind --tool=callgrind`, `perf`):
//! the workload of a file of little-endian words (count, then arrivals as f64, prompt and
//! output lengths as u64), through the serving scheduler's defaults and the
//! llama2-7b-a100 linear engine.
//!
//! `cargo run --release --example sim_run -- FILE [NUM_BLOCKS]`; write FILE from Python:
//! `n.tobytes()` then the three arrays' `tobytes()` of `default_workload(n)`.

use std::time::Instant;

use chunked_prefill::sim::{run, EngineModel, SimOptions, StepModel, Workload};
use chunked_prefill::ServingConfig;

fn words(bytes: &[u8]) -> impl Iterator<Item = [u8; 8]> + '_ {
    bytes.chunks_exact(8).map(|c| {
        let mut w = [0; 8];
        w.copy_from_slice(c);
        w
    })
}

fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: sim_run FILE [NUM_BLOCKS]")?;
    let num_blocks: usize = match args.next() {
        Some(arg) => arg.parse().map_err(|_| format!("not a count: {arg}"))?,
        None => 7353,
    };
    let bytes = std::fs::read(&path).map_err(|e| format!("{path}: {e}"))?;
    let mut all = words(&bytes);
    let n = all.next().map(u64::from_le_bytes).ok_or("empty file")? as usize;
    let workload = Workload {
        arrival_s: all.by_ref().take(n).map(f64::from_le_bytes).collect(),
        prompt_tokens: all.by_ref().take(n).map(u64::from_le_bytes).collect(),
        output_tokens: all.by_ref().take(n).map(u64::from_le_bytes).collect(),
        ..Workload::default()
    };
    let options = SimOptions {
        config: ServingConfig::new(num_blocks),
        engine: StepModel::Linear(EngineModel {
            t_min_s: 9.8e-3,
            c0_s: 7.4e-3,
            c_tok_s: 57.5e-6,
            c_attn_s: 2.7e-9,
            c_kv_s: 0.31e-6,
            c_chunk_sq_s: 6.5e-9,
        }),
        max_steps: u64::MAX,
    };
    let start = Instant::now();
    let outcome = run(&workload, &options).map_err(|e| e.to_string())?;
    println!(
        "{n} requests, {} steps, {} decode tokens in {:.3} s",
        outcome.steps,
        outcome.decode_tokens,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
