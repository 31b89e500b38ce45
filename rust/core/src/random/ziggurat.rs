//! The ziggurat samplers of `numpy/random/src/distributions/distributions.c`
//! (`random_standard_normal`, `random_standard_exponential`), in `f64`.
//!
//! Each float operation is numpy's, in numpy's order and without fused multiply-adds
//! (numpy's x86-64 build does not contract them), and `exp`/`ln_1p` are the system
//! libm's `exp`/`log1p` as numpy's are: a rejection test decided the other way would
//! shift every later draw. numpy's tail-recursive retries are loops here.

use super::pcg64::Pcg64;
use super::tables::{
    FE_DOUBLE, FI_DOUBLE, KE_DOUBLE, KI_DOUBLE, WE_DOUBLE, WI_DOUBLE, ZIGGURAT_EXP_R,
    ZIGGURAT_NOR_INV_R, ZIGGURAT_NOR_R,
};

/// Low 52 bits: the magnitude of a normal draw (`rabs`).
const NORMAL_MAGNITUDE: u64 = 0x000f_ffff_ffff_ffff;

/// `random_standard_normal`: one 64-bit draw is the layer (low 8 bits), the sign (next
/// bit) and the magnitude (next 52 bits); inside the layer's rectangle it is accepted
/// at once (99.3%), in layer 0 it goes to the tail, otherwise to the wedge test.
pub(crate) fn standard_normal(rng: &mut Pcg64) -> f64 {
    loop {
        let r = rng.next_u64();
        let idx = (r & 0xff) as usize;
        let r = r >> 8;
        let rabs = (r >> 1) & NORMAL_MAGNITUDE;
        let mut x = rabs as f64 * WI_DOUBLE[idx];
        if r & 0x1 != 0 {
            x = -x;
        }
        if rabs < KI_DOUBLE[idx] {
            return x;
        }
        if idx == 0 {
            return normal_tail(rng, rabs);
        }
        if wedge(&FI_DOUBLE, idx, rng.next_double()) < (-0.5 * x * x).exp() {
            return x;
        }
    }
}

/// The normal tail beyond `ZIGGURAT_NOR_R` (Marsaglia's method), its sign taken from
/// bit 8 of the magnitude that fell in layer 0. `log1p(-u)` rather than `log(u)` so a
/// zero uniform cannot give `log(0)` (numpy GH 13361).
fn normal_tail(rng: &mut Pcg64, rabs: u64) -> f64 {
    loop {
        let xx = -ZIGGURAT_NOR_INV_R * (-rng.next_double()).ln_1p();
        let yy = -(-rng.next_double()).ln_1p();
        if yy + yy > xx * xx {
            return if (rabs >> 8) & 0x1 != 0 {
                -(ZIGGURAT_NOR_R + xx)
            } else {
                ZIGGURAT_NOR_R + xx
            };
        }
    }
}

/// `random_standard_exponential` (method `'zig'`, numpy's default): the draw shifted
/// right by 3, then the layer (low 8 bits) and the 53-bit magnitude; numpy's
/// `standard_exponential_unlikely` handles the tail (layer 0) and the wedge, and its
/// recursive retry on a rejected wedge is the loop.
pub(crate) fn standard_exponential(rng: &mut Pcg64) -> f64 {
    loop {
        let ri = rng.next_u64() >> 3;
        let idx = (ri & 0xff) as usize;
        let ri = ri >> 8;
        let x = ri as f64 * WE_DOUBLE[idx];
        if ri < KE_DOUBLE[idx] {
            return x;
        }
        if idx == 0 {
            return ZIGGURAT_EXP_R - (-rng.next_double()).ln_1p();
        }
        if wedge(&FE_DOUBLE, idx, rng.next_double()) < (-x).exp() {
            return x;
        }
    }
}

/// The wedge test's left side, `(f[idx - 1] - f[idx]) * u + f[idx]`: a uniform height
/// between the densities at the layer's two edges, compared with the density at `x`.
fn wedge(f: &[f64; 256], idx: usize, u: f64) -> f64 {
    (f[idx - 1] - f[idx]) * u + f[idx]
}
