//! numpy's `numpy.random.default_rng(seed)` — `SeedSequence` → `PCG64` → `Generator` —
//! reproduced bit for bit, for the few draws a synthetic workload needs.
//!
//! Why: importing numpy is about a fifth of a `simulate` process, and the Rust side
//! needs none of it except the random draws. Yet the default workload must stay the one
//! numpy draws for the same seed (published results and the Python path depend on it),
//! so approximately-the-same distributions would not do: the same 64-bit words must
//! come out of the same bit generator and go through the same float operations.
//!
//! The parts, each following one numpy source file:
//!
//! - `seed_sequence`: `SeedSequence` (`numpy/random/bit_generator.pyx`), turning the
//!   seed into PCG64's 256 bits of state;
//! - `pcg64`: the `PCG64` bit generator (`numpy/random/src/pcg64/pcg64.h`, `pcg64.c`,
//!   `numpy/random/_pcg64.pyx`);
//! - `ziggurat`: the normal and exponential samplers
//!   (`numpy/random/src/distributions/distributions.c`), on the tables of
//!   `ziggurat_constants.h` kept verbatim in `tables`.
//!
//! Draws on one [`Generator`] share one stream, in call order, as on a numpy
//! `Generator`: `rng.random()` then `rng.standard_normal()` here gives what the same two
//! calls give in numpy. A vectorised numpy call (`rng.lognormal(m, s, n)`) is `n` scalar
//! calls in a row.
//!
//! ```
//! use chunked_prefill::random::Generator;
//!
//! // numpy: np.random.default_rng(42).random() == 0.7739560485559633
//! let mut rng = Generator::from_seed(42);
//! assert_eq!(rng.random(), 0.7739560485559633);
//! ```

mod pcg64;
mod seed_sequence;
mod tables;
mod ziggurat;

use pcg64::Pcg64;

/// A numpy `Generator` on a `PCG64` bit generator, as `default_rng` builds it.
#[derive(Clone, Debug)]
pub struct Generator {
    bits: Pcg64,
}

impl Generator {
    /// Exactly `numpy.random.default_rng(seed)` for an int `seed` (every `u64` is in
    /// numpy's range): the seed is split into little-endian 32-bit words as numpy's
    /// `_coerce_to_uint32_array` splits a Python int — one word below 2**32, two from
    /// there on.
    pub fn from_seed(seed: u64) -> Generator {
        Generator::from_entropy_words(&seed_sequence::int_words(seed))
    }

    /// Exactly `numpy.random.default_rng([s0, s1, ...])` for a list of int seeds: each
    /// coerced as [`Generator::from_seed`] coerces one, the words concatenated. The
    /// workload's side streams are seeded this way (`default_rng([seed, 24])`).
    pub fn from_seeds(seeds: &[u64]) -> Generator {
        let words: Vec<u32> = seeds
            .iter()
            .flat_map(|&seed| seed_sequence::int_words(seed))
            .collect();
        Generator::from_entropy_words(&words)
    }

    /// `Generator(PCG64(SeedSequence(words)))` for entropy already coerced to `uint32`
    /// words (a `np.uint32` array passes through numpy's coercion unchanged), with no
    /// spawn key: the pool is mixed from `words`, four `u64` are generated from it, and
    /// PCG64 is seeded with them.
    pub fn from_entropy_words(words: &[u32]) -> Generator {
        let pool = seed_sequence::pool(words);
        let state = seed_sequence::generate_state_u64::<4>(&pool);
        Generator {
            bits: Pcg64::from_state_words(state),
        }
    }

    /// `Generator.random()`: a uniform double in `[0, 1)`, 53 random bits, one 64-bit
    /// draw.
    pub fn random(&mut self) -> f64 {
        self.bits.next_double()
    }

    /// `Generator.standard_normal()`: numpy's 256-layer ziggurat
    /// (`random_standard_normal`).
    pub fn standard_normal(&mut self) -> f64 {
        ziggurat::standard_normal(&mut self.bits)
    }

    /// `Generator.standard_exponential()` with numpy's default `method='zig'`
    /// (`random_standard_exponential`). `Generator.exponential(scale)` is
    /// `scale * standard_exponential()` in numpy, in that order.
    pub fn standard_exponential(&mut self) -> f64 {
        ziggurat::standard_exponential(&mut self.bits)
    }

    /// `Generator.lognormal(mean, sigma)`: numpy's `random_lognormal`, which is
    /// `exp(random_normal(mean, sigma))` with `random_normal` returning
    /// `loc + scale * random_standard_normal()` — the same operations in the same
    /// order. numpy rejects a negative or NaN `sigma` with `ValueError`; that check is
    /// the caller's here.
    pub fn lognormal(&mut self, mean: f64, sigma: f64) -> f64 {
        (mean + sigma * self.standard_normal()).exp()
    }
}
