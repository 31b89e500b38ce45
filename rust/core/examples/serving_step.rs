//! The workload of `benches/bench_serving.py::test_serving_step` without Python, for
//! profilers (`valgrind --tool=callgrind`, `perf`): 256 decoding requests, 1 000 waiting
//! 2 000-token prompts sharing a 1 000-token prefix, prefix caching on.
//!
//! `cargo run --release --example serving_step -- [rounds] [decodes] [steps]`: runs `rounds`
//! rounds of `steps` steps (20 by default), each from a copy of the same prepared scheduler with
//! `decodes` decoding requests (256 by default), and prints the mean time per step.

use std::time::Instant;

use chunked_prefill::{Prompt, ServingConfig, ServingScheduler, TokenIds};

#[inline(never)]
fn step(scheduler: &mut ServingScheduler, tokens: &mut Vec<u32>) -> Result<(), String> {
    let batch = scheduler.schedule_shared().map_err(|e| e.to_string())?;
    tokens.clear();
    tokens.resize(batch.num_sampling(), 7);
    scheduler
        .update(&batch, TokenIds::Aligned(tokens), &[])
        .map_err(|e| e.to_string())?;
    Ok(())
}

fn prepared(decodes: u64) -> Result<ServingScheduler, String> {
    let config = ServingConfig {
        num_blocks: 65536,
        token_budget: 2048.max(decodes as usize + 512),
        chunk_size: 512,
        max_running: 512.max(decodes as usize),
        ..ServingConfig::new(65536)
    };
    let mut scheduler = ServingScheduler::new(config).map_err(|e| e.to_string())?;
    for i in 0..decodes {
        let prompt = Prompt::Tokens(vec![(i % 7) as u32; 32]);
        (scheduler.add_request(i, prompt, 10_000, 0, 0)).map_err(|e| e.to_string())?;
    }
    let mut tokens = Vec::new();
    while (0..decodes).any(|i| scheduler.request(i).is_ok_and(|r| r.num_computed < 32)) {
        step(&mut scheduler, &mut tokens)?;
    }
    let prefix: Vec<u32> = (1000..2000).collect();
    for i in 0..1000u32 {
        let mut prompt = prefix.clone();
        prompt.extend(std::iter::repeat_n(i, 1000));
        let id = 100_000 + u64::from(i);
        (scheduler.add_request(id, Prompt::Tokens(prompt), 64, 0, 0)).map_err(|e| e.to_string())?;
    }
    Ok(scheduler)
}

fn main() -> Result<(), String> {
    let rounds: usize = match std::env::args().nth(1) {
        Some(arg) => arg.parse().map_err(|_| format!("not a count: {arg}"))?,
        None => 50,
    };
    let decodes: u64 = match std::env::args().nth(2) {
        Some(arg) => arg.parse().map_err(|_| format!("not a count: {arg}"))?,
        None => 256,
    };
    let steps: usize = match std::env::args().nth(3) {
        Some(arg) => arg.parse().map_err(|_| format!("not a count: {arg}"))?,
        None => 20,
    };
    let prepared = prepared(decodes)?;
    let mut tokens = Vec::new();
    let mut best = f64::INFINITY;
    for _ in 0..rounds {
        let mut scheduler = prepared.clone();
        let start = Instant::now();
        for _ in 0..steps {
            step(&mut scheduler, &mut tokens)?;
        }
        best = best.min(start.elapsed().as_secs_f64() / steps as f64);
    }
    println!(
        "best mean per step over {rounds} rounds: {:.1} us",
        best * 1e6
    );
    Ok(())
}
