//! numpy's `PCG64` bit generator: PCG XSL-RR 128/64, from
//! `numpy/random/src/pcg64/pcg64.h` (the native `__uint128_t` path, which Rust's `u128`
//! reproduces), seeded as `numpy/random/_pcg64.pyx` and `pcg64.c` do.

/// `PCG_DEFAULT_MULTIPLIER_128`: `PCG_DEFAULT_MULTIPLIER_HIGH << 64 | ..._LOW`.
const MULTIPLIER: u128 = (2_549_297_995_355_413_924_u128 << 64) | 4_865_540_595_714_422_341;

/// `2**-53`, written as numpy's `uint64_to_double` (`numpy/random/_common.pxd`) does.
const DOUBLE_UNIT: f64 = 1.0 / 9_007_199_254_740_992.0;

/// The LCG state and its (odd) increment, `pcg_state_setseq_128`.
///
/// numpy's `has_uint32`/`uinteger` buffer is absent: it only serves `next_uint32`,
/// which none of the draws here use.
#[derive(Clone, Debug)]
pub(crate) struct Pcg64 {
    state: u128,
    inc: u128,
}

impl Pcg64 {
    /// `PCG64._reset_state` → `pcg64_set_seed(state, val, val + 2)` →
    /// `pcg_setseq_128_srandom_r`: `seed` is `generate_state(4, np.uint64)`, whose
    /// words 0 and 1 are the high and low halves of the initial state and words 2 and 3
    /// those of the stream, shifted left by one (and made odd) into the increment.
    pub(crate) fn from_state_words(seed: [u64; 4]) -> Self {
        let initstate = (u128::from(seed[0]) << 64) | u128::from(seed[1]);
        let initseq = (u128::from(seed[2]) << 64) | u128::from(seed[3]);
        let mut rng = Self {
            state: 0,
            inc: (initseq << 1) | 1,
        };
        rng.step();
        rng.state = rng.state.wrapping_add(initstate);
        rng.step();
        rng
    }

    /// `pcg_setseq_128_step_r`: one LCG step modulo 2**128.
    fn step(&mut self) {
        self.state = self.state.wrapping_mul(MULTIPLIER).wrapping_add(self.inc);
    }

    /// `pcg64_next64` (`pcg_setseq_128_xsl_rr_64_random_r`): step first, then output
    /// XSL-RR of the *new* state — the high and low halves xored, rotated right by the
    /// top six bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.step();
        let high = (self.state >> 64) as u64;
        let low = self.state as u64;
        (high ^ low).rotate_right((self.state >> 122) as u32)
    }

    /// `pcg64_double` → `uint64_to_double`: the top 53 bits as a multiple of 2**-53,
    /// so in `[0, 1)`.
    pub(crate) fn next_double(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * DOUBLE_UNIT
    }
}
