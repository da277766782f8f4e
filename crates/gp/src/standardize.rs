//! Standardisation of inputs and outputs [Hughes-Hallett §3.3.1]: x' = (x − μ_x)/s_x per
//! column, y' = (y − μ_y)/s_y. The affine map is recorded so predictions can be mapped back:
//! mean ↦ μ_y + s_y·mean, variance ↦ s_y²·variance.

use crate::GpError;
use nalgebra::{DMatrix, DVector, RowDVector};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Standardizer {
    pub x_mean: Vec<f64>,
    pub x_scale: Vec<f64>,
    pub y_mean: f64,
    pub y_scale: f64,
}

fn mean_sd(v: impl Iterator<Item = f64> + Clone, n: usize) -> (f64, f64) {
    let mean = v.clone().sum::<f64>() / n as f64;
    let var = if n > 1 { v.map(|a| (a - mean).powi(2)).sum::<f64>() / (n - 1) as f64 } else { 0.0 };
    (mean, var.sqrt())
}

impl Standardizer {
    /// Fit to training data. A constant column (sd 0) gets scale 1, so it maps to 0 rather
    /// than to NaN.
    pub fn fit(x: &DMatrix<f64>, y: &DVector<f64>) -> Result<Self, GpError> {
        let n = x.nrows();
        if y.len() != n {
            return Err(GpError::shape("standardisation", y.len(), "targets", n, "rows of X"));
        }
        if n == 0 {
            return Err(GpError::Empty { what: "rows to standardise" });
        }
        let mut x_mean = Vec::with_capacity(x.ncols());
        let mut x_scale = Vec::with_capacity(x.ncols());
        for col in x.column_iter() {
            let (m, s) = mean_sd(col.iter().copied(), n);
            x_mean.push(m);
            x_scale.push(if s > 0.0 && s.is_finite() { s } else { 1.0 });
        }
        let (y_mean, s) = mean_sd(y.iter().copied(), n);
        let y_scale = if s > 0.0 && s.is_finite() { s } else { 1.0 };
        Ok(Standardizer { x_mean, x_scale, y_mean, y_scale })
    }

    /// The identity map (no standardisation) for `d` input columns.
    pub fn identity(d: usize) -> Self {
        Standardizer { x_mean: vec![0.0; d], x_scale: vec![1.0; d], y_mean: 0.0, y_scale: 1.0 }
    }

    pub fn transform_x(&self, x: &DMatrix<f64>) -> Result<DMatrix<f64>, GpError> {
        if x.ncols() != self.x_mean.len() {
            return Err(GpError::shape("standardiser", x.ncols(), "columns", self.x_mean.len(), "fitted columns"));
        }
        let mean = RowDVector::from_row_slice(&self.x_mean);
        let mut out = x.clone();
        for (j, mut col) in out.column_iter_mut().enumerate() {
            col.add_scalar_mut(-mean[j]);
            col /= self.x_scale[j];
        }
        Ok(out)
    }

    pub fn transform_y(&self, y: &DVector<f64>) -> DVector<f64> {
        y.map(|v| (v - self.y_mean) / self.y_scale)
    }

    pub fn inverse_mean(&self, m: &DVector<f64>) -> DVector<f64> {
        m.map(|v| self.y_mean + self.y_scale * v)
    }

    /// Variances (and covariances) scale by s_y².
    pub fn inverse_var(&self, v: &DVector<f64>) -> DVector<f64> {
        v * (self.y_scale * self.y_scale)
    }

    pub fn inverse_cov(&self, c: &DMatrix<f64>) -> DMatrix<f64> {
        c * (self.y_scale * self.y_scale)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standardizes_and_inverts() {
        let x = DMatrix::from_row_slice(4, 2, &[1.0, 5.0, 2.0, 5.0, 3.0, 5.0, 4.0, 5.0]);
        let y = DVector::from_vec(vec![10.0, 12.0, 14.0, 16.0]);
        let s = Standardizer::fit(&x, &y).unwrap();
        let xs = s.transform_x(&x).unwrap();
        assert!((xs.column(0).sum()).abs() < 1e-12);
        let sd: f64 = (xs.column(0).map(|v| v * v).sum() / 3.0).sqrt();
        assert!((sd - 1.0).abs() < 1e-12);
        // Constant column maps to 0, not NaN.
        assert!(xs.column(1).iter().all(|v| *v == 0.0));
        let ys = s.transform_y(&y);
        assert!((s.inverse_mean(&ys) - &y).abs().max() < 1e-12);
        let v = DVector::from_vec(vec![1.0]);
        assert!((s.inverse_var(&v)[0] - s.y_scale.powi(2)).abs() < 1e-12);
        assert!(s.transform_x(&DMatrix::zeros(2, 3)).is_err());
    }
}
