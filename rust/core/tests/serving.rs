//! Hand-computed step tables for every rule of the serving scheduler (issue 11).
//!
//! Unless a test says otherwise: blocks of 4 tokens, a budget of 16 tokens per step, chunks
//! of 8, 4 prefills per step, 8 running requests, no watermark. Each row is
//! `(request_id, start, tokens, new_blocks)`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use chunked_prefill::serving::{block_hash, root_hash, BlockHash};
use chunked_prefill::{
    Batch, CoreError, Prompt, RequestState, ServingConfig, ServingScheduler, TokenIds,
};

fn config(num_blocks: usize) -> ServingConfig {
    ServingConfig {
        block_size: 4,
        token_budget: 16,
        chunk_size: 8,
        max_prefills_per_step: 4,
        max_running: 8,
        ..ServingConfig::new(num_blocks)
    }
}

fn sched(config: ServingConfig) -> ServingScheduler {
    ServingScheduler::new(config).unwrap()
}

/// Distinct token ids `base..base + len`.
fn toks(base: u32, len: u32) -> Prompt {
    Prompt::Tokens((base..base + len).collect())
}

fn add(s: &mut ServingScheduler, id: u64, prompt: Prompt, max_new: u64) {
    s.add_request(id, prompt, max_new, 0, 0).unwrap();
}

fn add_ranked(s: &mut ServingScheduler, id: u64, prompt: Prompt, max_new: u64, priority: i64) {
    s.add_request(id, prompt, max_new, priority, 0).unwrap();
}

type Row = (u64, u128, usize, Vec<usize>);

fn rows(batch: &Batch) -> Vec<Row> {
    (batch.items().iter())
        .map(|i| (i.request_id, i.start, i.tokens, i.new_blocks.clone()))
        .collect()
}

/// Schedule and check the items; leaves the batch pending.
fn plan(s: &mut ServingScheduler, expected: &[Row]) -> Batch {
    let batch = s.schedule().unwrap().clone();
    assert_eq!(rows(&batch), expected, "step {}", batch.step_index());
    s.check_invariants().unwrap();
    batch
}

/// Schedule, check the items, update with `tokens` (aligned with the sampling ids); returns
/// the finished ids.
fn step_with(s: &mut ServingScheduler, expected: &[Row], tokens: &[u32]) -> Vec<u64> {
    let batch = plan(s, expected);
    let ids = if tokens.is_empty() {
        TokenIds::None
    } else {
        TokenIds::Aligned(tokens)
    };
    let done = s.update(&batch, ids, &[]).unwrap().to_vec();
    s.check_invariants().unwrap();
    done
}

fn step(s: &mut ServingScheduler, expected: &[Row]) -> Vec<u64> {
    step_with(s, expected, &[])
}

const NONE: [u64; 0] = [];

#[test]
fn a_prompt_is_chunked_then_decodes_then_finishes_by_length() {
    let mut s = sched(config(16));
    add(&mut s, 1, toks(0, 10), 3);
    // chunk_size 8: positions 0..8 need blocks 0 and 1 (the free queue is in id order).
    assert_eq!(step(&mut s, &[(1, 0, 8, vec![0, 1])]), NONE);
    // The last prompt chunk (8..10) needs block 2 and samples.
    let batch = plan(&mut s, &[(1, 8, 2, vec![2])]);
    assert_eq!(batch.sampling_ids(), [1]);
    assert!(batch.items()[0].is_prefill && batch.items()[0].samples);
    s.update(&batch, TokenIds::Aligned(&[100]), &[]).unwrap();
    // 11 tokens, 10 computed: a decode at 10, still in block 2.
    let batch = plan(&mut s, &[(1, 10, 1, vec![])]);
    assert!(!batch.items()[0].is_prefill);
    assert_eq!(
        (batch.num_decode_tokens(), batch.num_prefill_tokens()),
        (1, 0)
    );
    s.update(&batch, TokenIds::None, &[]).unwrap();
    // The decode at 11 fills block 2; the third generated token finishes the request.
    assert_eq!(step(&mut s, &[(1, 11, 1, vec![])]), [1]);
    assert!(!s.contains(1));
    assert_eq!(s.num_free_blocks(), 16);
}

#[test]
fn decodes_come_first_then_started_prefills_then_admissions() {
    let mut s = sched(config(16));
    add(&mut s, 1, toks(0, 4), 5);
    add(&mut s, 2, toks(100, 12), 1);
    // Both admitted in rank order: 1 takes block 0, 2 takes 8 tokens in blocks 1, 2.
    step(&mut s, &[(1, 0, 4, vec![0]), (2, 0, 8, vec![1, 2])]);
    add(&mut s, 3, toks(200, 4), 1);
    // 1 decodes at 4 and needs a new block (3); 2's last chunk (8..12) needs block 4; then 3
    // is admitted with block 5. Decode first, even though 1 ranks like the others.
    let batch = plan(
        &mut s,
        &[(1, 4, 1, vec![3]), (2, 8, 4, vec![4]), (3, 0, 4, vec![5])],
    );
    let kinds: Vec<_> = batch.items().iter().map(|i| i.is_prefill).collect();
    assert_eq!(kinds, [false, true, true]);
    assert_eq!(batch.sampling_ids(), [1, 2, 3]);
    assert_eq!(
        (batch.num_decode_tokens(), batch.num_prefill_tokens()),
        (1, 8)
    );
    assert_eq!(batch.num_free_blocks(), 10);
}

#[test]
fn chunks_are_capped_by_chunk_size_and_the_budget_left() {
    let mut s = sched(config(16));
    for id in 1..=3 {
        add(&mut s, id, toks(100 * id as u32, 10), 2);
    }
    // Budget 16 = two chunks of 8; request 3 finds no budget left.
    step(&mut s, &[(1, 0, 8, vec![0, 1]), (2, 0, 8, vec![2, 3])]);
    // 1 and 2 finish their prompts (2 tokens each, one block each); 3 gets min(10, 8, 12).
    step(
        &mut s,
        &[
            (1, 8, 2, vec![4]),
            (2, 8, 2, vec![5]),
            (3, 0, 8, vec![6, 7]),
        ],
    );
    // Decodes 1 and 2 (2 tokens), then 3's last 2 tokens.
    step(
        &mut s,
        &[(1, 10, 1, vec![]), (2, 10, 1, vec![]), (3, 8, 2, vec![8])],
    );
}

#[test]
fn at_most_max_prefills_per_step_chunks() {
    let mut s = sched(ServingConfig {
        max_prefills_per_step: 2,
        ..config(16)
    });
    for id in 1..=3 {
        add(&mut s, id, toks(100 * id as u32, 4), 2);
    }
    step(&mut s, &[(1, 0, 4, vec![0]), (2, 0, 4, vec![1])]);
    // Decodes do not count toward the cap: 3 is admitted beside them.
    step(
        &mut s,
        &[(1, 4, 1, vec![2]), (2, 4, 1, vec![3]), (3, 0, 4, vec![4])],
    );
}

#[test]
fn at_most_max_running_requests_and_freed_blocks_go_back_in_lru_order() {
    let mut s = sched(ServingConfig {
        max_running: 2,
        ..config(16)
    });
    for id in 1..=3 {
        add(&mut s, id, toks(100 * id as u32, 4), 2);
    }
    step(&mut s, &[(1, 0, 4, vec![0]), (2, 0, 4, vec![1])]);
    // 3 waits: two requests run.
    assert_eq!(
        step(&mut s, &[(1, 4, 1, vec![2]), (2, 4, 1, vec![3])]),
        [1, 2]
    );
    // 1 freed block 2 (unhashed: to the head), then block 0 (hashed: to the tail); then 2
    // freed 3 to the head and 1 to the tail: the queue is 3, 2, 4..15, 0, 1.
    step(&mut s, &[(3, 0, 4, vec![3])]);
}

#[test]
fn admission_stops_at_the_first_request_whose_blocks_do_not_fit() {
    let mut s = sched(config(4));
    add(&mut s, 1, toks(0, 8), 1);
    add(&mut s, 2, toks(100, 12), 1);
    add(&mut s, 3, toks(200, 4), 1);
    // 2 needs 3 blocks and 2 are free: admission stops, and 3 (which would fit) waits too.
    step(&mut s, &[(1, 0, 8, vec![0, 1])]);
}

#[test]
fn admission_counts_the_blocks_running_prefills_still_need() {
    let mut s = sched(config(4));
    add(&mut s, 1, toks(0, 12), 1);
    add(&mut s, 2, toks(100, 8), 1);
    // After 1's first chunk, 2 blocks are free, but 1 still needs 1 more for its prompt:
    // 2 <= 2 - 1 fails.
    step(&mut s, &[(1, 0, 8, vec![0, 1])]);
    // Even when 1 is not planned in the step, R counts it (here it is, and takes block 2).
    step(&mut s, &[(1, 8, 4, vec![2])]);
    // 1 finished; 2 fits now. Its blocks: 3 (never used) then the hashed ones from the tail.
    step(&mut s, &[(2, 0, 8, vec![3, 2])]);
}

#[test]
fn admission_keeps_the_watermark_free() {
    // floor(0.2 * 5) = 1 watermark block.
    let mut s = sched(ServingConfig {
        watermark: 0.2,
        ..config(5)
    });
    add(&mut s, 1, toks(0, 8), 1);
    add(&mut s, 2, toks(100, 12), 1);
    // 2 needs 3 blocks; 3 are free but 1 is the watermark.
    step(&mut s, &[(1, 0, 8, vec![0, 1])]);
    let mut s = sched(config(5));
    add(&mut s, 1, toks(0, 8), 1);
    add(&mut s, 2, toks(100, 12), 1);
    step(&mut s, &[(1, 0, 8, vec![0, 1]), (2, 0, 8, vec![2, 3])]);
}

#[test]
fn a_full_prefix_hit_leaves_the_last_token_to_compute() {
    let mut s = sched(config(16));
    add(&mut s, 1, toks(0, 8), 1);
    assert_eq!(step(&mut s, &[(1, 0, 8, vec![0, 1])]), [1]);
    // Blocks 1 then 0 were freed to the tail, still findable. The same prompt hits at most
    // (8 - 1) // 4 = 1 block, so it computes 4..8 in a fresh block.
    add(&mut s, 2, toks(0, 8), 1);
    let batch = plan(&mut s, &[(2, 4, 4, vec![0, 2])]);
    assert_eq!(batch.items()[0].cached_tokens, 4);
    assert_eq!(s.num_cached_tokens(), 4);
    assert_eq!(s.request(2).unwrap().num_cached_tokens, 4);
    // 2's second block has the hash block 1 still holds: it stays unhashed, and at 2's
    // finish goes to the head of the queue.
    assert_eq!(s.update(&batch, TokenIds::None, &[]).unwrap(), [2]);
    // A 9-token prompt with the same 8 first tokens hits both full blocks (1 is still in the
    // queue, findable) and computes its last token in block 2, the head.
    add(&mut s, 3, Prompt::Tokens((0..8).chain([77]).collect()), 1);
    let batch = plan(&mut s, &[(3, 8, 1, vec![0, 1, 2])]);
    assert_eq!(batch.items()[0].cached_tokens, 8);
}

/// The admission's lookup hashes block 0 (a miss) before it is computed; computing it must
/// still register it, though its hash is already known.
#[test]
fn a_block_hashed_by_the_admission_lookup_is_registered_when_computed() {
    let mut s = sched(config(16));
    add(&mut s, 1, toks(0, 6), 3);
    step_with(&mut s, &[(1, 0, 6, vec![0, 1])], &[7]);
    add(&mut s, 2, Prompt::Tokens((0..4).chain([99]).collect()), 1);
    let batch = plan(&mut s, &[(1, 6, 1, vec![]), (2, 4, 1, vec![0, 2])]);
    assert_eq!(batch.items()[1].cached_tokens, 4);
}

/// The chain hashes of `prompt`'s full blocks of `block_size` tokens, salt 0.
fn chain_hashes(prompt: &[u32], block_size: usize) -> Vec<BlockHash> {
    let mut parent = root_hash(0);
    (prompt.chunks_exact(block_size))
        .map(|ids| {
            parent = block_hash(&parent, ids.iter().copied());
            parent
        })
        .collect()
}

/// Six prompts of 1 to 6 blocks computed in one step: every block is registered under its
/// chain hash, in item order, so of two equal prompts the first item's blocks get the hashes
/// and the second's stay unhashed.
#[test]
fn blocks_computed_in_one_step_are_registered_in_item_order() {
    let mut s = sched(ServingConfig {
        token_budget: 128,
        chunk_size: 32,
        max_prefills_per_step: 8,
        ..config(64)
    });
    let prompts: Vec<Vec<u32>> = vec![
        (0..24).collect(),
        (100..104).collect(),
        (0..24).collect(), // request 3: request 1's prompt again
        (200..212).collect(),
        (300..320).collect(),
        (400..408).collect(),
    ];
    for (id, prompt) in (1..).zip(&prompts) {
        add(&mut s, id, Prompt::Tokens(prompt.clone()), 2);
    }
    let batch = s.schedule().unwrap().clone();
    assert_eq!(batch.items().len(), 6);
    let tables: Vec<Vec<usize>> = (batch.items().iter())
        .map(|i| i.new_blocks.clone())
        .collect();
    s.update(&batch, TokenIds::None, &[]).unwrap();
    s.check_invariants().unwrap();
    let mut expected: Vec<(usize, BlockHash)> = Vec::new();
    for (at, (prompt, table)) in prompts.iter().zip(&tables).enumerate() {
        if at != 2 {
            // Every prompt is a multiple of 4 tokens: all of its blocks are full.
            expected.extend(table.iter().copied().zip(chain_hashes(prompt, 4)));
        }
    }
    expected.sort_unstable();
    assert_eq!(s.to_state().unwrap().block_hashes, expected);
}

/// A long run in a small pool: many thousands of contents pass through the prefix cache's
/// content tree, which must free the unused ones (it collects once it has doubled) without
/// losing one a request or a registered block needs. A copy restored from an export at the
/// start (its blocks found by hash, the tree rebuilt as it goes) must plan every step alike.
#[test]
fn the_content_tree_frees_unused_contents_and_keeps_the_cache() {
    let mut s = sched(ServingConfig {
        token_budget: 64,
        chunk_size: 32,
        max_prefills_per_step: 4,
        max_running: 16,
        ..config(96)
    });
    // Prompts of 3 to 9 blocks: a family prefix of 2 blocks (5 families), then their own.
    let add_some = |s: &mut ServingScheduler, first: u64, n: u64| {
        for id in first..first + n {
            let family = (id % 5) as u32;
            let mut prompt: Vec<u32> = (0..8).map(|t| 1000 * family + t).collect();
            prompt.extend((0..4 + 4 * (id % 7) as u32).map(|t| 100_000 + 64 * id as u32 + t));
            add(s, id, Prompt::Tokens(prompt), 1 + id % 5);
        }
    };
    let mut next = 20;
    add_some(&mut s, 0, next);
    for _ in 0..5 {
        let batch = s.schedule().unwrap().clone();
        let tokens: Vec<u32> = (0..batch.sampling_ids().len() as u32).collect();
        s.update(&batch, TokenIds::Aligned(&tokens), &[]).unwrap();
    }
    let mut r = ServingScheduler::from_state(s.to_state().unwrap()).unwrap();
    let mut most_nodes = 0;
    for step in 0..3000u32 {
        if s.num_waiting() < 8 {
            add_some(&mut s, next, 8);
            add_some(&mut r, next, 8);
            next += 8;
        }
        let a = s.schedule().unwrap().clone();
        let b = r.schedule().unwrap().clone();
        assert_eq!(a, b, "step {step}");
        let tokens: Vec<u32> = (0..a.sampling_ids().len() as u32).map(|t| t % 3).collect();
        s.update(&a, TokenIds::Aligned(&tokens), &[]).unwrap();
        r.update(&b, TokenIds::Aligned(&tokens), &[]).unwrap();
        most_nodes = most_nodes.max(s.num_content_nodes());
        if step % 100 == 0 {
            s.check_invariants().unwrap();
            r.check_invariants().unwrap();
        }
    }
    assert_eq!(s.to_state().unwrap(), r.to_state().unwrap());
    assert!(next > 2500, "{next} requests");
    // Every request interned 3 to 10 contents: without collections the tree would hold
    // more than 10 000.
    assert!(most_nodes < 9000, "{most_nodes} content nodes at most");
    assert!(s.num_cached_tokens() > 0);
}

#[test]
fn a_partial_prefix_hit_stops_at_the_first_missing_block() {
    let mut s = sched(config(16));
    add(&mut s, 1, toks(0, 12), 1);
    step(&mut s, &[(1, 0, 8, vec![0, 1])]);
    step(&mut s, &[(1, 8, 4, vec![2])]);
    // Same first block, different second one: one hit.
    add(&mut s, 2, Prompt::Tokens((0..4).chain(50..58).collect()), 1);
    step(&mut s, &[(2, 4, 8, vec![0, 3, 4])]);
}

#[test]
fn running_requests_share_hit_blocks_and_salts_separate_them() {
    let mut s = sched(config(16));
    add(&mut s, 1, toks(0, 12), 2);
    step(&mut s, &[(1, 0, 8, vec![0, 1])]);
    // 2 shares 1's two full blocks while 1 still holds them.
    add(&mut s, 2, Prompt::Tokens((0..8).chain(50..54).collect()), 2);
    s.add_request(3, toks(0, 12), 2, 0, 7).unwrap();
    // 3 has the same tokens as 1 but another salt: no hit; it gets the 8 tokens of budget
    // left.
    step(
        &mut s,
        &[
            (1, 8, 4, vec![2]),
            (2, 8, 4, vec![0, 1, 3]),
            (3, 0, 8, vec![4, 5]),
        ],
    );
    assert_eq!(s.block_table(2).unwrap(), [0, 1, 3]);
    // Aborting 1 leaves the shared blocks with 2.
    s.abort(1).unwrap();
    s.check_invariants().unwrap();
    assert_eq!(s.block_table(2).unwrap(), [0, 1, 3]);
}

#[test]
fn an_int_prompt_and_an_unknown_token_stop_the_hash_chain() {
    let mut s = sched(config(16));
    add(&mut s, 1, Prompt::Length(8), 1);
    step(&mut s, &[(1, 0, 8, vec![0, 1])]);
    // Nothing was hashed: both blocks went back to the head (1 then 0).
    add(&mut s, 2, toks(0, 3), 6);
    // 2 samples a known token (50), then an unknown one, then 52: its first block
    // [0, 1, 2, 50] is hashed, its second [?, 52, ..] never is.
    step_with(&mut s, &[(2, 0, 3, vec![0])], &[50]);
    step(&mut s, &[(2, 3, 1, vec![])]);
    step_with(&mut s, &[(2, 4, 1, vec![1])], &[52]);
    add(&mut s, 3, Prompt::Tokens(vec![0, 1, 2, 50, 9, 52, 7]), 1);
    // Hits block 0 only.
    step(&mut s, &[(2, 5, 1, vec![]), (3, 4, 3, vec![0, 2])]);
}

#[test]
fn lru_eviction_takes_unhashed_blocks_then_untouched_ones_then_the_oldest_cached() {
    let mut s = sched(config(4));
    add(&mut s, 1, toks(0, 8), 1);
    step(&mut s, &[(1, 0, 8, vec![0, 1])]);
    add(&mut s, 2, toks(100, 8), 1);
    // 1's blocks went to the tail (1, 0); untouched blocks 2, 3 come first.
    step(&mut s, &[(2, 0, 8, vec![2, 3])]);
    // The queue is 1, 0, 3, 2: a 16-token prompt evicts 1's blocks first.
    add(&mut s, 3, toks(200, 16), 1);
    step(&mut s, &[(3, 0, 8, vec![1, 0])]);
    step(&mut s, &[(3, 8, 8, vec![3, 2])]);
}

#[test]
fn preemption_takes_the_worst_ranked_even_one_planned_earlier_in_the_step() {
    let mut s = sched(ServingConfig {
        chunk_size: 4,
        ..config(5)
    });
    add_ranked(&mut s, 1, toks(0, 16), 1, -1);
    add_ranked(&mut s, 2, toks(100, 3), 10, 0);
    // 1 needs 4 blocks (1 allocated now, 3 still needed); 2 needs 1 <= 4 - 3.
    step_with(&mut s, &[(1, 0, 4, vec![0]), (2, 0, 3, vec![1])], &[50]);
    step_with(&mut s, &[(2, 3, 1, vec![]), (1, 4, 4, vec![2])], &[51]);
    step_with(&mut s, &[(2, 4, 1, vec![3]), (1, 8, 4, vec![4])], &[52]);
    // 2 decodes (planned first), then 1 needs a block and none is free: 2, the worst ranked,
    // is preempted, its item leaves the batch; its unhashed block 3 goes to the head and
    // its hashed block 1 ([100, 101, 102, 50]) to the tail. 1 takes block 3.
    let batch = plan(&mut s, &[(1, 12, 4, vec![3])]);
    assert_eq!(batch.preempted(), [2]);
    assert_eq!(batch.num_free_blocks(), 1);
    assert_eq!(s.num_preemptions(), 1);
    let view = s.request(2).unwrap();
    assert_eq!(view.state, RequestState::Waiting);
    assert_eq!(
        (view.num_computed, view.num_tokens, view.num_preemptions),
        (0, 6, 1)
    );
    assert_eq!(
        s.update(&batch, TokenIds::Aligned(&[60]), &[]).unwrap(),
        [1]
    );
    // 2 recomputes its 6 tokens: its first block, which holds a generated token, is still
    // cached (block 1); positions 4..6 go to the queue's head, block 3.
    let batch = plan(&mut s, &[(2, 4, 2, vec![1, 3])]);
    assert_eq!(batch.items()[0].cached_tokens, 4);
    assert!(batch.items()[0].samples);
}

#[test]
fn the_requester_is_preempted_when_it_is_the_worst_ranked_and_nothing_is_admitted() {
    let mut s = sched(config(4));
    add_ranked(&mut s, 1, toks(0, 4), 8, -1);
    add_ranked(&mut s, 2, toks(100, 8), 8, 0);
    step(&mut s, &[(1, 0, 4, vec![0]), (2, 0, 8, vec![1, 2])]);
    // 3 ranks best of all and would fit in step 1, after 2 is preempted.
    add_ranked(&mut s, 3, toks(200, 4), 1, -5);
    // 1 decodes into block 3; 2 needs a block and is itself the worst ranked: preempted,
    // and admission is skipped in this step.
    let batch = plan(&mut s, &[(1, 4, 1, vec![3])]);
    assert_eq!(batch.preempted(), [2]);
    s.update(&batch, TokenIds::None, &[]).unwrap();
    // 3 is admitted (taking the tail's first block, 2); 2's first block 1 is still cached,
    // but the other 2 blocks it needs are not free.
    step(&mut s, &[(1, 5, 1, vec![]), (3, 0, 4, vec![2])]);
}

#[test]
fn lower_priority_runs_first_and_ties_go_by_arrival() {
    let mut s = sched(ServingConfig {
        max_prefills_per_step: 1,
        ..config(16)
    });
    add_ranked(&mut s, 7, toks(0, 4), 1, 5);
    add_ranked(&mut s, 8, toks(10, 4), 1, -1);
    add_ranked(&mut s, 9, toks(20, 4), 1, -1);
    assert_eq!(step(&mut s, &[(8, 0, 4, vec![0])]), [8]);
    assert_eq!(step(&mut s, &[(9, 0, 4, vec![1])]), [9]);
    assert_eq!(step(&mut s, &[(7, 0, 4, vec![2])]), [7]);
}

#[test]
fn finished_ids_come_in_batch_order_then_in_the_order_given() {
    let mut s = sched(ServingConfig {
        max_running: 2,
        ..config(16)
    });
    for id in 1..=3 {
        add(&mut s, id, toks(100 * id as u32, 4), 5);
    }
    let batch = plan(&mut s, &[(1, 0, 4, vec![0]), (2, 0, 4, vec![1])]);
    // 3 is waiting; 2 and 3 stop now.
    let done = s.update(&batch, TokenIds::None, &[3, 2]).unwrap();
    assert_eq!(done, [2, 3]);
    assert_eq!(s.len(), 1);
    assert_eq!(s.num_waiting(), 0);
    // Block 1 went to the tail (hashed).
    step(&mut s, &[(1, 4, 1, vec![2])]);
}

#[test]
fn abort_frees_at_once_and_update_skips_its_item() {
    let mut s = sched(config(16));
    add(&mut s, 1, toks(0, 4), 5);
    add(&mut s, 2, toks(100, 4), 5);
    let batch = plan(&mut s, &[(1, 0, 4, vec![0]), (2, 0, 4, vec![1])]);
    s.abort(1).unwrap();
    assert_eq!(s.num_free_blocks(), 15);
    s.check_invariants().unwrap();
    // Its id cannot come back before the update; its token id is still checked.
    assert_eq!(
        s.add_request(1, toks(0, 4), 1, 0, 0),
        Err(CoreError::RequestPending {
            request_id: 1,
            step_index: 0
        })
    );
    assert_eq!(
        s.update(&batch, TokenIds::Aligned(&[5]), &[]),
        Err(CoreError::TokenIdsLength {
            expected: 2,
            got: 1
        })
    );
    assert_eq!(
        s.update(&batch, TokenIds::Aligned(&[5, 6]), &[]).unwrap(),
        NONE
    );
    s.check_invariants().unwrap();
    assert_eq!(s.request(2).unwrap().num_computed, 4);
    add(&mut s, 1, toks(0, 4), 1);
    assert_eq!(s.abort(9), Err(CoreError::UnknownRequest { request_id: 9 }));
    // A waiting request aborted leaves a stale heap entry that admission skips. 2's decode
    // at 4 needs a block: the head of the queue is block 0, freed unhashed by the abort.
    s.abort(1).unwrap();
    step(&mut s, &[(2, 4, 1, vec![0])]);
}

#[test]
fn every_batch_awaits_its_update_and_refused_updates_change_nothing() {
    let mut s = sched(config(16));
    assert_eq!(
        s.update_step(0, TokenIds::None, &[]),
        Err(CoreError::BatchNotPending { got: 0 })
    );
    let empty = s.schedule().unwrap().clone();
    assert!(empty.is_empty());
    assert_eq!(s.schedule(), Err(CoreError::BatchPending { step_index: 0 }));
    s.update(&empty, TokenIds::None, &[]).unwrap();
    assert_eq!(
        s.update(&empty, TokenIds::None, &[]),
        Err(CoreError::BatchNotPending { got: 0 })
    );
    add(&mut s, 1, toks(0, 4), 5);
    add(&mut s, 2, toks(10, 4), 5);
    let batch = s.schedule().unwrap().clone();
    let views = |s: &ServingScheduler| [s.request(1).unwrap(), s.request(2).unwrap()];
    let before = views(&s);
    for (ids, finished, err) in [
        (
            TokenIds::None,
            &[][..],
            CoreError::BatchStale {
                got: 0,
                expected: 1,
            },
        ),
        (
            TokenIds::ByRequest(&[(2, 5), (3, 5)]),
            &[],
            CoreError::TokenIdsNotSampled {
                request_id: 3,
                step_index: 1,
            },
        ),
        // A repeat anywhere is found before an untracked id (as the twin's test pins).
        (
            TokenIds::None,
            &[2, 9, 2],
            CoreError::FinishedDuplicate { request_id: 2 },
        ),
        (
            TokenIds::None,
            &[2, 2, 9],
            CoreError::FinishedDuplicate { request_id: 2 },
        ),
        (
            TokenIds::None,
            &[2, 9],
            CoreError::UnknownRequest { request_id: 9 },
        ),
    ] {
        let got = if matches!(err, CoreError::BatchStale { .. }) {
            s.update(&empty, ids, finished)
        } else {
            s.update(&batch, ids, finished)
        };
        assert_eq!(got, Err(err));
        assert_eq!(views(&s), before);
        s.check_invariants().unwrap();
    }
    // A batch with the pending index but other contents is stale too.
    let forged = Batch::new(1, vec![], vec![], batch.num_free_blocks());
    assert!(s.update(&forged, TokenIds::None, &[]).is_err());
    s.update(&batch, TokenIds::ByRequest(&[(2, 5)]), &[])
        .unwrap();
    assert_eq!(s.step_index(), 2);
}

#[test]
fn add_request_refuses_bad_requests_in_order() {
    let mut s = sched(ServingConfig {
        watermark: 0.25,
        ..config(8)
    });
    assert_eq!(
        s.add_request(1, Prompt::Tokens(vec![]), 0, 0, 0),
        Err(CoreError::PromptEmpty)
    );
    assert_eq!(
        s.add_request(1, Prompt::Length(3), 0, 0, 0),
        Err(CoreError::MaxNewTokensZero)
    );
    // 24 + 1 - 1 tokens fit in the 6 usable blocks; one more token does not.
    s.add_request(1, Prompt::Length(24), 1, 0, 0).unwrap();
    assert_eq!(
        s.add_request(1, Prompt::Length(25), 1, 0, 0),
        Err(CoreError::ServingDuplicate { request_id: 1 })
    );
    assert_eq!(
        s.add_request(2, Prompt::Length(20), 6, 0, 0),
        Err(CoreError::RequestNeverFits {
            request_id: 2,
            prompt_tokens: 20,
            max_new_tokens: 6,
            needed: 7,
            block_size: 4,
            usable: 6,
            num_blocks: 8,
            watermark_blocks: 2,
        })
    );
    // Extreme values are refused without overflow.
    let err = s.add_request(3, Prompt::Length(u64::MAX), u64::MAX, 0, 0);
    assert!(matches!(err, Err(CoreError::RequestNeverFits { .. })));
    assert_eq!(s.len(), 1);
}

#[test]
fn config_rules_in_order() {
    let base = ServingConfig::new(64);
    assert_eq!(base.validate(), Ok(()));
    for (config, err) in [
        (
            ServingConfig {
                block_size: 0,
                token_budget: 0,
                ..base.clone()
            },
            CoreError::CountZero {
                name: "block_size",
                value: 0,
            },
        ),
        (
            ServingConfig {
                max_running: 2048,
                ..base.clone()
            },
            CoreError::MaxRunningTooLarge {
                max_running: 2048,
                token_budget: 2048,
            },
        ),
        (
            ServingConfig {
                watermark: 1.0,
                ..base.clone()
            },
            CoreError::WatermarkRange { value: 1.0 },
        ),
    ] {
        assert_eq!(ServingScheduler::new(config).err(), Some(err));
    }
    let nan = ServingConfig {
        watermark: f64::NAN,
        ..base.clone()
    };
    assert_eq!(
        nan.validate().unwrap_err().to_string(),
        "watermark must be at least 0 and less than 1, got nan"
    );
    let half = ServingConfig {
        watermark: 0.5,
        num_blocks: 7,
        ..base
    };
    assert_eq!(half.watermark_blocks(), 3);
}

#[test]
fn a_huge_pool_costs_only_the_blocks_it_uses() {
    let mut s = sched(ServingConfig {
        block_size: 1 << 50,
        token_budget: usize::MAX,
        chunk_size: usize::MAX,
        ..ServingConfig::new(usize::MAX)
    });
    s.add_request(1, Prompt::Length(u64::MAX), u64::MAX, i64::MIN, 0)
        .unwrap();
    let batch = s.schedule().unwrap().clone();
    assert_eq!(batch.items()[0].tokens, usize::MAX);
    s.update(&batch, TokenIds::None, &[]).unwrap();
    s.check_invariants().unwrap();
    assert_eq!(s.num_free_blocks(), usize::MAX - (1 << 14));
    // It now holds 2**64 tokens, past u64, and decodes on; a second request hits nothing.
    s.add_request(2, Prompt::Tokens(vec![1; 3]), 2, 0, 0)
        .unwrap();
    let batch = plan(
        &mut s,
        &[
            (1, u128::from(u64::MAX), 1, vec![]),
            (2, 0, 3, vec![1 << 14]),
        ],
    );
    assert_eq!(s.request(1).unwrap().num_tokens, 1 << 64);
    s.update(&batch, TokenIds::None, &[1]).unwrap();
    s.check_invariants().unwrap();
    // 1 finished (named in `finished`) and 2 holds one block. An export that cannot be
    // listed in memory is refused rather than aborting.
    assert_eq!(s.num_free_blocks(), usize::MAX - 1);
    assert_eq!(
        s.to_state().unwrap_err().to_string(),
        format!(
            "free_queue: {} entries do not fit in memory",
            usize::MAX - 1
        )
    );
}

/// The shape the Python benchmark times: 256 decoding requests, then 1000 waiting
/// 2000-token prompts sharing 1000-token prefixes, run to the end.
#[test]
fn many_decodes_and_shared_prefix_prompts_run_to_completion() {
    let mut s = sched(ServingConfig {
        max_running: 512,
        ..ServingConfig::new(16384)
    });
    for id in 0..256_u32 {
        s.add_request(u64::from(id), toks(1_000_000 + 16 * id, 16), 256, 0, 0)
            .unwrap();
    }
    let mut steps = 0;
    while s.num_waiting() > 0 {
        let batch = s.schedule().unwrap().clone();
        s.update(&batch, TokenIds::None, &[]).unwrap();
        steps += 1;
    }
    assert_eq!(s.num_running(), 256);
    s.check_invariants().unwrap();
    for id in 0..1000_u32 {
        let prefix = (id % 4) * 10_000;
        let prompt = (prefix..prefix + 1000).chain(500_000 + id * 1000..500_000 + id * 1000 + 1000);
        s.add_request(
            1000 + u64::from(id),
            Prompt::Tokens(prompt.collect()),
            4,
            0,
            0,
        )
        .unwrap();
    }
    let mut tokens = Vec::new();
    while !s.is_empty() {
        let batch = s.schedule().unwrap();
        tokens.clear();
        tokens.extend(batch.sampling_ids().iter().map(|&id| id as u32));
        let step_index = batch.step_index();
        s.update_step(step_index, TokenIds::Aligned(&tokens), &[])
            .unwrap();
        steps += 1;
        if steps % 97 == 0 {
            s.check_invariants().unwrap();
        }
        assert!(steps < 5000, "did not drain");
    }
    assert!(s.num_cached_tokens() > 0);
    assert_eq!(s.num_free_blocks(), 16384);
}

mod state {
    use super::*;
    use chunked_prefill::ServingState;

    /// A scheduler with a running request holding a shared, hashed prefix and a waiting one.
    fn busy() -> ServingScheduler {
        let mut s = sched(config(8));
        add(&mut s, 1, toks(0, 12), 3);
        step(&mut s, &[(1, 0, 8, vec![0, 1])]);
        add(&mut s, 2, toks(0, 9), 2);
        add(&mut s, 3, Prompt::Length(30), 1);
        step(&mut s, &[(1, 8, 4, vec![2]), (2, 8, 1, vec![0, 1, 3])]);
        s
    }

    #[test]
    fn a_restored_scheduler_plans_the_same_steps() {
        let mut s = busy();
        let state = s.to_state().unwrap();
        assert_eq!(state.requests.len(), 3);
        assert_eq!(state.requests[1].block_table, [0, 1, 3]);
        assert_eq!(state.requests[2].tokens, vec![None; 30]);
        assert_eq!(state.free_queue, [4, 5, 6, 7]);
        assert_eq!(
            state.block_hashes.iter().map(|h| h.0).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        let mut r = ServingScheduler::from_state(state.clone()).unwrap();
        r.check_invariants().unwrap();
        assert_eq!(r.to_state().unwrap(), state);
        for _ in 0..6 {
            let a = s.schedule().unwrap().clone();
            let b = r.schedule().unwrap().clone();
            assert_eq!(a, b);
            s.update(&a, TokenIds::None, &[]).unwrap();
            r.update(&b, TokenIds::None, &[]).unwrap();
        }
        assert_eq!(r.to_state().unwrap(), s.to_state().unwrap());
        s.schedule().unwrap();
        assert_eq!(
            s.to_state(),
            Err(CoreError::StateBatchPending { step_index: 8 })
        );
    }

    /// A state carries hashes but no token ids: the restored pool finds its cached blocks
    /// by hashing the prompt, where the original finds them by their kept content.
    #[test]
    fn a_restored_scheduler_finds_the_same_cached_prefix() {
        let mut s = sched(config(16));
        add(&mut s, 1, toks(0, 12), 1);
        step(&mut s, &[(1, 0, 8, vec![0, 1])]);
        step(&mut s, &[(1, 8, 4, vec![2])]);
        let mut r = ServingScheduler::from_state(s.to_state().unwrap()).unwrap();
        for scheduler in [&mut s, &mut r] {
            add(scheduler, 4, toks(0, 10), 1);
            add(scheduler, 5, toks(0, 6), 1);
        }
        let a = plan(&mut s, &[(4, 8, 2, vec![0, 1, 3]), (5, 4, 2, vec![0, 4])]);
        assert_eq!(r.schedule().unwrap(), &a);
        let hits: Vec<_> = a.items().iter().map(|i| i.cached_tokens).collect();
        assert_eq!(hits, [8, 4]);
    }

    fn refused(edit: impl FnOnce(&mut ServingState), path: &str, message: &str) {
        let mut state = busy().to_state().unwrap();
        edit(&mut state);
        assert_eq!(
            ServingScheduler::from_state(state).err(),
            Some(CoreError::StateRule {
                path: path.into(),
                message: message.into()
            })
        );
    }

    #[test]
    fn a_broken_state_is_refused_naming_the_path() {
        refused(
            |s| s.requests[1].request_id = 1,
            "requests[1].request_id",
            "request_id 1 appears twice",
        );
        refused(
            |s| s.requests[1].block_table.pop().map(drop).unwrap(),
            "requests[1].block_table",
            "holds 2 blocks, not ceil(num_computed / block_size) = 3",
        );
        refused(
            |s| s.requests[2].num_computed = 4,
            "requests[2].num_computed",
            "must be 0 for a waiting request, got 4",
        );
        refused(
            |s| s.requests[0].num_computed = 13,
            "requests[0].num_computed",
            "must be less than num_tokens (13), got 13",
        );
        refused(
            |s| s.requests[0].tokens[3] = None,
            "requests[0].tokens",
            "the prompt mixes token ids and None",
        );
        refused(
            |s| s.requests[0].block_table[2] = 8,
            "requests[0].block_table[2]",
            "block 8 is not below num_blocks 8",
        );
        refused(
            |s| s.free_queue.push(3),
            "free_queue[4]",
            "block 3 is held by a request",
        );
        refused(
            |s| s.free_queue[1] = 4,
            "free_queue[1]",
            "block 4 is queued twice",
        );
        refused(
            |s| {
                s.free_queue.pop();
            },
            "free_queue",
            "1 blocks are neither free nor held",
        );
        refused(
            |s| s.block_hashes.swap(0, 1),
            "block_hashes[1]",
            "block ids must be strictly increasing",
        );
        refused(
            |s| s.block_hashes[1].1 = s.block_hashes[0].1,
            "block_hashes[1]",
            "hash already registered for another block",
        );
        let mut state = busy().to_state().unwrap();
        state.step_index = u128::MAX;
        assert!(matches!(
            ServingScheduler::from_state(state),
            Err(CoreError::CounterTooLarge { .. })
        ));
    }
}

#[test]
fn a_huge_prompt_in_a_huge_pool_is_planned_a_chunk_at_a_time() {
    // 2**38 blocks of prompt fit a pool of 2**50: its table grows with its chunks, never
    // reserved for the whole prompt up front (terabytes).
    let mut s = sched(config(1 << 50));
    add(&mut s, 1, Prompt::Length(1 << 40), 1 << 20);
    step(&mut s, &[(1, 0, 8, vec![0, 1])]);
    step(&mut s, &[(1, 8, 8, vec![2, 3])]);
    assert_eq!(s.block_table(1).unwrap(), [0, 1, 2, 3]);
}

/// A prompt one token short of a block of 2**64 - 1 tokens: its first decode fills the block, and
/// the decode group arms the next fill 2**64 - 1 ticks on, past the end of its clock
/// (saturating, never reached) instead of overflowing it; it decodes to its finish.
#[test]
fn a_fill_of_a_huge_block_arms_the_next_past_the_clock() {
    let huge = usize::MAX;
    let mut s = sched(ServingConfig {
        block_size: huge,
        token_budget: huge,
        chunk_size: huge,
        ..config(4)
    });
    add(&mut s, 1, Prompt::Length(huge as u64 - 1), 5);
    let mut finished = Vec::new();
    for _ in 0..5 {
        let batch = s.schedule().unwrap().clone();
        finished.extend_from_slice(s.update(&batch, TokenIds::None, &[]).unwrap());
        s.check_invariants().unwrap();
    }
    assert_eq!(finished, [1]);
    assert_eq!(s.num_free_blocks(), 4);
}
