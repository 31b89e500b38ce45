//! A planned batch lists its decodes in compact form, shared with the decode group's lane,
//! and makes its items when first read: whenever they are read, they are the items of the
//! step it planned, and its shortcuts (`same_requests`, `same_sampling_ids`,
//! `num_sampling`) agree with comparing the items themselves.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use chunked_prefill::{Batch, BatchItem, Prompt, ServingConfig, ServingScheduler, TokenIds};
use proptest::prelude::*;

/// What happens before one step's `schedule()`.
#[derive(Debug, Clone)]
enum Op {
    /// A request with a prompt of this many tokens and this many to generate.
    Add(u32, u64),
    Abort(u64),
    Nothing,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (1u32..20, 1u64..12).prop_map(|(len, max_new)| Op::Add(len, max_new)),
        1 => (0u64..12).prop_map(Op::Abort),
        3 => Just(Op::Nothing),
    ]
}

fn hash_of(batch: &Batch) -> u64 {
    let mut hasher = DefaultHasher::new();
    batch.hash(&mut hasher);
    hasher.finish()
}

/// The shortcuts of `batch` against those of `previous`, and against its own items.
fn check_against(batch: &Batch, previous: &Batch) {
    let same =
        batch.preempted() == previous.preempted() && batch.request_ids().eq(previous.request_ids());
    assert_eq!(batch.same_requests(previous), same);
    let same_sampling = batch.sampling_ids() == previous.sampling_ids();
    assert_eq!(batch.same_sampling_ids(previous), same_sampling);
    let items = batch.items();
    assert_eq!(items.len(), batch.len());
    assert!(batch
        .request_ids()
        .eq(items.iter().map(|item| item.request_id)));
    let sampling: Vec<u64> = (items.iter().filter(|item| item.samples))
        .map(|item| item.request_id)
        .collect();
    assert_eq!(batch.sampling_ids(), sampling);
    assert_eq!(batch.num_sampling(), sampling.len());
    // The same step built by hand from its items equals it, and hashes alike.
    let rebuilt = Batch::new(
        batch.step_index(),
        items.to_vec(),
        batch.preempted().to_vec(),
        batch.num_free_blocks(),
    );
    assert_eq!(&rebuilt, batch);
    assert_eq!(hash_of(&rebuilt), hash_of(batch));
}

fn run(block_size: usize, ops: &[Op]) {
    let mut s = ServingScheduler::new(ServingConfig {
        block_size,
        token_budget: 24,
        chunk_size: 8,
        max_running: 6,
        ..ServingConfig::new(48)
    })
    .unwrap();
    let mut next_id = 0;
    let mut previous: Option<Arc<Batch>> = None;
    // Copies made before their items were read, with the items read at once from the
    // batch itself: read steps later, after members joined and left, they are the same.
    let mut unread: Vec<(Batch, Vec<BatchItem>)> = Vec::new();
    for op in ops {
        match *op {
            Op::Add(len, max_new) => {
                let prompt = Prompt::Tokens((0..len).map(|t| t % 5).collect());
                s.add_request(next_id, prompt, max_new, 0, 0).unwrap();
                next_id += 1;
            }
            Op::Abort(id) => {
                let _ = s.abort(id);
            }
            Op::Nothing => {}
        }
        let batch = s.schedule_shared().unwrap();
        let copy = (*batch).clone();
        unread.push((copy, batch.items().to_vec()));
        if let Some(previous) = &previous {
            check_against(&batch, previous);
        }
        let ids: Vec<u32> = (0..batch.num_sampling() as u32).collect();
        s.update(&batch, TokenIds::Aligned(&ids), &[]).unwrap();
        previous = Some(batch);
    }
    for (copy, items) in &unread {
        assert_eq!(copy.items(), items.as_slice(), "step {}", copy.step_index());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn a_batch_read_late_lists_its_own_step(
        block_size in prop::sample::select(vec![1usize, 2, 4, 16]),
        ops in prop::collection::vec(op(), 1..60),
    ) {
        run(block_size, &ops);
    }
}

#[test]
fn consecutive_steps_of_the_same_decodes_name_the_same_requests() {
    let mut s = ServingScheduler::new(ServingConfig {
        block_size: 4,
        ..ServingConfig::new(64)
    })
    .unwrap();
    for id in 0..3 {
        s.add_request(id, Prompt::Tokens(vec![1, 2, 3]), 20, 0, 0)
            .unwrap();
    }
    let mut batches = Vec::new();
    for _ in 0..4 {
        let batch = s.schedule_shared().unwrap();
        let ids = vec![7; batch.num_sampling()];
        s.update(&batch, TokenIds::Aligned(&ids), &[]).unwrap();
        batches.push(batch);
    }
    // Step 0 prefills the three, steps 1..3 decode them: the same requests each step (by
    // id, whatever their items), the decodes' listed by one shared list.
    assert!(batches[1].same_requests(&batches[0]));
    assert_ne!(batches[1].items(), batches[0].items());
    assert!(batches[2].same_requests(&batches[1]));
    assert!(batches[3].same_sampling_ids(&batches[2]));
    assert_ne!(batches[3].items(), batches[2].items());
    let starts: Vec<u128> = batches[3].items().iter().map(|item| item.start).collect();
    assert_eq!(starts, [5, 5, 5]);
}
