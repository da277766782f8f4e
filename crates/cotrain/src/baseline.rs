//! Evaluation-only baselines [Thomas 2017 §4.1.3, eq 4.4; Yu et al. 2008; docs/decisions.md D24].
//!
//! The centralised oracle pools everything — every party's labelled rows and every view — in
//! Yu et al.'s Bayesian co-training kernel over all points (labelled rows of every party and
//! the test entities):
//!
//! ```text
//! K_c = [ Σ_v (K_v + σ_v² I)⁻¹ ]⁻¹
//! ```
//!
//! where view v's K_v has zero rows and columns for points that view cannot see (a party's
//! labelled rows are visible only in its own view; test entities in every view), so that view
//! contributes σ_v⁻² I there. Prediction conditions K_c on the labels. It is **not private**
//! and costs O((Σn + T)³): a reference line for experiments, never a protocol path.

use crate::CotrainError;
use crate::metrics::{Metrics, metrics};
use crate::party::Party;
use dpcotrain_gp::linalg::{Cholesky, JitterPolicy};
use nalgebra::{DMatrix, DVector};

/// Yu et al.'s co-training-kernel oracle with each party's current hyperparameters.
pub fn yu_oracle(parties: &[&Party]) -> Result<Metrics, CotrainError> {
    let Some(first) = parties.first() else {
        return Err(crate::error::DataError::NoneGiven { what: "party for the oracle" }.into());
    };
    let t = first.data.x_test.nrows();
    let ns: Vec<usize> = parties.iter().map(|p| p.data.x_train.nrows()).collect();
    let n_lab: usize = ns.iter().sum();
    let total = n_lab + t;
    let mut precision = DMatrix::<f64>::zeros(total, total);
    let mut offset = 0;
    let mut noise_mean = 0.0;
    for (v, p) in parties.iter().enumerate() {
        if p.data.x_test.nrows() != t {
            return Err(crate::error::DataError::TestSetsDiffer.into());
        }
        let s2 = p.model.noise.variance;
        noise_mean += s2 / parties.len() as f64;
        // Visible points of view v: its own labelled rows, then all test entities.
        let mut vis: Vec<usize> = (offset..offset + ns[v]).collect();
        vis.extend(n_lab..total);
        let d = p.data.dim();
        let mut xv = DMatrix::zeros(ns[v] + t, d);
        xv.rows_mut(0, ns[v]).copy_from(&p.data.x_train);
        xv.rows_mut(ns[v], t).copy_from(&p.data.x_test);
        let mut kv = p.model.kernel.k(xv.as_view(), xv.as_view());
        for i in 0..kv.nrows() {
            kv[(i, i)] += s2;
        }
        let inv = Cholesky::factor(kv, "oracle K_v + σ²I", JitterPolicy::IF_NEEDED)?.inverse();
        for (a, &ia) in vis.iter().enumerate() {
            for (b, &ib) in vis.iter().enumerate() {
                precision[(ia, ib)] += inv[(a, b)];
            }
        }
        for i in 0..total {
            if !vis.contains(&i) {
                precision[(i, i)] += 1.0 / s2;
            }
        }
        offset += ns[v];
    }
    let kc = Cholesky::factor(precision, "oracle precision", JitterPolicy::IF_NEEDED)?.inverse();
    let kll = kc.view((0, 0), (n_lab, n_lab)).clone_owned();
    let ktl = kc.view((n_lab, 0), (t, n_lab)).clone_owned();
    let y = DVector::from_iterator(n_lab, parties.iter().flat_map(|p| p.data.y_train.iter().copied()));
    let chol = Cholesky::factor(kll, "oracle K_c(L,L)", JitterPolicy::IF_NEEDED)?;
    let mean = &ktl * chol.solve_vec(&y);
    let mut v = ktl.transpose();
    chol.solve_l_in_place(&mut v);
    let var = DVector::from_fn(t, |i, _| (kc[(n_lab + i, n_lab + i)] - v.column(i).norm_squared()).max(0.0));
    Ok(metrics(&mean, &var, noise_mean, &first.data.y_test))
}
