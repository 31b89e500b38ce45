//! The simulation loop on hand-computable workloads.

#![allow(clippy::unwrap_used, clippy::float_cmp)]

use chunked_prefill::sim::{
    run, run_fleet_until, EngineModel, Fleet, Outcome, Roofline, SimError, SimOptions, StepModel,
    StepShape, TokenPlan, Workload, POLL_EVERY,
};
use chunked_prefill::ServingConfig;

mod common;
use common::{plain, ONE_SECOND};

fn config(num_blocks: usize, block_size: usize) -> ServingConfig {
    ServingConfig {
        block_size,
        token_budget: 1024,
        chunk_size: 1024,
        max_running: 8,
        ..ServingConfig::new(num_blocks)
    }
}

fn simulate(workload: &Workload, config: ServingConfig) -> Result<Outcome, SimError> {
    run(
        workload,
        &SimOptions {
            config,
            engine: StepModel::Linear(ONE_SECOND),
            max_steps: 1_000_000,
        },
    )
}

#[test]
fn step_time_is_the_python_formula() {
    let engine = EngineModel {
        t_min_s: 9.5e-3,
        c0_s: 2.2e-3,
        c_tok_s: 65e-6,
        c_attn_s: 2.5e-9,
        c_kv_s: 0.3e-6,
        c_chunk_sq_s: 6e-9,
    };
    // Below the floor: t_min; above it, the linear part.
    let decode = StepShape {
        decode_tokens: 10,
        ..StepShape::default()
    };
    assert_eq!(engine.step_time(&decode), 9.5e-3);
    let mut chunk = StepShape::default();
    chunk.add_chunk(0, 512);
    let lin = 2.2e-3 + 65e-6 * 512.0;
    let want = lin + 2.5e-9 * 131_328.0 + 0.3e-6 * 0.0 + 6e-9 * 262_144.0;
    assert_eq!(engine.step_time(&chunk), want);
    assert_eq!(chunked_prefill::sim::chunk_pairs(0, 512), 131_328);
    assert_eq!(chunked_prefill::sim::chunk_pairs(10, 2), 23);
}

#[test]
fn a_pool_too_small_preempts_at_a_known_step() {
    // Two requests of 4 prompt tokens and 5 output tokens, blocks of 4: each needs 2 blocks
    // at its longest, the pool has 3. Step 0 prefills both (1 block each); in step 1 both
    // decode into a new block: A takes the last free one, B (the worst-ranked) preempts
    // itself. B waits until A finishes after step 4, recomputes its 5 tokens in step 5 and
    // decodes its last 3 tokens in steps 6 to 8.
    let wl = plain(&[0.0, 0.0], &[4, 4], &[5, 5]);
    let out = simulate(&wl, config(3, 4)).unwrap();
    assert_eq!(out.steps, 9);
    assert_eq!(out.preemptions, [0, 1]);
    assert_eq!(out.recomputed_tokens, [0, 5]);
    assert_eq!(out.prefill_tokens, 4 + 4 + 5);
    assert_eq!(out.decode_tokens, 4 + 3);
    assert_eq!(out.admitted, [0.0, 0.0]);
    assert_eq!(out.first_token, [1.0, 1.0]);
    assert_eq!(out.finish, [5.0, 9.0]);
    assert_eq!(out.max_gap, [1.0, 5.0]);
    // A's four 1 s gaps and B's three, B's 5 s gap over its preemption (sorted by value).
    assert_eq!(out.gaps, [(1.0, 7), (5.0, 1)]);
    assert_eq!(out.kv_peak_blocks, 2);
    assert_eq!(out.kv_block_seconds, 18.0);
    assert_eq!(out.busy_s, 9.0);
    assert_eq!(out.kv_series_blocks, [2; 9]);

    // With room for both, nothing is preempted and both finish after step 4.
    let out = simulate(&wl, config(4, 4)).unwrap();
    assert_eq!((out.steps, out.preemptions.clone()), (5, vec![0, 0]));
    assert_eq!(out.finish, [5.0, 5.0]);
}

#[test]
fn prefix_sharing_halves_the_prefill_tokens() {
    // Three 64-token prompts, one after the other, whose first 48 tokens (3 blocks of 16)
    // are one group's: the second and third find them cached and compute 16 tokens each,
    // 64 + 16 + 16 = 96 prefill tokens instead of 192.
    let mut wl = plain(&[0.0, 2.0, 4.0], &[64, 64, 64], &[1, 1, 1]);
    wl.tokens = TokenPlan {
        known: vec![true; 3],
        prefix_tokens: 48,
        group: vec![7; 3],
        ..TokenPlan::default()
    };
    let out = simulate(&wl, config(64, 16)).unwrap();
    assert_eq!(out.prefill_tokens, 96);
    assert_eq!(out.cached_tokens, [0, 48, 48]);
    let mut off = config(64, 16);
    off.prefix_caching = false;
    let out = simulate(&wl, off).unwrap();
    assert_eq!(out.prefill_tokens, 192);
    assert_eq!(out.cached_tokens, [0, 0, 0]);
}

#[test]
fn a_later_turn_finds_the_earlier_turn_and_its_output_cached() {
    // One session: turn 1 has a 32-token prompt and 17 output tokens; turn 2's prompt is
    // those 32 + 17 - 1 = 48 tokens the scheduler holds (the last sampled token is never
    // written) plus 16 new ones. The stream's ids make turn 1's 3 full blocks hit.
    let mut wl = plain(&[0.0, 100.0], &[32, 64], &[17, 1]);
    wl.tokens = TokenPlan {
        known: vec![true; 2],
        session: vec![5, 5],
        ..TokenPlan::default()
    };
    let out = simulate(&wl, config(64, 16)).unwrap();
    assert_eq!(out.cached_tokens, [0, 48]);
    assert_eq!(out.prefill_tokens, 32 + 16);
}

#[test]
fn a_request_that_never_fits_is_named() {
    let wl = plain(&[0.0, 0.0], &[4, 40], &[1, 30]);
    let err = simulate(&wl, config(4, 4)).unwrap_err();
    assert_eq!(
        err,
        SimError::NeverFits {
            request: 1,
            prompt_tokens: 40,
            output_tokens: 30,
            needed: 18,
            usable: 4
        }
    );
    assert!(err
        .to_string()
        .starts_with("request 1 (prompt 40 tokens, output 30)"));
}

#[test]
fn the_step_limit_stops_a_run() {
    let wl = plain(&[0.0], &[4], &[100]);
    let err = run(
        &wl,
        &SimOptions {
            config: config(64, 4),
            engine: StepModel::Linear(ONE_SECOND),
            max_steps: 10,
        },
    )
    .unwrap_err();
    assert_eq!(
        err,
        SimError::StepLimit {
            steps: 10,
            done: 0,
            requests: 1
        }
    );
}

/// `workload` under `config(4096, 4)` with `stop` as the hook of [`run_fleet_until`].
fn until(workload: &Workload, stop: &mut dyn FnMut() -> bool) -> Result<Outcome, SimError> {
    let options = SimOptions {
        config: config(4096, 4),
        engine: StepModel::Linear(ONE_SECOND),
        max_steps: 1_000_000,
    };
    run_fleet_until(workload, &options, &Fleet::default(), stop)
}

#[test]
fn a_stop_hook_that_says_stop_ends_the_run_interrupted() {
    // One request of 10 000 output tokens: 10 000 steps; the hook stops at its third call.
    let wl = plain(&[0.0], &[4], &[10_000]);
    let mut calls = 0;
    let err = until(&wl, &mut || {
        calls += 1;
        calls == 3
    })
    .unwrap_err();
    assert_eq!(calls, 3);
    assert_eq!(
        err,
        SimError::Interrupted {
            done: 0,
            requests: 1
        }
    );
    assert_eq!(err.to_string(), "interrupted with 0 of 1 requests done");
}

#[test]
fn a_stop_hook_that_never_stops_changes_nothing() {
    // 10 002 ticks: the event of the arrival, the request routed, 10 000 step ends.
    let wl = plain(&[0.0], &[4], &[10_000]);
    let mut calls = 0_u32;
    let out = until(&wl, &mut || {
        calls += 1;
        false
    })
    .unwrap();
    assert_eq!(calls, 10_002 / POLL_EVERY);
    assert_eq!(out, simulate(&wl, config(4096, 4)).unwrap());
}

#[test]
fn a_burst_of_arrivals_is_stopped_while_it_is_routed() {
    // 1000 requests at t = 0 are routed in the first event: the first call of the hook
    // comes among them, before any step.
    let n = 1000;
    let wl = plain(&vec![0.0; n], &vec![4; n], &vec![2; n]);
    let err = until(&wl, &mut || true).unwrap_err();
    assert_eq!(
        err,
        SimError::Interrupted {
            done: 0,
            requests: n
        }
    );
}

#[test]
fn idle_time_jumps_to_the_next_arrival_and_the_kv_series_stays_bounded() {
    // One request of 10 000 output tokens: 10 000 steps, a series thinned to at most 4096
    // points with a stride that is a power of two.
    let wl = plain(&[3.5], &[4], &[10_000]);
    let out = simulate(&wl, config(4096, 4)).unwrap();
    assert_eq!(out.steps, 10_000);
    assert_eq!(out.admitted, [3.5]);
    assert_eq!(out.finish, [10_003.5]);
    assert!(out.kv_series_t.len() <= chunked_prefill::sim::KV_SERIES_CAP);
    assert!(out.kv_series_t.len() > chunked_prefill::sim::KV_SERIES_CAP / 2);
    assert_eq!(out.kv_stride, 4);
    assert_eq!(out.kv_series_t[1], 3.5 + 5.0); // the end of step 4
    assert_eq!(out.gaps, [(1.0, 9_999)]);
}

#[test]
fn trace_block_hashes_share_equal_blocks_and_only_the_prompt() {
    // Hashes of 32 tokens: request 1 shares hash 10 (tokens 0..32) with request 0 but not
    // hash 11 (32..64): 2 blocks of 16 hit. Request 2's single hash 10 covers its whole
    // 32-token prompt, whose last token is always computed: 1 block hits.
    let mut wl = plain(&[0.0, 5.0, 10.0], &[64, 64, 32], &[1, 1, 1]);
    wl.tokens = TokenPlan {
        known: vec![true; 3],
        hash_block: 32,
        hash_offsets: vec![0, 2, 4, 5],
        hash_ids: vec![10, 11, 10, 12, 10],
        ..TokenPlan::default()
    };
    let out = simulate(&wl, config(64, 16)).unwrap();
    assert_eq!(out.cached_tokens, [0, 32, 16]);
    // Past the prompt, ids come from the request's own stream, not its last hash.
    assert_ne!(wl.tokens.token(2, 40, 32), wl.tokens.token(0, 40, 64));
}

#[test]
fn roofline_step_time_is_the_python_formula() {
    // Llama-2-7B-like figures, rounded; the same sum in the same order as Python's.
    let r = Roofline {
        overhead_s: 2.2e-3,
        token_s: 64e-6,
        gemm_fixed_s: 4e-3,
        expert_fixed_s: 0.0,
        head_row_s: 1.3e-6,
        dense_read_s: 7.6e-3,
        expert_read_s: 0.0,
        experts: 0.0,
        expert_miss: 0.0,
        pair_s: 2.6e-9,
        chunk_sq_s: 1e-9,
        kv_token_s: 0.3e-6,
        allreduce_call_s: 6.4e-4,
        allreduce_token_s: 1e-7,
        launch_s: 1e-3,
        cpu_step_s: 3e-4,
        seq_s: 5e-5,
        window_tokens: 0.0,
        window_pair_s: 0.0,
        window_kv_token_s: 0.0,
        kv_half_seqs: 0.0,
    };
    let decode = StepShape {
        decode_tokens: 4,
        decode_context_tokens: 4000,
        ..StepShape::default()
    };
    // Weight reads dominate a small decode step.
    let want = 2.2e-3 + 7.6e-3 + 0.3e-6 * 4000.0 + (6.4e-4 + 1e-7 * 4.0) + 3e-4 + 5e-5 * 4.0;
    let mut got = 2.2e-3 + 7.6e-3;
    got += 2.6e-9 * 0.0;
    got += 1e-4 * 0.0;
    got += 0.3e-6 * 4000.0;
    got += 6.4e-4 + 1e-7 * 4.0;
    got += 3e-4 + 5e-5 * 4.0;
    assert_eq!(r.step_time(&decode), got);
    assert!((r.step_time(&decode) - want).abs() < 1e-15);
    let prefill = StepShape {
        prefill_tokens: 512,
        prefill_chunks: 1,
        attention_pairs: 131_328,
        prefill_chunk_sq: 262_144,
        ..StepShape::default()
    };
    // A prefill step is compute-bound: the GEMMs' fixed part counts, one sequence's CPU too.
    let mut t = 2.2e-3 + (64e-6 * 512.0 + 4e-3 + 1.3e-6 * 1.0);
    t += 2.6e-9 * 131_328.0;
    t += 1e-9 * 262_144.0;
    t += 0.3e-6 * 0.0;
    t += 6.4e-4 + 1e-7 * 512.0;
    t += 3e-4 + 5e-5 * 1.0;
    assert_eq!(r.step_time(&prefill), t);
    assert_eq!(StepModel::Roofline(r).step_time(&prefill), t);
}
