//! Structured preconditioned variational means α (m = K_uu α) on a grid of inducing points
//! (Thomas 2017 ch. 2): a sum of Kronecker products (§2.3.1, α = (1/K) Σ_k ⊗_l α_k⁽ˡ⁾) or a
//! Tucker decomposition (§2.4, eq. 2.6: α = W ×_l U⁽ˡ⁾ with a core W of size q₀ᵖ).
//!
//! Both are written with factor matrices U⁽ˡ⁾ (m_l × q): the sum of K Kronecker products is the
//! rank-K CP form (U⁽ˡ⁾'s column k is α_k⁽ˡ⁾, the "core" is (1/K)·the superdiagonal), the
//! Tucker form has q = q₀ and a dense core. Everything the bound needs goes through
//! - the projections v_l = U⁽ˡ⁾ᵀ k⁽ˡ⁾ of a point's per-dimension covariances: k_{f_i u} α = μ(v),
//! - the Grams G_l = U⁽ˡ⁾ᵀ K_uu⁽ˡ⁾ U⁽ˡ⁾: αᵀ K_uu α = Q(G) (eqs 2.19, 2.21),
//!
//! so no object of size m = Π m_l is formed (only the core, q₀ᵖ).

use super::kron::{kron_mvprod, kron_vectors, mode_gram};
use nalgebra::{DMatrix, DVector};

/// The structure of α.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum MeanStructure {
    /// α = (1/K) Σ_{k=1..K} ⊗_l α_k⁽ˡ⁾ (Thomas 2017 §2.3.1; K = 1 is eq. 2.14).
    SumOfKronecker { rank: usize },
    /// α = W ×_l U⁽ˡ⁾, core W of size q₀ᵖ (Thomas 2017 §2.4, eq. 2.18).
    Tucker { q0: usize },
}

impl MeanStructure {
    /// Columns of each factor matrix.
    pub fn q(&self) -> usize {
        match *self {
            MeanStructure::SumOfKronecker { rank } => rank,
            MeanStructure::Tucker { q0 } => q0,
        }
    }

    /// Free core entries for p dimensions (none for the sum of Kronecker products).
    pub fn core_len(&self, p: usize) -> usize {
        match *self {
            MeanStructure::SumOfKronecker { .. } => 0,
            MeanStructure::Tucker { q0 } => q0.pow(p as u32),
        }
    }

    /// μ = k_{f_i u} α from the projections v_l = U⁽ˡ⁾ᵀ k_{u f_i}⁽ˡ⁾ (eqs 2.17 and 2.19, first term).
    pub fn value(&self, core: &[f64], v: &[DVector<f64>]) -> f64 {
        match *self {
            MeanStructure::SumOfKronecker { rank } => {
                (0..rank).map(|k| v.iter().map(|vl| vl[k]).product::<f64>()).sum::<f64>() / rank as f64
            }
            MeanStructure::Tucker { .. } => {
                let rows: Vec<DMatrix<f64>> =
                    v.iter().map(|vl| DMatrix::from_row_slice(1, vl.len(), vl.as_slice())).collect();
                kron_mvprod(&rows.iter().collect::<Vec<_>>(), core)[0]
            }
        }
    }

    /// Adds μ̄·∂μ/∂v_l to `v_bar[l]` and μ̄·∂μ/∂W to `core_bar`.
    pub fn value_grad(
        &self,
        core: &[f64],
        v: &[DVector<f64>],
        mu_bar: f64,
        v_bar: &mut [DVector<f64>],
        core_bar: &mut [f64],
    ) {
        let p = v.len();
        match *self {
            MeanStructure::SumOfKronecker { rank } => {
                for k in 0..rank {
                    let f: Vec<f64> = v.iter().map(|vl| vl[k]).collect();
                    for (l, vb) in v_bar.iter_mut().enumerate() {
                        vb[k] += mu_bar / rank as f64 * product_except(&f, l);
                    }
                }
            }
            MeanStructure::Tucker { q0 } => {
                let rows: Vec<DMatrix<f64>> =
                    v.iter().map(|vl| DMatrix::from_row_slice(1, vl.len(), vl.as_slice())).collect();
                let eye = DMatrix::identity(q0, q0);
                for (l, vb) in v_bar.iter_mut().enumerate() {
                    let mut fs: Vec<&DMatrix<f64>> = rows.iter().collect();
                    fs[l] = &eye;
                    *vb += kron_mvprod(&fs, core) * mu_bar;
                }
                let outer = kron_vectors(&v.iter().collect::<Vec<_>>());
                for (cb, o) in core_bar.iter_mut().zip(outer.iter()) {
                    *cb += mu_bar * o;
                }
                debug_assert_eq!(core.len(), q0.pow(p as u32));
            }
        }
    }

    /// Q = αᵀ K_uu α from the Grams G_l = U⁽ˡ⁾ᵀ K_uu⁽ˡ⁾ U⁽ˡ⁾. For the sum of Kronecker products
    /// this is the exact (1/K²) Σ_{k,k'} Π_l G_l[k, k'] (the thesis's eq. 2.17 keeps only the
    /// k = k' terms, scaled by 1/K — a looser bound; see docs/results.md).
    pub fn quad(&self, core: &[f64], g: &[DMatrix<f64>]) -> f64 {
        match *self {
            MeanStructure::SumOfKronecker { rank } => {
                let mut s = 0.0;
                for k in 0..rank {
                    for k2 in 0..rank {
                        s += g.iter().map(|gl| gl[(k, k2)]).product::<f64>();
                    }
                }
                s / (rank * rank) as f64
            }
            MeanStructure::Tucker { .. } => {
                let y = kron_mvprod(&g.iter().collect::<Vec<_>>(), core);
                y.iter().zip(core.iter()).map(|(a, b)| a * b).sum()
            }
        }
    }

    /// Adds scale·∂Q/∂G_l to `g_bar[l]` and scale·∂Q/∂W to `core_bar` (the G_l are symmetric).
    pub fn quad_grad(
        &self,
        core: &[f64],
        g: &[DMatrix<f64>],
        scale: f64,
        g_bar: &mut [DMatrix<f64>],
        core_bar: &mut [f64],
    ) {
        let p = g.len();
        match *self {
            MeanStructure::SumOfKronecker { rank } => {
                let c = scale / (rank * rank) as f64;
                for k in 0..rank {
                    for k2 in 0..rank {
                        let f: Vec<f64> = g.iter().map(|gl| gl[(k, k2)]).collect();
                        for (l, gb) in g_bar.iter_mut().enumerate() {
                            gb[(k, k2)] += c * product_except(&f, l);
                        }
                    }
                }
            }
            MeanStructure::Tucker { q0 } => {
                let y = kron_mvprod(&g.iter().collect::<Vec<_>>(), core);
                for (cb, yi) in core_bar.iter_mut().zip(y.iter()) {
                    *cb += 2.0 * scale * yi;
                }
                let eye = DMatrix::identity(q0, q0);
                let dims = vec![q0; p];
                for (l, gb) in g_bar.iter_mut().enumerate() {
                    let mut fs: Vec<&DMatrix<f64>> = g.iter().collect();
                    fs[l] = &eye;
                    let yl = kron_mvprod(&fs, core);
                    *gb += mode_gram(&dims, l, core, yl.as_slice()) * scale;
                }
            }
        }
    }

    /// The dense α (length Π m_l) — for tests and small reference computations only.
    pub fn dense_alpha(&self, core: &[f64], u: &[DMatrix<f64>]) -> DVector<f64> {
        match *self {
            MeanStructure::SumOfKronecker { rank } => {
                let mut a = DVector::zeros(u.iter().map(|ul| ul.nrows()).product());
                for k in 0..rank {
                    let cols: Vec<DVector<f64>> = u.iter().map(|ul| ul.column(k).clone_owned()).collect();
                    a += kron_vectors(&cols.iter().collect::<Vec<_>>()) / rank as f64;
                }
                a
            }
            MeanStructure::Tucker { .. } => kron_mvprod(&u.iter().collect::<Vec<_>>(), core),
        }
    }
}

/// Π_{j ≠ l} f_j without dividing (f_l may be zero).
pub(crate) fn product_except(f: &[f64], l: usize) -> f64 {
    f.iter().enumerate().filter(|&(j, _)| j != l).map(|(_, v)| v).product()
}
