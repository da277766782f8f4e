//! Uncertainty sampling [Thomas §4.2.1; docs/decisions.md D20]: the querier predicts at every pool
//! index it has not asked yet and picks the one with the largest latent predictive variance;
//! ties go to the lowest index. Which variance (clamped or raw) is a reading
//! ([`crate::readings::SelectionVariance`]).

use crate::CotrainError;
use crate::combiner::CoModel;

/// The next pool index to ask about, or `None` when every index has been asked.
pub(crate) fn most_uncertain(model: &mut CoModel) -> Result<Option<usize>, CotrainError> {
    let asked = model.asked();
    let candidates: Vec<usize> = (0..model.x_pool().nrows()).filter(|i| asked.binary_search(i).is_err()).collect();
    if candidates.is_empty() {
        return Ok(None);
    }
    let xs = model.x_pool().select_rows(candidates.iter());
    let var = model.selection_variance(&xs)?;
    let mut best = 0;
    for k in 1..candidates.len() {
        if var[k] > var[best] {
            best = k;
        }
    }
    Ok(Some(candidates[best]))
}

/// Label-free query selection (docs/honest-dp.md): greedy maximum posterior variance under a
/// **public** kernel, conditioning on the querier's private covariates (noise `noise`) and on the
/// pool points already asked (nominal noise `nominal`), taking `count` indices one at a time
/// (exact rank-one updates). Depends on covariates and public constants only, never on labels,
/// so the indices a querier sends reveal nothing about its labels. Ties go to the lowest index.
pub fn public_greedy(
    kernel: &dyn dpcotrain_gp::Kernel,
    x_private: &nalgebra::DMatrix<f64>,
    x_pool: &nalgebra::DMatrix<f64>,
    asked: &[usize],
    count: usize,
    noise: f64,
    nominal: f64,
) -> Result<Vec<usize>, CotrainError> {
    use dpcotrain_gp::linalg::{Cholesky, JitterPolicy, matmul};
    use nalgebra::DMatrix;
    for (key, v) in
        [("public query selection: noise variance", noise), ("public query selection: nominal noise variance", nominal)]
    {
        if !(v > 0.0 && v.is_finite()) {
            return Err(CotrainError::setting(key, v, "be positive and finite"));
        }
    }
    let candidates: Vec<usize> = (0..x_pool.nrows()).filter(|i| !asked.contains(i)).collect();
    if candidates.is_empty() || count == 0 {
        return Ok(vec![]);
    }
    let xc = x_pool.select_rows(candidates.iter());
    // Conditioning set: private rows, then asked pool rows.
    let xa = x_pool.select_rows(asked.iter());
    let n = x_private.nrows() + xa.nrows();
    let mut cov = kernel.k(xc.as_view(), xc.as_view());
    if n > 0 {
        let mut xs = DMatrix::zeros(n, x_pool.ncols());
        xs.rows_mut(0, x_private.nrows()).copy_from(x_private);
        xs.rows_mut(x_private.nrows(), xa.nrows()).copy_from(&xa);
        let mut kss = kernel.k(xs.as_view(), xs.as_view());
        for i in 0..n {
            kss[(i, i)] += if i < x_private.nrows() { noise } else { nominal };
        }
        let chol = Cholesky::factor(kss, "public selection K_SS + noise", JitterPolicy::IF_NEEDED)?;
        let mut v = kernel.k(xs.as_view(), xc.as_view());
        chol.solve_l_in_place(&mut v);
        cov -= matmul(v.as_view(), true, v.as_view(), false);
    }
    let mut taken = vec![false; candidates.len()];
    let mut out = Vec::with_capacity(count.min(candidates.len()));
    for _ in 0..count.min(candidates.len()) {
        let mut best: Option<usize> = None;
        for k in 0..candidates.len() {
            if !taken[k] && best.is_none_or(|b| cov[(k, k)] > cov[(b, b)]) {
                best = Some(k);
            }
        }
        let p = best.expect("a candidate is left");
        taken[p] = true;
        out.push(candidates[p]);
        // Condition on a nominal observation at p: Σ ← Σ − Σ_{·p}Σ_{p·}/(Σ_pp + nominal).
        let col = cov.column(p).clone_owned();
        let denom = col[p] + nominal;
        cov.ger(-1.0 / denom, &col, &col, 1.0);
    }
    Ok(out)
}
