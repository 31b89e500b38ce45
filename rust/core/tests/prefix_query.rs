//! `ServingScheduler::cached_prefix_tokens`: what the prefix cache holds of a token sequence,
//! asked without changing anything.

#![allow(clippy::unwrap_used)]

use chunked_prefill::{Prompt, ServingConfig, ServingScheduler, TokenIds};

/// Blocks of 4 tokens, room for everything in one step.
fn sched(prefix_caching: bool) -> ServingScheduler {
    ServingScheduler::new(ServingConfig {
        block_size: 4,
        token_budget: 64,
        chunk_size: 64,
        max_running: 8,
        prefix_caching,
        ..ServingConfig::new(16)
    })
    .unwrap()
}

/// Run request `id` with `prompt` to completion (one output token: a single step).
fn run_one(s: &mut ServingScheduler, id: u64, prompt: &[u32], salt: u64) {
    s.add_request(id, Prompt::Tokens(prompt.to_vec()), 1, 0, salt)
        .unwrap();
    let batch = s.schedule().unwrap().clone();
    s.update(&batch, TokenIds::Aligned(&[7]), &[]).unwrap();
}

#[test]
fn counts_leading_full_blocks_held_or_free() {
    let mut s = sched(true);
    let prompt: Vec<u32> = (100..110).collect(); // 10 tokens: blocks 0 and 1 full
    assert_eq!(s.cached_prefix_tokens(&prompt, 0), 0);
    run_one(&mut s, 1, &prompt, 0);
    // The request finished: its blocks are free but still hashed.
    assert_eq!(s.num_free_blocks(), 16);
    assert_eq!(s.cached_prefix_tokens(&prompt, 0), 8);
    assert_eq!(s.cached_prefix_tokens(&prompt[..8], 0), 8);
    assert_eq!(s.cached_prefix_tokens(&prompt[..7], 0), 4);
    assert_eq!(s.cached_prefix_tokens(&prompt[..3], 0), 0);
    // A longer sequence with the same start; one that differs in block 1; another salt.
    let longer: Vec<u32> = (100..140).collect();
    assert_eq!(s.cached_prefix_tokens(&longer, 0), 8);
    let mut other = prompt.clone();
    other[5] = 1;
    assert_eq!(s.cached_prefix_tokens(&other, 0), 4);
    assert_eq!(s.cached_prefix_tokens(&prompt, 3), 0);
    assert_eq!(s.cached_prefix_tokens(&[], 0), 0);
}

#[test]
fn changes_nothing() {
    let mut s = sched(true);
    run_one(&mut s, 1, &(0..12).collect::<Vec<_>>(), 0);
    run_one(&mut s, 2, &(50..62).collect::<Vec<_>>(), 0);
    let before = s.to_state().unwrap();
    let ids: Vec<u32> = (0..12).collect();
    assert_eq!(s.cached_prefix_tokens(&ids, 0), 12);
    assert_eq!(s.to_state().unwrap(), before);
    // The next admission finds the same hits as without the question.
    s.add_request(3, Prompt::Tokens(ids), 1, 0, 0).unwrap();
    let batch = s.schedule().unwrap();
    assert_eq!(batch.items()[0].cached_tokens, 8);
}

#[test]
fn nothing_is_cached_without_prefix_caching() {
    let mut s = sched(false);
    let prompt: Vec<u32> = (0..12).collect();
    run_one(&mut s, 1, &prompt, 0);
    assert_eq!(s.cached_prefix_tokens(&prompt, 0), 0);
}
