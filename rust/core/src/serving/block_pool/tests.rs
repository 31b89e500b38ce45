//! The pool's queue order, against a plain model of it, and its owner counts.

use super::*;

#[test]
fn free_queue_is_front_newest_first_then_untouched_then_hashed_oldest_first() {
    let mut pool = BlockPool::new(8, 2);
    let ids: Vec<usize> = (0..5).filter_map(|_| pool.allocate()).collect();
    assert_eq!(ids, [0, 1, 2, 3, 4]);
    let node = pool.intern(None, 0, &[1, 2]);
    assert!(pool.register(3, node));
    for id in [1, 3, 0, 4, 2] {
        pool.release(id);
    }
    // Unhashed blocks freed to the head, newest first; then 5..8 untouched; then 3.
    let queue: Vec<usize> = pool.free_queue().collect();
    assert_eq!(queue, [2, 4, 0, 1, 5, 6, 7, 3]);
    assert_eq!(pool.num_free(), 8);
    // Allocation takes the head, and a cache hit takes the hashed block from the tail.
    assert_eq!(pool.allocate(), Some(2));
    pool.take_hit(3);
    assert_eq!(pool.free_queue().collect::<Vec<_>>(), [4, 0, 1, 5, 6, 7]);
    let owners = HashMap::from([(2, 1), (3, 1)]);
    assert_eq!(pool.check(&owners), Ok(()));
}

/// The head of the plain model's free queue, taken: `front` (head last), then the
/// untouched ids from `untouched` up to `total`, then `back` (head first).
fn model_take(
    front: &mut Vec<usize>,
    untouched: &mut usize,
    total: usize,
    back: &mut Vec<usize>,
) -> Option<usize> {
    if let Some(id) = front.pop() {
        return Some(id);
    }
    if *untouched < total {
        *untouched += 1;
        return Some(*untouched - 1);
    }
    (!back.is_empty()).then(|| back.remove(0))
}

/// Random allocations, registrations, releases and cache hits against a plain model of
/// the queue (a stack, the untouched ids, a vector for the hashed blocks): the same order
/// after every operation, and `back`'s stale entries swept as they accumulate.
#[test]
fn free_queue_follows_a_plain_model_and_stale_entries_stay_bounded() {
    let mut pool = BlockPool::new(64, 1);
    let (mut front, mut back): (Vec<usize>, Vec<usize>) = (Vec::new(), Vec::new());
    let mut held: HashMap<usize, usize> = HashMap::new();
    let mut seed = 0x2545_F491_4F6C_DD1D_u64;
    let mut next = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n) as usize
    };
    for round in 0..20_000 {
        let held_ids: Vec<usize> = held.keys().copied().collect();
        match next(5) {
            0 => {
                // One block, or up to four at once (the same ids, in the same order).
                let count = next(5);
                let mut untouched = pool.fresh;
                let mut ids = Vec::new();
                if count == 0 {
                    ids.extend(pool.allocate());
                } else {
                    assert_eq!(pool.allocate_into(count, &mut ids), ids.len());
                }
                let expected: Vec<usize> = (0..count.max(1))
                    .filter_map(|_| model_take(&mut front, &mut untouched, 64, &mut back))
                    .collect();
                assert_eq!(ids, expected, "round {round}");
                for id in ids {
                    *held.entry(id).or_default() += 1;
                }
            }
            1 if !held_ids.is_empty() => {
                let id = held_ids[next(held_ids.len() as u64)];
                if pool.blocks[id].registration == Registration::None {
                    let node = pool.intern(None, round, &[id as u32]);
                    assert!(pool.register(id, node));
                }
            }
            2 if !held_ids.is_empty() => {
                let id = held_ids[next(held_ids.len() as u64)];
                // A table of one block: freed without reading records while nothing
                // is hashed or shared.
                pool.release_table(&[id]);
                let owners = held.get_mut(&id).map(|n| {
                    *n -= 1;
                    *n
                });
                if owners == Some(0) {
                    held.remove(&id);
                    let hashed = pool.blocks[id].registration != Registration::None;
                    if hashed {
                        back.push(id);
                        // A push sweeps first once the stale entries outnumber the live.
                        assert!(pool.back.len() <= 2 * pool.back_len + STALE_SLACK);
                    } else {
                        front.push(id);
                    }
                }
            }
            3 => {
                // A cache hit on a held hashed block: one more owner.
                let hashed = |&&id: &&usize| pool.blocks[id].registration != Registration::None;
                if let Some(&id) = held_ids.iter().find(hashed) {
                    pool.take_hit(id);
                    *held.entry(id).or_default() += 1;
                }
            }
            _ if !back.is_empty() => {
                let at = next(back.len() as u64);
                let id = back.remove(at);
                pool.take_hit(id);
                held.insert(id, 1);
            }
            _ => {}
        }
        let model: Vec<usize> = (front.iter().rev().copied())
            .chain(pool.fresh..64)
            .chain(back.iter().copied())
            .collect();
        assert_eq!(
            pool.free_queue().collect::<Vec<_>>(),
            model,
            "round {round}"
        );
        // Within the room `try_reserve_fresh` keeps.
        assert!(pool.back.len() <= 2 * pool.fresh + STALE_SLACK + 1);
        if round % 500 == 0 {
            assert_eq!(pool.check(&held), Ok(()), "round {round}");
        }
    }
    assert_eq!(pool.check(&held), Ok(()));
}

/// Tables freed whole, with nothing hashed (their records unread) and then with a
/// shared hashed block: the queue of one block at a time either way.
#[test]
fn a_table_is_freed_as_its_blocks_one_by_one() -> Result<(), TryReserveError> {
    let mut pool = BlockPool::new(16, 1);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    pool.allocate_into(4, &mut a);
    pool.allocate_into(3, &mut b);
    pool.release_table(&a);
    assert_eq!(pool.free_queue().take(4).collect::<Vec<_>>(), [0, 1, 2, 3]);
    assert_eq!(pool.check(&HashMap::from([(4, 1), (5, 1), (6, 1)])), Ok(()));
    // Block 5 hashed and shared by a second owner: the slow path.
    let node = pool.intern(None, 0, &[5]);
    assert!(pool.register(5, node));
    pool.take_hit(5);
    assert!(!pool.is_free_hashed(5));
    assert_eq!(pool.check(&HashMap::from([(4, 1), (5, 2), (6, 1)])), Ok(()));
    pool.release_table(&b);
    assert_eq!(pool.free_queue().take(3).collect::<Vec<_>>(), [4, 6, 0]);
    assert_eq!(pool.check(&HashMap::from([(5, 1)])), Ok(()));
    pool.release_table(&[5]);
    assert!(pool.is_free_hashed(5));
    assert_eq!(pool.free_queue().last(), Some(5));
    assert_eq!(pool.check(&HashMap::new()), Ok(()));
    // A restored pool counts the owners beyond the first.
    let restored = BlockPool::restore(&[2, 0, 1], 1, &[1], &[])?;
    assert_eq!(restored.shares, 1);
    assert_eq!(restored.check(&HashMap::from([(0, 2), (2, 1)])), Ok(()));
    Ok(())
}
