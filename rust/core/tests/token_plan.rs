#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `TokenPlan::try_fill` (a run of ids per stream) and `TokenPlan::output_token` give,
//! position by position, the ids of `TokenPlan::token`, the rule of the module docs; a run of
//! `TokenPlan::extend_output` gives those of `output_token`.

use chunked_prefill::sim::{TokenPlan, NO_GROUP};
use proptest::prelude::*;

/// A plan for requests 0..3: request 0 in group 7 or none, hashes of request 1 or none,
/// sessions given or not.
fn plan() -> impl Strategy<Value = TokenPlan> {
    (
        0u64..40,
        prop::option::of(0u64..3),
        0u64..9,
        prop::collection::vec(any::<u64>(), 0..6),
        any::<bool>(),
    )
        .prop_map(|(prefix_tokens, group, hash_block, hashes, sessions)| {
            let group = group.map_or(Vec::new(), |g| vec![NO_GROUP, 7 + g, NO_GROUP]);
            let n = hashes.len();
            TokenPlan {
                known: vec![true; 3],
                prefix_tokens,
                group,
                session: if sessions { vec![5, 5, 9] } else { Vec::new() },
                hash_block,
                hash_offsets: if n > 0 { vec![0, 0, n, n] } else { Vec::new() },
                hash_ids: hashes,
            }
        })
}

proptest! {
    #[test]
    fn filled_prompts_and_outputs_are_the_ids_of_token(plan in plan(), len in 0u64..60) {
        for i in 0..3 {
            let mut filled = vec![1, 2, 3];
            plan.try_fill(i, len, &mut filled).unwrap();
            let expected: Vec<u32> = (0..len).map(|pos| plan.token(i, pos, len)).collect();
            prop_assert_eq!(&filled, &expected, "request {}", i);
            for pos in len..len + 50 {
                prop_assert_eq!(plan.output_token(i, pos), plan.token(i, pos, len));
            }
        }
    }
}

proptest! {
    #[test]
    fn output_runs_are_the_ids_of_output_token(
        plan in plan(),
        first in 0u64..60,
        count in 0u64..40,
    ) {
        for i in 0..3 {
            let mut run = vec![1, 2];
            plan.extend_output(i, first, count, &mut run);
            let mut expected = vec![1, 2];
            expected.extend((first..first + count).map(|pos| plan.output_token(i, pos)));
            prop_assert_eq!(&run, &expected, "request {}", i);
        }
    }
}
