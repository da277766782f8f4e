//! Make a reported matrix usable as a covariance (science-notes D12): symmetrise, then clip
//! negative eigenvalues to zero (the nearest PSD matrix in Frobenius norm).

use nalgebra::DMatrix;

/// Nearest symmetric PSD matrix; returns it and the number of eigenvalues clipped.
pub fn project_psd(m: &DMatrix<f64>) -> (DMatrix<f64>, usize) {
    let s = (m + m.transpose()) * 0.5;
    let eig = s.clone().symmetric_eigen();
    let clipped = eig.eigenvalues.iter().filter(|v| **v < 0.0).count();
    if clipped == 0 {
        return (s, 0);
    }
    let vals = eig.eigenvalues.map(|v| v.max(0.0));
    let v = &eig.eigenvectors;
    (v * DMatrix::from_diagonal(&vals) * v.transpose(), clipped)
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
        let pd = DMatrix::from_row_slice(2, 2, &[2.0, 0.5, 0.5, 1.0]);
        assert_eq!(project_psd(&pd), (pd.clone(), 0));
    }
}
