//! Make a reported matrix usable as a covariance (docs/decisions.md D12): symmetrise, then clip
//! negative eigenvalues to zero (the nearest PSD matrix in Frobenius norm).

use nalgebra::DMatrix;

/// Nearest symmetric PSD matrix; returns it and the number of eigenvalues clipped.
pub(crate) fn project_psd(m: &DMatrix<f64>) -> (DMatrix<f64>, usize) {
    let s = (m + m.transpose()) * 0.5;
    let eig = s.clone().symmetric_eigen();
    let clipped = eig.eigenvalues.iter().filter(|v| **v < 0.0).count();
    if clipped == 0 {
        return (s, 0);
    }
    let vals = eig.eigenvalues.map(|v| v.max(0.0));
    let v = &eig.eigenvectors;
    let p = v * DMatrix::from_diagonal(&vals) * v.transpose();
    // V Λ Vᵀ is symmetric only up to rounding; consumers check symmetry, so make it exact.
    ((&p + p.transpose()) * 0.5, clipped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clips_negative_eigenvalues() {
        let m = DMatrix::from_row_slice(2, 2, &[1.0, 2.0, 2.0, 1.0]); // eigenvalues 3, −1
        let (p, c) = project_psd(&m);
        assert_eq!(c, 1);
        let e = p.symmetric_eigen().eigenvalues;
        assert!(e.min() > -1e-12);
        assert!((e.max() - 3.0).abs() < 1e-12);
        // Exactly symmetric output, also with large and tiny entries mixed (a reported
        // covariance plus σ²·K of heavy DP noise).
        let big = DMatrix::from_fn(12, 12, |i, j| {
            500.0 * (-0.5 * ((i as f64 - j as f64) / 3.0).powi(2)).exp()
                + if i == j { 0.0 } else { 1e-3 * ((i * j) % 5) as f64 - 2e-3 }
        });
        let (q, _) = project_psd(&(&big - DMatrix::identity(12, 12) * 1.0));
        assert_eq!(q, q.transpose());
        let pd = DMatrix::from_row_slice(2, 2, &[2.0, 0.5, 0.5, 1.0]);
        assert_eq!(project_psd(&pd), (pd.clone(), 0));
    }
}
