//! numpy's `SeedSequence` (`numpy/random/bit_generator.pyx`), reduced to what
//! `default_rng` uses: no spawn key, the default pool of four words, and
//! `generate_state(4, np.uint64)` for PCG64's 256 seed bits.
//!
//! It is O'Neill's `seed_seq` alternative: the entropy words are hashed into a pool
//! (`mix_entropy`), and the pool is hashed out again into as many words as asked for
//! (`generate_state`). All arithmetic is on `uint32_t`, so it wraps.

/// `DEFAULT_POOL_SIZE`: the pool is four `u32` words.
const POOL_SIZE: usize = 4;
/// `INIT_A`: the first multiplier of the `hashmix` chain in `mix_entropy`.
const INIT_A: u32 = 0x43b0_d7e5;
/// `MULT_A`: how `hashmix` advances its multiplier.
const MULT_A: u32 = 0x931e_8875;
/// `INIT_B`: the first multiplier of the chain in `generate_state`.
const INIT_B: u32 = 0x8b51_f9dd;
/// `MULT_B`: how `generate_state` advances its multiplier.
const MULT_B: u32 = 0x58f3_8ded;
/// `MIX_MULT_L`: `mix`'s factor on the pool word.
const MIX_MULT_L: u32 = 0xca01_f9dd;
/// `MIX_MULT_R`: `mix`'s factor on the hashed word.
const MIX_MULT_R: u32 = 0x4973_f715;
/// `XSHIFT`: half the bits of a `uint32`.
const XSHIFT: u32 = 16;

/// `_int_to_uint32_array`: a non-negative Python int as little-endian 32-bit words,
/// with at least one word (0 is `[0]`): one word below 2**32, two from there on. For a
/// lone seed the count does not change the pool (`mix_entropy` pads a short entropy
/// with zero words anyway), but in a seed list it does: `[42, 24]` is not `[42, 0, 24]`.
pub(crate) fn int_words(n: u64) -> Vec<u32> {
    let (low, high) = (n as u32, (n >> 32) as u32);
    if high == 0 {
        vec![low]
    } else {
        vec![low, high]
    }
}

/// `hashmix`: hash one word, advancing the shared multiplier `hash_const`.
fn hashmix(value: u32, hash_const: &mut u32) -> u32 {
    let value = value ^ *hash_const;
    *hash_const = hash_const.wrapping_mul(MULT_A);
    let value = value.wrapping_mul(*hash_const);
    value ^ (value >> XSHIFT)
}

/// `mix`: combine a pool word `x` with a hashed word `y`.
fn mix(x: u32, y: u32) -> u32 {
    let result = MIX_MULT_L
        .wrapping_mul(x)
        .wrapping_sub(MIX_MULT_R.wrapping_mul(y));
    result ^ (result >> XSHIFT)
}

/// `SeedSequence(entropy).pool`, by `mix_entropy`: hash the words into the pool (zeros
/// past the end of a short entropy), mix every pool word into every other, then fold
/// in the words that did not fit. The loops keep numpy's order, since `hash_const`
/// advances on every `hashmix`.
pub(crate) fn pool(entropy: &[u32]) -> [u32; POOL_SIZE] {
    let mut hash_const = INIT_A;
    let mut mixer = [0_u32; POOL_SIZE];
    for (i, word) in mixer.iter_mut().enumerate() {
        *word = hashmix(entropy.get(i).copied().unwrap_or(0), &mut hash_const);
    }
    for i_src in 0..POOL_SIZE {
        for i_dst in 0..POOL_SIZE {
            if i_src != i_dst {
                mixer[i_dst] = mix(mixer[i_dst], hashmix(mixer[i_src], &mut hash_const));
            }
        }
    }
    for &word in entropy.iter().skip(POOL_SIZE) {
        for slot in &mut mixer {
            *slot = mix(*slot, hashmix(word, &mut hash_const));
        }
    }
    mixer
}

/// `generate_state(N, np.uint64)`: `2 * N` `u32` words hashed out of the cycled pool,
/// then paired little-endian (`state.astype('<u4').view('<u8')`), low word first.
pub(crate) fn generate_state_u64<const N: usize>(pool: &[u32; POOL_SIZE]) -> [u64; N] {
    let mut hash_const = INIT_B;
    let mut words = pool.iter().cycle().map(|&word| {
        let value = word ^ hash_const;
        hash_const = hash_const.wrapping_mul(MULT_B);
        let value = value.wrapping_mul(hash_const);
        value ^ (value >> XSHIFT)
    });
    let mut state = [0_u64; N];
    for slot in &mut state {
        let low = words.next().map_or(0, u64::from);
        let high = words.next().map_or(0, u64::from);
        *slot = low | (high << 32);
    }
    state
}
