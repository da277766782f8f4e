//! The register tile of the one-core factorisation and inverse (`left_looking`,
//! `cholesky_inverse`), and the instruction set it runs on, chosen at run time.
//!
//! The tile is an 8-row block of one matrix times an 8-column block of another, summed over a
//! long inner dimension, with the 8 × 8 result in registers: per term one vector load and eight
//! fused multiply-adds against broadcast scalars, as a GEMM microkernel does (Goto & van de Geijn
//! 2008, "Anatomy of high-performance matrix multiplication", ACM TOMS 34(3)). Both operands are
//! read from *row panels*: rows [r, r + 8) of every column, 8 contiguous values per column, so
//! both are contiguous streams.
//!
//! Every entry is one chain of fused multiply-adds in increasing inner index, on every path:
//! AVX-512 computes 8 rows per vector, AVX2 + FMA 4 (a tile in two halves), the baseline one
//! (`f64::mul_add`, in software where the build target has no FMA). So the paths give the same
//! bits (each user tests this), and a result does not depend on which of AVX2 + FMA and AVX-512 the
//! CPU has. The baseline is the reference those tests compare with; in use, a CPU with neither
//! gets faer's routines instead ([`in_hardware`]).

/// Rows per tile and per panel: one AVX-512 vector of f64.
pub(super) const B: usize = 8;

thread_local! {
    /// Panels kept between calls: a fresh buffer of a few hundred kB would be mapped and faulted
    /// in by the allocator on every call (a third of the inverse's time at n = 225).
    static PANELS: std::cell::RefCell<Vec<f64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Run `f` on ⌈n/8⌉ row panels of 8 × n (starting on a 64-byte boundary, one cache line per
/// column of a panel) and `extra` more values, all of unspecified content: this thread's kept
/// buffer, or a fresh one if it is in use.
pub(super) fn with_panels<R>(n: usize, extra: usize, f: impl FnOnce(&mut [f64], &mut [f64]) -> R) -> R {
    let len = n.div_ceil(B) * B * n;
    let run = |buf: &mut Vec<f64>| {
        if buf.len() < len + B + extra {
            buf.resize(len + B + extra, 0.0);
        }
        let skip = buf.as_ptr().align_offset(64).min(B);
        let (panels, rest) = buf[skip..].split_at_mut(len);
        f(panels, &mut rest[..extra])
    };
    PANELS.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => run(&mut buf),
        Err(_) => run(&mut Vec::new()),
    })
}

/// Whether the tile runs in hardware on this CPU (AVX-512, or AVX2 + FMA). Elsewhere its fused
/// multiply-adds would be `f64::mul_add` in software on x86-64, 40–60× slower than faer's
/// routines at n = 100–225 (measured by forcing that path on a Zen 4), so the one-core
/// factorisation and inverse are faer's there (docs/decisions.md D36).
pub(super) fn in_hardware() -> bool {
    Path::detect() != Path::Baseline
}

/// Offset of M[row, col] in row panels of 8 × n.
#[inline(always)]
pub(super) fn at(n: usize, row: usize, col: usize) -> usize {
    (row / B) * B * n + B * col + row % B
}

/// Fill the kept panels with NaN, so that a test sees any value read before it is written.
#[cfg(test)]
pub(super) fn poison_panels() {
    PANELS.with_borrow_mut(|buf| {
        buf.clear();
        buf.resize(300 * 300, f64::NAN);
    });
}

/// The instruction set a kernel runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Path {
    /// AVX-512F (and, for the fused kernels, its FMA).
    Avx512,
    /// AVX2 (with FMA where a kernel fuses).
    Avx2,
    /// Whatever the build targets (x86-64: SSE2).
    Baseline,
}

impl Path {
    #[cfg(test)]
    pub(super) const ALL: [Path; 3] = [Path::Avx512, Path::Avx2, Path::Baseline];

    /// The widest path this CPU has.
    pub(super) fn detect() -> Path {
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx512f") {
                return Path::Avx512;
            }
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                return Path::Avx2;
            }
        }
        Path::Baseline
    }

    /// Whether this CPU can run the path.
    #[cfg(test)]
    pub(super) fn available(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            Path::Avx512 => std::is_x86_feature_detected!("avx512f"),
            #[cfg(target_arch = "x86_64")]
            Path::Avx2 => std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma"),
            #[cfg(not(target_arch = "x86_64"))]
            Path::Avx512 | Path::Avx2 => false,
            Path::Baseline => true,
        }
    }
}

/// Call `f::<V, NB>(args…)` with NB = `nb` (1 to 8) a constant, so that a kernel's loops over
/// the tile's columns unroll and its vectors stay in registers.
macro_rules! with_nb {
    ($nb:expr, $f:ident::<$v:ty>($($arg:expr),* $(,)?)) => {
        match $nb {
            8 => $f::<$v, 8>($($arg),*),
            7 => $f::<$v, 7>($($arg),*),
            6 => $f::<$v, 6>($($arg),*),
            5 => $f::<$v, 5>($($arg),*),
            4 => $f::<$v, 4>($($arg),*),
            3 => $f::<$v, 3>($($arg),*),
            2 => $f::<$v, 2>($($arg),*),
            _ => $f::<$v, 1>($($arg),*),
        }
    };
}
pub(super) use with_nb;

/// The register tile: acc[t] = Σ_{s < k} A_s · b[8s + t] for t < NB, where A_s is the vector
/// at `a + 8s` (W lanes of an 8-row panel's column s), as one fused multiply-add per term in
/// increasing s from zero; acc[t] for t ≥ NB is zero.
///
/// # Safety
/// `a` and `b` point into 8-row panels with at least k columns left; the vector type's
/// instructions are available.
#[inline(always)]
pub(super) unsafe fn tile<V: Lanes, const NB: usize>(a: *const f64, b: *const f64, k: usize) -> [V; B] {
    // SAFETY: the caller's contract: every read is within the k columns.
    unsafe {
        let mut acc = [V::zero(); B];
        for s in 0..k {
            let v = V::load(a.add(B * s));
            let bs = b.add(B * s);
            for (t, at) in acc.iter_mut().enumerate().take(NB) {
                *at = V::fma(v, V::splat(*bs.add(t)), *at);
            }
        }
        acc
    }
}

/// W consecutive f64 lanes, with the few operations the tile needs. `fma` is one rounding on
/// every implementation, so all give the same bits lane by lane.
pub(super) trait Lanes: Copy {
    /// Lanes per vector (divides 8).
    const W: usize;
    /// # Safety
    /// The instructions are available.
    unsafe fn zero() -> Self;
    /// # Safety
    /// `p` is valid for W reads; the instructions are available.
    unsafe fn load(p: *const f64) -> Self;
    /// # Safety
    /// `p` is valid for W writes; the instructions are available.
    unsafe fn store(p: *mut f64, v: Self);
    /// # Safety
    /// The instructions are available.
    unsafe fn splat(x: f64) -> Self;
    /// a·b + c with one rounding.
    /// # Safety
    /// The instructions are available.
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self;
    /// # Safety
    /// The instructions are available.
    unsafe fn mul(a: Self, b: Self) -> Self;
    /// # Safety
    /// The instructions are available.
    unsafe fn sub(a: Self, b: Self) -> Self;
}

/// The baseline: one lane, `f64::mul_add` (a fused multiply-add, in software where the build
/// target has none).
impl Lanes for f64 {
    const W: usize = 1;
    unsafe fn zero() -> Self {
        0.0
    }
    unsafe fn load(p: *const f64) -> Self {
        // SAFETY: the caller's contract.
        unsafe { *p }
    }
    unsafe fn store(p: *mut f64, v: Self) {
        // SAFETY: the caller's contract.
        unsafe { *p = v }
    }
    unsafe fn splat(x: f64) -> Self {
        x
    }
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
        a.mul_add(b, c)
    }
    unsafe fn mul(a: Self, b: Self) -> Self {
        a * b
    }
    unsafe fn sub(a: Self, b: Self) -> Self {
        a - b
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) mod x86 {
    use super::Lanes;
    use std::arch::x86_64::*;

    /// Eight lanes: one AVX-512 register.
    #[derive(Clone, Copy)]
    pub(in crate::linalg) struct V8(__m512d);

    /// Four lanes: one AVX2 register.
    #[derive(Clone, Copy)]
    pub(in crate::linalg) struct V4(__m256d);

    /// `Lanes` for a register type from its intrinsics (each available where the caller's
    /// contract says the vector type's instructions are).
    macro_rules! lanes {
        ($v:ident, $w:expr, $zero:ident, $load:ident, $store:ident, $splat:ident, $fma:ident, $mul:ident, $sub:ident) => {
            impl Lanes for $v {
                const W: usize = $w;
                #[inline(always)]
                unsafe fn zero() -> Self {
                    // SAFETY: the instructions are available (the caller's contract).
                    unsafe { $v($zero()) }
                }
                #[inline(always)]
                unsafe fn load(p: *const f64) -> Self {
                    // SAFETY: the caller's contract.
                    unsafe { $v($load(p)) }
                }
                #[inline(always)]
                unsafe fn store(p: *mut f64, v: Self) {
                    // SAFETY: the caller's contract.
                    unsafe { $store(p, v.0) }
                }
                #[inline(always)]
                unsafe fn splat(x: f64) -> Self {
                    // SAFETY: the caller's contract.
                    unsafe { $v($splat(x)) }
                }
                #[inline(always)]
                unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
                    // SAFETY: the caller's contract.
                    unsafe { $v($fma(a.0, b.0, c.0)) }
                }
                #[inline(always)]
                unsafe fn mul(a: Self, b: Self) -> Self {
                    // SAFETY: the caller's contract.
                    unsafe { $v($mul(a.0, b.0)) }
                }
                #[inline(always)]
                unsafe fn sub(a: Self, b: Self) -> Self {
                    // SAFETY: the caller's contract.
                    unsafe { $v($sub(a.0, b.0)) }
                }
            }
        };
    }

    lanes!(
        V8,
        8,
        _mm512_setzero_pd,
        _mm512_loadu_pd,
        _mm512_storeu_pd,
        _mm512_set1_pd,
        _mm512_fmadd_pd,
        _mm512_mul_pd,
        _mm512_sub_pd
    );
    lanes!(
        V4,
        4,
        _mm256_setzero_pd,
        _mm256_loadu_pd,
        _mm256_storeu_pd,
        _mm256_set1_pd,
        _mm256_fmadd_pd,
        _mm256_mul_pd,
        _mm256_sub_pd
    );
}
