//! exp(x) for a slice, in place, vectorised: Cody–Waite reduction x = k ln2 + r (|r| ≤ ln2/2),
//! a degree-13 Taylor polynomial for expm1(r) evaluated with fused multiply-adds (Estrin), and the
//! result 2ᵏ·(1 + expm1 r) rounded once. Error ≲ 1 ulp (glibc's `exp`: ≲ 0.5 ulp). Branch-free:
//! x is clamped to [−746, 710] (exp underflows to 0 / overflows to ∞ beyond), 2ᵏ is applied as
//! two exact power-of-two factors so that subnormal and infinite results come out right, and
//! NaN propagates. The same arithmetic runs on every target (an AVX2+FMA build is selected at
//! run time on x86-64), so results are bit-identical whichever path runs.

const LOG2E: f64 = std::f64::consts::LOG2_E;
/// ln 2 split so that k·LN2_HI is exact for |k| < 2¹¹ (fdlibm's constants, digits as published).
#[allow(clippy::excessive_precision)]
const LN2_HI: f64 = 6.931_471_803_691_238_164_9e-1;
#[allow(clippy::excessive_precision)]
const LN2_LO: f64 = 1.908_214_929_270_587_700_02e-10;
/// 1.5·2⁵²: adding it rounds to an integer that sits in the low mantissa bits.
const SHIFT: f64 = 6_755_399_441_055_744.0;
const LO: f64 = -746.0;
const HI: f64 = 710.0;
/// 1/j! for j = 13 down to 2.
const C: [f64; 12] = [
    1.0 / 6_227_020_800.0,
    1.0 / 479_001_600.0,
    1.0 / 39_916_800.0,
    1.0 / 3_628_800.0,
    1.0 / 362_880.0,
    1.0 / 40_320.0,
    1.0 / 5_040.0,
    1.0 / 720.0,
    1.0 / 120.0,
    1.0 / 24.0,
    1.0 / 6.0,
    0.5,
];

/// 2ᵏ for k ∈ [−1022, 1023].
#[inline(always)]
fn pow2(k: i64) -> f64 {
    f64::from_bits((k.wrapping_add(1023) as u64).wrapping_shl(52))
}

#[inline(always)]
pub(super) fn exp1(x: f64) -> f64 {
    let x = x.clamp(LO, HI); // NaN stays NaN
    let t = x.mul_add(LOG2E, SHIFT);
    let n = t - SHIFT;
    let r = (-n).mul_add(LN2_HI, x);
    let r = (-n).mul_add(LN2_LO, r);
    // p(r) = Σ_{j=2..13} r^{j−2}/j! by Estrin's scheme (short dependency chains, so that
    // successive vectors overlap in the pipeline).
    let r2 = r * r;
    let r4 = r2 * r2;
    let r8 = r4 * r4;
    let c = |j: usize| C[13 - j]; // 1/j!
    let q0 = c(3).mul_add(r, c(2));
    let q1 = c(5).mul_add(r, c(4));
    let q2 = c(7).mul_add(r, c(6));
    let q3 = c(9).mul_add(r, c(8));
    let q4 = c(11).mul_add(r, c(10));
    let q5 = c(13).mul_add(r, c(12));
    let s0 = q1.mul_add(r2, q0);
    let s1 = q3.mul_add(r2, q2);
    let s2 = q5.mul_add(r2, q4);
    let p = s2.mul_add(r8, s1.mul_add(r4, s0));
    let em1 = r2.mul_add(p, r);
    // k ∈ [−1077, 1025]; 2ᵏ = 2^k1 · 2^k2 with both factors normal. In the normal range
    // this is exactly 2ᵏ·round(1 + em1).
    let k = t.to_bits().wrapping_sub(SHIFT.to_bits()) as i64;
    let k1 = k >> 1;
    let s1 = pow2(k1);
    s1.mul_add(em1, s1) * pow2(k.wrapping_sub(k1))
}

/// [`exp1`] on the eight lanes of an AVX-512 register: the same IEEE operations in the same
/// order (clamp, the Cody–Waite reduction, Estrin's scheme, the two power-of-two factors), so
/// the same bits lane by lane. For fused loops that keep their values in registers
/// (`stationary`'s squared-exponential slice), where the compiler does not vectorise `exp1`
/// itself; `every_dispatch_path_is_bit_identical` holds the two forms together.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) fn exp8(x: std::arch::x86_64::__m512d) -> std::arch::x86_64::__m512d {
    use std::arch::x86_64::*;
    let v = _mm512_set1_pd;
    // f64::clamp keeps a NaN: VMAXPD/VMINPD return their second operand when either is NaN.
    let x = _mm512_min_pd(v(HI), _mm512_max_pd(v(LO), x));
    let t = _mm512_fmadd_pd(x, v(LOG2E), v(SHIFT));
    let n = _mm512_sub_pd(t, v(SHIFT));
    // (−n)·c + x in one rounding is −(n·c) + x in one rounding: VFNMADD.
    let r = _mm512_fnmadd_pd(n, v(LN2_HI), x);
    let r = _mm512_fnmadd_pd(n, v(LN2_LO), r);
    let r2 = _mm512_mul_pd(r, r);
    let r4 = _mm512_mul_pd(r2, r2);
    let r8 = _mm512_mul_pd(r4, r4);
    let c = |j: usize| v(C[13 - j]);
    let q0 = _mm512_fmadd_pd(c(3), r, c(2));
    let q1 = _mm512_fmadd_pd(c(5), r, c(4));
    let q2 = _mm512_fmadd_pd(c(7), r, c(6));
    let q3 = _mm512_fmadd_pd(c(9), r, c(8));
    let q4 = _mm512_fmadd_pd(c(11), r, c(10));
    let q5 = _mm512_fmadd_pd(c(13), r, c(12));
    let s0 = _mm512_fmadd_pd(q1, r2, q0);
    let s1 = _mm512_fmadd_pd(q3, r2, q2);
    let s2 = _mm512_fmadd_pd(q5, r2, q4);
    let p = _mm512_fmadd_pd(s2, r8, _mm512_fmadd_pd(s1, r4, s0));
    let em1 = _mm512_fmadd_pd(r2, p, r);
    let k = _mm512_sub_epi64(_mm512_castpd_si512(t), _mm512_castpd_si512(v(SHIFT)));
    let k1 = _mm512_srai_epi64::<1>(k);
    let pow2 = |k: __m512i| _mm512_castsi512_pd(_mm512_slli_epi64::<52>(_mm512_add_epi64(k, _mm512_set1_epi64(1023))));
    let s1 = pow2(k1);
    _mm512_mul_pd(_mm512_fmadd_pd(s1, em1, s1), pow2(_mm512_sub_epi64(k, k1)))
}

#[inline(always)]
fn exp_all(v: &mut [f64]) {
    v.iter_mut().for_each(|x| *x = exp1(*x));
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn exp_avx2_fma(v: &mut [f64]) {
    exp_all(v)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn exp_avx512(v: &mut [f64]) {
    exp_all(v)
}

/// v ← exp(v), element-wise.
pub(crate) fn exp_in_place(v: &mut [f64]) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports the features the function was compiled for.
        unsafe { exp_avx512(v) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports the features the function was compiled for.
        unsafe { exp_avx2_fma(v) };
        return;
    }
    exp_all(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every path `exp_in_place` may dispatch to gives the portable path's bits (the module's
    /// promise: results do not depend on the CPU).
    #[test]
    fn every_dispatch_path_is_bit_identical() {
        let mut xs: Vec<f64> =
            (0..4099).map(|i| -745.0 + (i as f64) * 0.3637 + 1e-3 * ((i * 7919) % 101) as f64).collect();
        // Beyond the clamp, subnormal and overflowing results, signed zeros, NaN.
        xs.extend([-1e300, -800.0, -745.2, -744.9, -708.5, -0.0, 0.0, 709.7, 709.8, 710.5, 1e300]);
        xs.extend([f64::NEG_INFINITY, f64::INFINITY, f64::NAN, 1e-310, -1e-310]);
        let mut portable = xs.clone();
        exp_all(&mut portable);
        // A NaN's sign and payload are left unspecified by Rust: a NaN is compared as a NaN.
        let bits = |v: &[f64]| v.iter().map(|x| (!x.is_nan()).then(|| x.to_bits())).collect::<Vec<_>>();
        let mut dispatched = xs.clone();
        exp_in_place(&mut dispatched);
        assert_eq!(bits(&dispatched), bits(&portable));
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                let mut v = xs.clone();
                // SAFETY: the features were just detected.
                unsafe { exp_avx2_fma(&mut v) };
                assert_eq!(bits(&v), bits(&portable), "AVX2 path");
            }
            if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("fma") {
                let mut v = xs.clone();
                // SAFETY: the features were just detected.
                unsafe { exp_avx512(&mut v) };
                assert_eq!(bits(&v), bits(&portable), "AVX-512 path");
            }
            if std::is_x86_feature_detected!("avx512f") {
                use std::arch::x86_64::*;
                let mut v = xs.clone();
                for chunk in v.chunks_mut(8) {
                    let mut lanes = [0.0; 8];
                    lanes[..chunk.len()].copy_from_slice(chunk);
                    // SAFETY: AVX-512F was just detected; `lanes` holds eight f64.
                    let e = unsafe { exp8(_mm512_loadu_pd(lanes.as_ptr())) };
                    // SAFETY: as above.
                    unsafe { _mm512_storeu_pd(lanes.as_mut_ptr(), e) };
                    chunk.copy_from_slice(&lanes[..chunk.len()]);
                }
                assert_eq!(bits(&v), bits(&portable), "exp8 (AVX-512 registers)");
            }
        }
    }
}
