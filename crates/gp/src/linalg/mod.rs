//! Dense linear algebra: Cholesky with a jitter ladder, triangular solves, log-determinants and
//! the few heavy products a (sparse) GP needs.
//!
//! nalgebra's `DMatrix<f64>` is the API type; the heavy kernels run in faer through zero-copy
//! views (both are column-major). This is the only module that talks to faer, so faer's API churn
//! between minor versions stays here.
//!
//! Stable forms follow Rasmussen & Williams (2006, Algorithm 2.1 and §A.4): K = LLᵀ,
//! log|K| = 2 Σ log L_ii, quadratic forms through
//! z = L⁻¹y. No explicit inverse is formed, except [`Cholesky::inverse`], which the exact-GP
//! gradient needs (W = ααᵀ − K⁻¹ is inherently an N×N matrix).

use faer::linalg::matmul::triangular::BlockStructure;
use faer::{Accum, MatMut, MatRef, Par};
use nalgebra::{DMatrix, DMatrixView, DVector};

mod cholesky_inverse;
mod left_looking;
mod register_tile;

/// Why a factorisation failed. Carries the stage (which matrix), its size and the jitter tried.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LinalgError {
    /// The matrix stayed indefinite after the whole jitter ladder.
    #[error(
        "Cholesky of {stage} ({size}×{size}) failed: not positive definite even with jitter {jitter:.3e} (relative {relative:.1e} of mean diagonal) after {tries} tries"
    )]
    NotPositiveDefinite { stage: &'static str, size: usize, jitter: f64, relative: f64, tries: usize },
    /// The matrix contained NaN or ±inf before factorisation.
    #[error("{stage} ({size}×{size}) contains a non-finite entry (NaN or inf); check the data and hyperparameters")]
    NonFinite { stage: &'static str, size: usize },
}

/// Jitter ladder (as GPflow and GPyTorch do it): ε₀ = `start`·mean(diag) (or `start` itself with
/// [`JitterScale::Absolute`]), ×`factor` per retry, at most `tries` attempts with jitter, then
/// [`LinalgError::NotPositiveDefinite`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JitterPolicy {
    /// Jitter of the first jittered attempt, in the units of `scale`.
    pub start: f64,
    /// Growth factor between attempts.
    pub factor: f64,
    /// Number of jittered attempts.
    pub tries: usize,
    /// Try once with no jitter before the ladder (exact GP, where K + σ²I is usually PD).
    /// Inducing-point matrices K_uu always get jitter (`false`).
    pub try_without: bool,
    /// What the ladder's values are relative to.
    pub scale: JitterScale,
}

/// What the values of a [`JitterPolicy`] ladder are relative to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JitterScale {
    /// ε = value·mean(diag A): scale-free (a fit does not depend on the units of y), and the
    /// jitter moves with the matrix, so gradients through A carry ∂ε/∂A (the default).
    MeanDiagonal,
    /// ε = value, whatever A: GPflow's convention for K_uu (a fixed 10⁻⁶), a constant for
    /// gradients.
    Absolute,
}

impl JitterPolicy {
    /// For K_uu: jitter always applied, 1e-6·mean diag, ×10, 5 tries.
    pub const ALWAYS: JitterPolicy =
        JitterPolicy { start: 1e-6, factor: 10.0, tries: 5, try_without: false, scale: JitterScale::MeanDiagonal };
    /// For K + Σ_noise: first without jitter, then the same ladder.
    pub const IF_NEEDED: JitterPolicy =
        JitterPolicy { start: 1e-6, factor: 10.0, tries: 5, try_without: true, scale: JitterScale::MeanDiagonal };
}

/// The jitter K_uu gets, as a user chooses it (`dpcotrain gp fit --kuu-jitter`): the first rung
/// of K_uu's ladder ([`JitterPolicy::ALWAYS`]'s ×10 retries follow either way, and the jitter
/// used is recorded in [`Jitter`]). docs/decisions.md D29.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KuuJitter {
    /// ε = r·mean(diag K_uu) (default r = 10⁻⁶): scale-free; the fit does not depend on the
    /// units of y.
    Relative(f64),
    /// ε fixed whatever the kernel's variance: `Absolute(1e-6)` is GPflow's objective
    /// (`gpflow.config.default_jitter()`), equal to the default at a mean diagonal of 1.
    Absolute(f64),
}

impl Default for KuuJitter {
    fn default() -> Self {
        KuuJitter::Relative(JitterPolicy::ALWAYS.start)
    }
}

impl KuuJitter {
    /// GPflow's K_uu jitter: a fixed 10⁻⁶.
    pub const GPFLOW: KuuJitter = KuuJitter::Absolute(1e-6);

    /// The K_uu ladder starting at this jitter; the default is [`JitterPolicy::ALWAYS`] itself.
    pub fn policy(self) -> JitterPolicy {
        match self {
            KuuJitter::Relative(r) => JitterPolicy { start: r, ..JitterPolicy::ALWAYS },
            KuuJitter::Absolute(e) => JitterPolicy { start: e, scale: JitterScale::Absolute, ..JitterPolicy::ALWAYS },
        }
    }
}

impl std::fmt::Display for KuuJitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KuuJitter::Relative(r) => write!(f, "relative:{r:e}"),
            KuuJitter::Absolute(e) => write!(f, "absolute:{e:e}"),
        }
    }
}

impl std::str::FromStr for KuuJitter {
    type Err = String;

    /// `relative` (= `relative:1e-6`, the default), `relative:R`, `absolute` (= `absolute:1e-6`,
    /// GPflow's) or `absolute:E`; R and E positive and finite.
    fn from_str(s: &str) -> Result<Self, String> {
        let (kind, value) = match s.trim().split_once(':') {
            Some((k, v)) => (k.trim(), Some(v.trim())),
            None => (s.trim(), None),
        };
        let value = match value {
            None => 1e-6,
            Some(v) => match v.parse::<f64>() {
                Ok(x) if x.is_finite() && x > 0.0 => x,
                _ => return Err(format!("{v:?} is not a positive finite number (e.g. absolute:1e-6)")),
            },
        };
        match kind {
            "relative" => Ok(KuuJitter::Relative(value)),
            "absolute" => Ok(KuuJitter::Absolute(value)),
            _ => Err(format!(
                "{s:?}: expected relative, relative:R (R·mean of K_uu's diagonal; default relative:1e-6) or absolute:E (GPflow's is absolute:1e-6)"
            )),
        }
    }
}

/// The jitter actually added: ε = `absolute` on the diagonal, `relative` = ε/mean(diag A).
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct Jitter {
    pub relative: f64,
    pub absolute: f64,
}

/// A Cholesky factor L (lower triangular, strict upper part zero) of A + εI.
#[derive(Debug, Clone)]
pub struct Cholesky {
    l: DMatrix<f64>,
    jitter: Jitter,
    scale: JitterScale,
}

/// Parallelism for a kernel of about `work` flops: rayon overhead hurts below ~1e8 flops
/// (measured: faer Cholesky M ≤ 500 is slower on 2 threads).
pub(crate) fn par_for(work: f64) -> Par {
    if work >= 1e8 { Par::rayon(0) } else { Par::Seq }
}

fn fref(m: &DMatrix<f64>) -> MatRef<'_, f64> {
    MatRef::from_column_major_slice(m.as_slice(), m.nrows(), m.ncols())
}

fn fmut(m: &mut DMatrix<f64>) -> MatMut<'_, f64> {
    let (r, c) = (m.nrows(), m.ncols());
    MatMut::from_column_major_slice_mut(m.as_mut_slice(), r, c)
}

fn fview<'a>(m: &DMatrixView<'a, f64>) -> MatRef<'a, f64> {
    let (rs, cs) = m.strides();
    // SAFETY: the nalgebra view guarantees that every (i, j) with i < nrows, j < ncols at
    // ptr + i·rs + j·cs is a valid, initialised f64 for the lifetime 'a.
    unsafe { MatRef::from_raw_parts(m.as_ptr(), m.nrows(), m.ncols(), rs as isize, cs as isize) }
}

fn fvec_mut(v: &mut DVector<f64>) -> MatMut<'_, f64> {
    let n = v.len();
    MatMut::from_column_major_slice_mut(v.as_mut_slice(), n, 1)
}

impl Cholesky {
    /// Factor A + εI following the jitter ladder. `stage` names the matrix in errors
    /// (e.g. `"K_uu"`). Only the lower triangle of `a` is read.
    pub fn factor(a: DMatrix<f64>, stage: &'static str, policy: JitterPolicy) -> Result<Self, LinalgError> {
        Self::factor_of(&a, stage, policy)
    }

    /// [`Self::factor`] of a borrowed matrix, which is read and not changed: the factor is
    /// written to a new matrix either way, so a caller that keeps A need not copy it.
    pub fn factor_of(a: &DMatrix<f64>, stage: &'static str, policy: JitterPolicy) -> Result<Self, LinalgError> {
        let n = a.nrows();
        assert_eq!(n, a.ncols(), "Cholesky of a non-square matrix");
        let mean_diag = if n == 0 { 0.0 } else { a.diagonal().sum() / n as f64 };
        // Positive scale for the jitter even if the diagonal mean is not (indefinite input).
        let scale = if mean_diag.is_finite() && mean_diag > 0.0 { mean_diag } else { 1.0 };
        let mut attempts: Vec<f64> = Vec::with_capacity(policy.tries + 1);
        if policy.try_without {
            attempts.push(0.0);
        }
        let mut rel = policy.start;
        for _ in 0..policy.tries {
            attempts.push(rel);
            rel *= policy.factor;
        }
        // A rung's (relative, absolute) jitter.
        let rung = |value: f64| match policy.scale {
            JitterScale::MeanDiagonal => (value, value * scale),
            JitterScale::Absolute => (value / scale, value),
        };
        let par = par_for(n as f64 * n as f64 * n as f64 / 3.0);
        let mut l: Vec<f64> = Vec::new();
        let mut checked_finite = false;
        for &value in &attempts {
            let (relative, eps) = rung(value);
            let ok = factor_rung(a.as_slice(), n, eps, par, &mut l);
            // A pivot at the rounding level is not a positive one: L_ii² is A_ii + ε minus the
            // squares of the row, and below n·ε_mach·(A_ii + ε) it is cancellation noise, whose
            // sign (and so success) depends on the order of the additions. Such a factor makes
            // L⁻¹ amplify rounding by 1/L_ii; the ladder adds jitter instead.
            let resolved = |i: usize| {
                let d = l[i * n + i];
                d * d > n as f64 * f64::EPSILON * (a.as_slice()[i * n + i] + eps)
            };
            if ok && (0..n).all(resolved) {
                let l = DMatrix::from_vec(n, n, l);
                return Ok(Cholesky { l, jitter: Jitter { relative, absolute: eps }, scale: policy.scale });
            }
            // A factorisation that succeeds has read only finite values (a NaN or infinity
            // below the diagonal reaches a later pivot), so finiteness is checked only after
            // the first failure, once.
            if !checked_finite {
                checked_finite = true;
                let finite = (0..n).all(|j| a.as_slice()[j * n + j..(j + 1) * n].iter().all(|v| v.is_finite()));
                if !finite {
                    return Err(LinalgError::NonFinite { stage, size: n });
                }
            }
        }
        let (relative, jitter) = rung(attempts.last().copied().unwrap_or(0.0));
        Err(LinalgError::NotPositiveDefinite { stage, size: n, jitter, relative, tries: attempts.len() })
    }

    /// The lower-triangular factor L.
    pub fn l(&self) -> &DMatrix<f64> {
        &self.l
    }

    /// The jitter that was added to the diagonal.
    pub fn jitter(&self) -> Jitter {
        self.jitter
    }

    /// ∂ε/∂mean(diag A), how the added jitter moves with the matrix: the relative jitter of a
    /// [`JitterScale::MeanDiagonal`] ladder, 0 for an absolute one. A gradient with respect to
    /// A adds `jitter_slope()·tr(Ā)/n` to Ā's diagonal.
    pub fn jitter_slope(&self) -> f64 {
        match self.scale {
            JitterScale::MeanDiagonal => self.jitter.relative,
            JitterScale::Absolute => 0.0,
        }
    }

    pub fn dim(&self) -> usize {
        self.l.nrows()
    }

    /// log|A + εI| = 2 Σ log L_ii.
    pub fn logdet(&self) -> f64 {
        2.0 * self.l.diagonal().iter().map(|d| d.ln()).sum::<f64>()
    }

    /// B ← L⁻¹ B (forward substitution).
    pub fn solve_l_in_place(&self, b: &mut DMatrix<f64>) {
        assert_eq!(b.nrows(), self.dim(), "solve: row mismatch");
        let par = par_for(self.dim() as f64 * self.dim() as f64 * b.ncols() as f64);
        let l = fref(&self.l);
        by_columns(fmut(b), par, &|part| {
            faer::linalg::triangular_solve::solve_lower_triangular_in_place(l, part, Par::Seq)
        });
    }

    /// B ← L⁻ᵀ B (back substitution).
    pub fn solve_lt_in_place(&self, b: &mut DMatrix<f64>) {
        assert_eq!(b.nrows(), self.dim(), "solve: row mismatch");
        let par = par_for(self.dim() as f64 * self.dim() as f64 * b.ncols() as f64);
        let lt = fref(&self.l).transpose();
        by_columns(fmut(b), par, &|part| {
            faer::linalg::triangular_solve::solve_upper_triangular_in_place(lt, part, Par::Seq)
        });
    }

    /// L⁻¹ b.
    pub fn solve_l_vec(&self, b: &DVector<f64>) -> DVector<f64> {
        let mut x = b.clone();
        faer::linalg::triangular_solve::solve_lower_triangular_in_place(fref(&self.l), fvec_mut(&mut x), Par::Seq);
        x
    }

    /// L⁻ᵀ b.
    pub fn solve_lt_vec(&self, b: &DVector<f64>) -> DVector<f64> {
        let mut x = b.clone();
        faer::linalg::triangular_solve::solve_upper_triangular_in_place(
            fref(&self.l).transpose(),
            fvec_mut(&mut x),
            Par::Seq,
        );
        x
    }

    /// (A + εI)⁻¹ b = L⁻ᵀ L⁻¹ b.
    pub fn solve_vec(&self, b: &DVector<f64>) -> DVector<f64> {
        self.solve_lt_vec(&self.solve_l_vec(b))
    }

    /// (A + εI)⁻¹ B.
    pub fn solve(&self, b: &DMatrix<f64>) -> DMatrix<f64> {
        let mut x = b.clone();
        self.solve_l_in_place(&mut x);
        self.solve_lt_in_place(&mut x);
        x
    }

    /// Reverse mode through the factorisation (Murray 2016, "Differentiation of the Cholesky
    /// decomposition", eq. 10): given L̄ = ∂f/∂L (only its lower triangle is read), the
    /// symmetric ∂f/∂A = sym(L⁻ᵀ Φ(Lᵀ L̄) L⁻¹), where Φ keeps the lower triangle and halves
    /// the diagonal. The jitter is the caller's (it depends on A only through mean diag A).
    pub fn backward(&self, l_bar: &DMatrix<f64>) -> DMatrix<f64> {
        let n = self.dim();
        assert_eq!(l_bar.shape(), (n, n), "Cholesky::backward: L̄ shape");
        let mut lower = l_bar.clone();
        for j in 1..n {
            lower.as_mut_slice()[j * n..j * n + j].fill(0.0);
        }
        self.backward_from_product(matmul(self.l.as_view(), true, lower.as_view(), false))
    }

    /// [`Self::backward`] given the product P = Lᵀ L̄ instead of L̄. L̄ may be any matrix whose
    /// lower triangle is ∂f/∂L: Lᵀ times a strictly upper triangular matrix is strictly upper
    /// triangular, which Φ discards, so the result is the same. A model with A = L⁻¹K and
    /// ∂f/∂A = Ḡ has L̄ = −L⁻ᵀ Ḡ Aᵀ, so P = −Ḡ Aᵀ: no product with L, and Ḡ Aᵀ may itself
    /// have a cheaper M×M form (the SVGP bound's).
    pub fn backward_from_product(&self, mut p: DMatrix<f64>) -> DMatrix<f64> {
        let n = self.dim();
        assert_eq!(p.shape(), (n, n), "Cholesky::backward_from_product: P shape");
        for j in 0..n {
            p[(j, j)] *= 0.5;
            for i in 0..j {
                p[(i, j)] = 0.0;
            }
        }
        self.solve_lt_in_place(&mut p);
        let mut p = p.transpose();
        self.solve_lt_in_place(&mut p);
        (&p + p.transpose()) * 0.5
    }

    /// tr (A + εI)⁻¹ = ‖L⁻¹‖²_F: a triangular inverse (n³/3 flops), not the full inverse.
    pub fn trace_inverse(&self) -> f64 {
        let n = self.dim();
        let mut inv = DMatrix::<f64>::zeros(n, n);
        // Unlike the factorisation, the triangular inverse gains from two threads from about
        // n = 300 (n = 500: 0.65 against 1.05 ms on one core, faer 0.24, 2-core Zen 4).
        let par = par_for(4.0 * n as f64 * n as f64 * n as f64);
        faer::linalg::triangular_inverse::invert_lower_triangular(fmut(&mut inv), fref(&self.l), par);
        (0..n).map(|j| inv.as_slice()[j * n + j..(j + 1) * n].iter().map(|v| v * v).sum::<f64>()).sum()
    }

    /// (A + εI)⁻¹ = L⁻ᵀ L⁻¹, symmetric. Only for gradients that need the whole matrix.
    /// Uses a triangular inverse and a triangular product (n³/3 + n³/3 flops).
    pub fn inverse(&self) -> DMatrix<f64> {
        let mut out = self.inverse_lower();
        symmetrize_from_lower(&mut out);
        out
    }

    /// The lower triangle of (A + εI)⁻¹ (the strict upper triangle is zero): [`Self::inverse`]
    /// without the mirroring, for consumers that read only the lower triangle.
    ///
    /// On one core (below [`par_for`]'s threshold) our own two sweeps on one register tile
    /// (`cholesky_inverse`, the same bits on every CPU that has AVX2 + FMA or AVX-512),
    /// 1.4–2.6× faer's inverse at n = 25–400 (docs/decisions.md D36); above it, or where the
    /// tile would run in software (`register_tile::in_hardware`), faer's inverse.
    pub fn inverse_lower(&self) -> DMatrix<f64> {
        let n = self.dim();
        let par = par_for(n as f64 * n as f64 * n as f64 / 3.0);
        if let Par::Seq = par
            && register_tile::in_hardware()
        {
            let mut out = DMatrix::<f64>::zeros(n, n);
            cholesky_inverse::inverse_lower(self.l.as_slice(), n, out.as_mut_slice());
            return out;
        }
        faer_inverse_on(&self.l, par)
    }
}

/// Columns per task of [`by_columns`], at least: faer's one-column solve takes another path
/// (other bits); from 3 columns on, a block of columns gets the bits of the whole solve.
const MIN_SPLIT_COLUMNS: usize = 16;

/// Run a triangular solve on B's columns: with `par` parallel, as one sequential solve per
/// core on a contiguous block of columns (at least [`MIN_SPLIT_COLUMNS`] each). The columns of
/// a triangular solve are independent, so this splits the work without a barrier, where faer's
/// parallel solve synchronises at every block of rows: 1.17–1.24× faster at M = 500 with 500
/// or 1,000 right-hand sides on 2 cores (docs/results.md "Speed"), and bit-identical to the
/// sequential solve (tested), so the thread count does not change a result.
fn by_columns(b: MatMut<'_, f64>, par: Par, solve: &(dyn Fn(MatMut<'_, f64>) + Sync)) {
    let threads = match par {
        Par::Seq => 1,
        Par::Rayon(n) => n.get(),
    };
    let pieces = threads.min(b.ncols() / MIN_SPLIT_COLUMNS).max(1);
    split_columns(b, pieces, solve);
}

fn split_columns(b: MatMut<'_, f64>, pieces: usize, solve: &(dyn Fn(MatMut<'_, f64>) + Sync)) {
    if pieces <= 1 {
        return solve(b);
    }
    let left = pieces / 2;
    let at = b.ncols() * left / pieces;
    let (l, r) = b.split_at_col_mut(at);
    rayon::join(|| split_columns(l, left, solve), || split_columns(r, pieces - left, solve));
}

/// One rung of [`Cholesky::factor_of`]'s ladder: the factor of A + εI (A n × n, column-major,
/// its lower triangle read) into `l`, zero above the diagonal. On one core the left-looking
/// factorisation on the register tile, 1.4–1.5× faster than faer's at n = 50–400 and slower at
/// n = 25 (1.3 against 1.0 µs) (docs/decisions.md D34, D36); above [`par_for`]'s threshold,
/// or where the tile would run in software (`register_tile::in_hardware`), faer's. Returns
/// whether every pivot was positive and finite.
fn factor_rung(a: &[f64], n: usize, eps: f64, par: Par, l: &mut Vec<f64>) -> bool {
    factor_rung_on(a, n, eps, par, register_tile::in_hardware(), l)
}

/// [`factor_rung`], told whether the register tile runs in hardware (so that a test can take
/// the path of a CPU without it).
fn factor_rung_on(a: &[f64], n: usize, eps: f64, par: Par, tile: bool, l: &mut Vec<f64>) -> bool {
    match par {
        Par::Seq if tile => left_looking::factor(a, n, eps, l),
        _ => {
            l.clear();
            l.extend_from_slice(a);
            for i in 0..n {
                l[i * n + i] += eps;
            }
            let ok = factor_in_place(l, n, par);
            // Zero the strict upper triangle (faer leaves it untouched).
            for j in 1..n {
                l[j * n..j * n + j].fill(0.0);
            }
            ok
        }
    }
}

/// faer's (blocked, right-looking, parallel) factorisation of an n × n column-major matrix in
/// place, for the sizes above [`par_for`]'s threshold (and [`faer_factor`]'s reference).
fn factor_in_place(a: &mut [f64], n: usize, par: Par) -> bool {
    use faer::dyn_stack::{MemBuffer, MemStack};
    use faer::linalg::cholesky::llt::factor::{LltRegularization, cholesky_in_place, cholesky_in_place_scratch};
    let req = cholesky_in_place_scratch::<f64>(n, par, Default::default());
    let mut buf = MemBuffer::new(req);
    let stack = MemStack::new(&mut buf);
    let m = MatMut::from_column_major_slice_mut(&mut *a, n, n);
    let ok = cholesky_in_place(m, LltRegularization::default(), par, stack, Default::default()).is_ok();
    ok && (0..n).all(|i| a[i * n + i].is_finite() && a[i * n + i] > 0.0)
}

/// faer's one-core factorisation of A (a copy) without the jitter ladder: the reference
/// `bench gp` times [`Cholesky::factor_of`]'s left-looking path against, in the same run
/// (docs/decisions.md D34). Returns whether A is positive definite.
pub fn faer_factor(a: &DMatrix<f64>) -> bool {
    assert_eq!(a.nrows(), a.ncols(), "Cholesky of a non-square matrix");
    let n = a.nrows();
    let mut l = a.as_slice().to_vec();
    factor_in_place(&mut l, n, Par::Seq)
}

/// faer's one-core inverse from a Cholesky factor L (lower triangle read), its lower triangle
/// with zeros above: the reference `bench gp` times [`Cholesky::inverse_lower`]'s one-core
/// path against, in the same run (docs/decisions.md D35, D36).
pub fn faer_inverse(l: &DMatrix<f64>) -> DMatrix<f64> {
    faer_inverse_on(l, Par::Seq)
}

/// faer's inverse from the factor L, on `par`: the lower triangle of (LLᵀ)⁻¹, zeros above.
fn faer_inverse_on(l: &DMatrix<f64>, par: Par) -> DMatrix<f64> {
    use faer::dyn_stack::{MemBuffer, MemStack};
    let n = l.nrows();
    let mut out = DMatrix::<f64>::zeros(n, n);
    let mut buf = MemBuffer::new(faer::linalg::cholesky::llt::inverse::inverse_scratch::<f64>(n, par));
    faer::linalg::cholesky::llt::inverse::inverse(fmut(&mut out), fref(l), par, MemStack::new(&mut buf));
    for j in 1..n {
        out.as_mut_slice()[j * n..j * n + j].fill(0.0);
    }
    out
}

/// Copy the lower triangle onto the upper one.
pub(crate) fn symmetrize_from_lower(a: &mut DMatrix<f64>) {
    let n = a.nrows();
    for j in 1..n {
        for i in 0..j {
            a[(i, j)] = a[(j, i)];
        }
    }
}

/// A Aᵀ (SYRK, full symmetric result). A is M×N with N possibly large.
pub fn aat(a: &DMatrix<f64>) -> DMatrix<f64> {
    let mut out = DMatrix::<f64>::zeros(a.nrows(), a.nrows());
    aat_acc(a.as_view(), &mut out, 1.0, false);
    symmetrize_from_lower(&mut out);
    out
}

/// out(lower) ← [out(lower) +] α·A Aᵀ. Only the lower triangle of `out` is written; call
/// [`symmetrize_from_lower`] after the last accumulation.
pub(crate) fn aat_acc(a: DMatrixView<'_, f64>, out: &mut DMatrix<f64>, alpha: f64, accumulate: bool) {
    let m = a.nrows();
    assert_eq!(out.nrows(), m);
    let par = par_for(m as f64 * m as f64 * a.ncols() as f64);
    faer::linalg::matmul::triangular::matmul(
        fmut(out),
        BlockStructure::TriangularLower,
        if accumulate { Accum::Add } else { Accum::Replace },
        fview(&a),
        BlockStructure::Rectangular,
        fview(&a).transpose(),
        BlockStructure::Rectangular,
        alpha,
        par,
    );
}

/// out(lower) ← [out(lower) +] α·AᵀA for a tall A (K×M): the Gram product with the summed
/// index contiguous in memory. On the stored transpose (A Aᵀ of an M×K matrix,
/// `aat_acc`) faer ran the same product 1.3–1.5× slower at M = 500, K = 10⁵ (docs/results.md
/// "Speed"). Only the lower triangle of `out` is written.
pub fn ata_acc(a: DMatrixView<'_, f64>, out: &mut DMatrix<f64>, alpha: f64, accumulate: bool) {
    let m = a.ncols();
    assert_eq!(out.nrows(), m);
    let par = par_for(m as f64 * m as f64 * a.nrows() as f64);
    let fa = fview(&a);
    faer::linalg::matmul::triangular::matmul(
        fmut(out),
        BlockStructure::TriangularLower,
        if accumulate { Accum::Add } else { Accum::Replace },
        fa.transpose(),
        BlockStructure::Rectangular,
        fa,
        BlockStructure::Rectangular,
        alpha,
        par,
    );
}

/// out ← [β·out +] α·op(A)·op(B), where op transposes when the flag is set.
pub fn gemm(
    out: &mut DMatrix<f64>,
    alpha: f64,
    a: DMatrixView<'_, f64>,
    ta: bool,
    b: DMatrixView<'_, f64>,
    tb: bool,
    accumulate: bool,
) {
    let fa = if ta { fview(&a).transpose() } else { fview(&a) };
    let fb = if tb { fview(&b).transpose() } else { fview(&b) };
    assert_eq!(fa.ncols(), fb.nrows(), "gemm: inner dimension mismatch");
    assert_eq!((out.nrows(), out.ncols()), (fa.nrows(), fb.ncols()), "gemm: output shape mismatch");
    let par = par_for(2.0 * fa.nrows() as f64 * fa.ncols() as f64 * fb.ncols() as f64);
    faer::linalg::matmul::matmul(fmut(out), if accumulate { Accum::Add } else { Accum::Replace }, fa, fb, alpha, par);
}

/// op(A)·op(B) as a new matrix.
pub fn matmul(a: DMatrixView<'_, f64>, ta: bool, b: DMatrixView<'_, f64>, tb: bool) -> DMatrix<f64> {
    let r = if ta { a.ncols() } else { a.nrows() };
    let c = if tb { b.nrows() } else { b.ncols() };
    let mut out = DMatrix::<f64>::zeros(r, c);
    gemm(&mut out, 1.0, a, ta, b, tb, false);
    out
}

/// Squared column norms: out_j = Σ_i A_ij².
pub fn col_sq_norms(a: &DMatrix<f64>) -> DVector<f64> {
    DVector::from_iterator(a.ncols(), a.column_iter().map(|c| c.norm_squared()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn random(r: usize, c: usize, seed: u64) -> DMatrix<f64> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        DMatrix::from_fn(r, c, |_, _| rng.random_range(-1.0..1.0))
    }

    fn spd(n: usize, seed: u64) -> DMatrix<f64> {
        let a = random(n, n + 3, seed);
        &a * a.transpose() + DMatrix::identity(n, n) * 0.1
    }

    /// Murray's reverse mode equals central differences of ⟨G, chol(A)⟩ in each symmetric
    /// pair (A_ij, A_ji) moved together.
    #[test]
    fn cholesky_backward_matches_finite_differences() {
        let n = 6;
        let a = spd(n, 11);
        let g = random(n, n, 12);
        let policy = JitterPolicy { start: 0.0, tries: 1, ..JitterPolicy::IF_NEEDED };
        let f = |a: &DMatrix<f64>| {
            let l = Cholesky::factor(a.clone(), "A", policy).unwrap();
            (0..n).flat_map(|j| (j..n).map(move |i| (i, j))).map(|(i, j)| g[(i, j)] * l.l()[(i, j)]).sum::<f64>()
        };
        let an = Cholesky::factor(a.clone(), "A", policy).unwrap().backward(&g);
        let h = 1e-6;
        for j in 0..n {
            for i in j..n {
                let shift = |s: f64| {
                    let mut b = a.clone();
                    b[(i, j)] += s;
                    if i != j {
                        b[(j, i)] += s;
                    }
                    f(&b)
                };
                let fd = (shift(h) - shift(-h)) / (2.0 * h);
                let analytic = if i == j { an[(i, i)] } else { an[(i, j)] + an[(j, i)] };
                assert!((fd - analytic).abs() < 1e-6 * (1.0 + fd.abs()), "({i},{j}): {analytic} vs {fd}");
            }
        }
    }

    /// Given Lᵀ L̄ for a *full* L̄ (upper part not zero), the reverse mode equals `backward` of
    /// L̄'s lower triangle: the upper part cannot leak in. A wrong Φ (not discarding the
    /// strict upper triangle of the product) fails this.
    #[test]
    fn cholesky_backward_from_a_full_product_ignores_the_upper_part() {
        let n = 7;
        let c = Cholesky::factor(spd(n, 21), "A", JitterPolicy::IF_NEEDED).unwrap();
        let l_bar = random(n, n, 22);
        let from_product = c.backward_from_product(matmul(c.l().as_view(), true, l_bar.as_view(), false));
        let from_lower = c.backward(&l_bar);
        let upper_part = l_bar.upper_triangle() - DMatrix::from_diagonal(&l_bar.diagonal());
        assert!(upper_part.abs().max() > 0.1, "the test needs an upper part");
        let err = (&from_product - &from_lower).abs().max();
        assert!(err < 1e-12 * from_lower.abs().max(), "max difference {err}");
    }

    /// The column-split solves give the sequential solve's bits, whatever the number of pieces
    /// (widths at and above the minimum, ragged splits included), in both directions.
    #[test]
    fn column_split_solves_are_bit_identical_to_one_solve() {
        let n = 70;
        let c = Cholesky::factor(spd(n, 5), "A", JitterPolicy::IF_NEEDED).unwrap();
        let b0 = random(n, 5 * MIN_SPLIT_COLUMNS + 3, 6);
        let solve_l = |part: MatMut<'_, f64>| {
            faer::linalg::triangular_solve::solve_lower_triangular_in_place(fref(c.l()), part, Par::Seq)
        };
        let solve_lt = |part: MatMut<'_, f64>| {
            faer::linalg::triangular_solve::solve_upper_triangular_in_place(fref(c.l()).transpose(), part, Par::Seq)
        };
        for solve in [&solve_l as &(dyn Fn(MatMut<'_, f64>) + Sync), &solve_lt] {
            let mut whole = b0.clone();
            solve(fmut(&mut whole));
            for pieces in 2..=5 {
                let mut split = b0.clone();
                split_columns(fmut(&mut split), pieces, solve);
                let same = whole.iter().zip(split.iter()).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{pieces} pieces differ from one solve");
            }
        }
        // And the public solves, on a problem big enough to run in parallel.
        let big = Cholesky::factor(spd(500, 7), "A", JitterPolicy::IF_NEEDED).unwrap();
        let b = random(500, 600, 8);
        let (mut ours, mut seq) = (b.clone(), b.clone());
        big.solve_l_in_place(&mut ours);
        faer::linalg::triangular_solve::solve_lower_triangular_in_place(fref(big.l()), fmut(&mut seq), Par::Seq);
        assert!(ours.iter().zip(seq.iter()).all(|(a, b)| a.to_bits() == b.to_bits()));
    }

    /// tr A⁻¹ from the triangular inverse equals the trace of the full inverse.
    #[test]
    fn trace_inverse_equals_the_inverse_trace() {
        for &n in &[1usize, 6, 90] {
            let c = Cholesky::factor(spd(n, 40 + n as u64), "A", JitterPolicy::IF_NEEDED).unwrap();
            let want = c.inverse().trace();
            assert!((c.trace_inverse() - want).abs() < 1e-12 * want, "n = {n}: {} vs {want}", c.trace_inverse());
        }
    }

    /// The Gram product of a tall strided view, accumulated over two row blocks, equals
    /// nalgebra's AᵀA in the lower triangle and leaves the strict upper triangle alone.
    #[test]
    fn ata_acc_matches_nalgebra() {
        let big = random(300, 9, 31);
        let a = big.view((2, 1), (290, 7));
        let mut s = DMatrix::from_element(7, 7, f64::NAN);
        ata_acc(a.rows(0, 100), &mut s, 1.0, false);
        ata_acc(a.rows(100, 190), &mut s, 1.0, true);
        let want = a.transpose() * a;
        for j in 0..7 {
            for i in 0..7 {
                if i >= j {
                    assert!((s[(i, j)] - want[(i, j)]).abs() < 1e-12 * want[(i, j)].abs().max(1.0), "({i},{j})");
                } else {
                    assert!(s[(i, j)].is_nan(), "({i},{j}) written");
                }
            }
        }
    }

    #[test]
    fn cholesky_reconstructs_and_solves() {
        for &n in &[1usize, 5, 40, 130] {
            let a = spd(n, n as u64);
            let c = Cholesky::factor(a.clone(), "A", JitterPolicy::IF_NEEDED).unwrap();
            assert_eq!(c.jitter().absolute, 0.0);
            let l = c.l();
            let err = (l * l.transpose() - &a).abs().max();
            assert!(err < 1e-10 * a.abs().max(), "n={n} err={err}");
            for j in 1..n {
                for i in 0..j {
                    assert_eq!(l[(i, j)], 0.0);
                }
            }
            let b = random(n, 3, 9);
            let x = c.solve(&b);
            assert!((&a * &x - &b).abs().max() < 1e-8);
            let ld = a.clone().cholesky().unwrap().l().diagonal().map(|d| d.ln()).sum() * 2.0;
            assert!((c.logdet() - ld).abs() < 1e-10 * ld.abs().max(1.0));
            let inv = c.inverse();
            assert!((&a * &inv - DMatrix::identity(n, n)).abs().max() < 1e-8);
            let low = c.inverse_lower();
            assert_eq!(low, inv.lower_triangle());
            let bv = DVector::from_column_slice(b.column(0).as_slice());
            assert!((c.solve_vec(&bv) - x.column(0)).abs().max() < 1e-10);
        }
    }

    /// Both of `inverse_lower`'s paths (our register-tile inverse below the threshold, faer's
    /// parallel inverse above it) agree with faer's one-core inverse, the bench's reference, and
    /// leave zeros above the diagonal.
    #[test]
    fn inverse_lower_agrees_with_faers_inverse_on_both_paths() {
        for n in [9usize, 130, 700] {
            let c = Cholesky::factor(spd(n, 3 + n as u64), "A", JitterPolicy::IF_NEEDED).unwrap();
            let (ours, theirs) = (c.inverse_lower(), faer_inverse(c.l()));
            let scale = theirs.abs().max();
            assert!((&ours - &theirs).abs().max() < 1e-12 * scale, "n = {n}: differs from faer's inverse");
            for j in 1..n {
                assert!(ours.as_slice()[j * n..j * n + j].iter().all(|&v| v == 0.0), "n = {n}: nonzero above");
                assert!(
                    theirs.as_slice()[j * n..j * n + j].iter().all(|&v| v == 0.0),
                    "n = {n}: faer's, nonzero above"
                );
            }
        }
    }

    /// A CPU without the register tile in hardware factors with faer (`factor_rung_on`'s other
    /// branch): the same factor to round-off, zeros above, and the same refusals.
    #[test]
    fn without_the_tile_in_hardware_faer_factors_alike() {
        for n in [1usize, 9, 130] {
            let a = spd(n, 21 + n as u64);
            let (mut ours, mut theirs) = (Vec::new(), Vec::new());
            assert!(factor_rung_on(a.as_slice(), n, 1e-9, Par::Seq, true, &mut ours));
            assert!(factor_rung_on(a.as_slice(), n, 1e-9, Par::Seq, false, &mut theirs));
            let worst = ours.iter().zip(&theirs).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
            assert!(worst < 1e-12, "n = {n}: the two factors differ by {worst:e}");
            for j in 1..n {
                assert!(theirs[j * n..j * n + j].iter().all(|&v| v == 0.0), "n = {n}: nonzero above");
            }
        }
        let mut not_pd = DMatrix::from_element(4, 4, 1.0);
        not_pd[(1, 1)] = 0.5;
        for tile in [true, false] {
            assert!(!factor_rung_on(not_pd.as_slice(), 4, 0.0, Par::Seq, tile, &mut Vec::new()), "tile = {tile}");
        }
    }

    #[test]
    fn jitter_ladder_records_jitter_and_fails_with_typed_error() {
        // Rank-1 PSD matrix: needs jitter.
        let v = DVector::from_vec(vec![1.0, 2.0, 3.0]);
        let a = &v * v.transpose();
        let c = Cholesky::factor(a.clone(), "K_uu", JitterPolicy::IF_NEEDED).unwrap();
        assert!(c.jitter().relative >= 1e-6);
        let mean_diag = a.diagonal().sum() / 3.0;
        assert!((c.jitter().absolute - c.jitter().relative * mean_diag).abs() < 1e-15);
        // Always-jitter policy adds 1e-6·mean diag even to a PD matrix.
        let c2 = Cholesky::factor(DMatrix::identity(3, 3), "K_uu", JitterPolicy::ALWAYS).unwrap();
        assert_eq!(c2.jitter().relative, 1e-6);
        // Indefinite matrix: typed error naming the stage.
        let bad = DMatrix::from_row_slice(2, 2, &[1.0, 0.0, 0.0, -1.0]);
        match Cholesky::factor(bad, "K_test", JitterPolicy::IF_NEEDED) {
            Err(LinalgError::NotPositiveDefinite { stage, size, tries, .. }) => {
                assert_eq!((stage, size, tries), ("K_test", 2, 6));
            }
            other => panic!("expected failure, got {other:?}"),
        }
        let mut nan = DMatrix::identity(2, 2);
        nan[(1, 0)] = f64::NAN;
        assert!(matches!(Cholesky::factor(nan, "K", JitterPolicy::IF_NEEDED), Err(LinalgError::NonFinite { .. })));
        // Finiteness is checked after a failed attempt: an infinity anywhere in the lower
        // triangle must still fail the factorisation and be named, in both of its paths.
        for n in [3, 700] {
            for (i, j) in [(n - 1, n - 1), (n - 1, 0), (1, 0)] {
                let mut inf = DMatrix::identity(n, n);
                inf[(i, j)] = f64::INFINITY;
                let got = Cholesky::factor(inf, "K", JitterPolicy::IF_NEEDED);
                assert!(matches!(got, Err(LinalgError::NonFinite { .. })), "n = {n}, ({i}, {j}): {got:?}");
            }
        }
    }

    /// A rank-deficient PSD matrix (B Bᵀ with B n × (n − 1)) has a pivot that is zero in exact
    /// arithmetic and rounding noise of either sign in floating point. When the bare
    /// factorisation accepts it below n·ε_mach·A_ii, `factor_of` climbs the ladder instead: no
    /// factor it returns has a pivot at that level. Some seeds put the noise there (checked, so
    /// the test exercises the rule).
    #[test]
    fn a_pivot_at_the_rounding_level_climbs_the_jitter_ladder() {
        let mut exercised = 0;
        for n in [6, 40, 700] {
            for seed in 0..12 {
                let b = random(n, n - 1, seed);
                let a = &b * b.transpose();
                let level = |l: &DMatrix<f64>, eps: f64| {
                    (0..n).all(|i| l[(i, i)] * l[(i, i)] > n as f64 * f64::EPSILON * (a[(i, i)] + eps))
                };
                let mut bare = Vec::new();
                let ok = factor_rung(a.as_slice(), n, 0.0, par_for((n * n * n) as f64 / 3.0), &mut bare);
                if ok && !level(&DMatrix::from_vec(n, n, bare), 0.0) {
                    exercised += 1;
                    let c = Cholesky::factor_of(&a, "A", JitterPolicy::IF_NEEDED).expect("the ladder factors it");
                    assert!(c.jitter().absolute > 0.0, "n = {n}, seed {seed}: a rounding-level pivot was accepted");
                }
                if let Ok(c) = Cholesky::factor_of(&a, "A", JitterPolicy::IF_NEEDED) {
                    assert!(level(c.l(), c.jitter().absolute), "n = {n}, seed {seed}: a pivot at the rounding level");
                }
            }
        }
        assert!(
            exercised >= 3,
            "only {exercised} matrices had a rounding-level pivot accepted by the bare factorisation"
        );
    }

    /// An absolute ladder adds `start`·factorᵏ whatever the matrix's scale, records it with its
    /// share of the mean diagonal, and is a constant for gradients (`jitter_slope` 0); the
    /// relative ladder's slope is its relative jitter.
    #[test]
    fn absolute_jitter_ladder_adds_a_fixed_epsilon() {
        let policy = KuuJitter::Absolute(1e-6).policy();
        assert_eq!(policy.scale, JitterScale::Absolute);
        let c = Cholesky::factor(DMatrix::identity(3, 3) * 4.0, "K_uu", policy).unwrap();
        assert_eq!(c.jitter(), Jitter { relative: 2.5e-7, absolute: 1e-6 });
        assert_eq!(c.jitter_slope(), 0.0);
        let l = c.l();
        assert!((l[(0, 0)] * l[(0, 0)] - (4.0 + 1e-6)).abs() < 1e-15);
        // A rank-1 matrix of mean diagonal 14/3 needs more than 1e-6·14/3: the ladder climbs
        // in absolute steps.
        let v = DVector::from_vec(vec![1.0, 2.0, 3.0]);
        let c = Cholesky::factor(&v * v.transpose(), "K_uu", policy).unwrap();
        let eps = c.jitter().absolute;
        assert!([1e-6, 1e-5, 1e-4, 1e-3, 1e-2].iter().any(|e| (eps - e).abs() < 1e-18), "{eps}");
        assert!((c.jitter().relative - eps * 3.0 / 14.0).abs() < 1e-18);
        let r = Cholesky::factor(DMatrix::identity(3, 3) * 4.0, "K_uu", JitterPolicy::ALWAYS).unwrap();
        assert_eq!((r.jitter().absolute, r.jitter_slope()), (4e-6, 1e-6));
        // Failure names the absolute jitter of the last rung.
        let bad = DMatrix::from_row_slice(2, 2, &[1.0, 0.0, 0.0, -1.0]);
        match Cholesky::factor(bad, "K_uu", policy) {
            Err(LinalgError::NotPositiveDefinite { jitter, tries: 5, .. }) => assert!((jitter - 1e-2).abs() < 1e-15),
            other => panic!("expected failure, got {other:?}"),
        }
    }

    #[test]
    fn kuu_jitter_parses_and_prints() {
        for (s, want) in [
            ("relative", KuuJitter::Relative(1e-6)),
            ("relative:1e-5", KuuJitter::Relative(1e-5)),
            ("absolute", KuuJitter::GPFLOW),
            ("absolute:1e-6", KuuJitter::Absolute(1e-6)),
            (" absolute : 0.001 ", KuuJitter::Absolute(1e-3)),
        ] {
            assert_eq!(s.parse::<KuuJitter>(), Ok(want), "{s}");
            assert_eq!(want.to_string().parse::<KuuJitter>(), Ok(want), "{want}");
        }
        assert_eq!(KuuJitter::GPFLOW.to_string(), "absolute:1e-6");
        for bad in ["", "abs:1e-6", "absolute:", "absolute:0", "absolute:-1e-6", "absolute:nan", "relative:inf", "1e-6"]
        {
            let err = bad.parse::<KuuJitter>().unwrap_err();
            assert!(err.contains("positive finite") || err.contains("expected relative"), "{bad}: {err}");
        }
    }

    #[test]
    fn products_match_nalgebra() {
        let a = random(7, 300, 1);
        let g = aat(&a);
        assert!((&g - &a * a.transpose()).abs().max() < 1e-12);
        let b = random(300, 4, 2);
        let c = matmul(a.as_view(), false, b.as_view(), false);
        assert!((&c - &a * &b).abs().max() < 1e-12);
        let d = matmul(b.as_view(), true, a.as_view(), true);
        assert!((&d - b.transpose() * a.transpose()).abs().max() < 1e-12);
        // Strided row view.
        let big = random(50, 3, 3);
        let view = big.rows(10, 20);
        let e = matmul(view, false, view, true);
        let owned = view.clone_owned();
        assert!((&e - &owned * owned.transpose()).abs().max() < 1e-12);
    }
}
