//! What one party holds, addressed by entity index (Thomas 2017 §4.2.1, Fig 4.2).
//!
//! Every party sees the same shared pool of unlabelled entities and the same test entities **by
//! index**, each through its own covariate view. Labels of the private rows never leave the
//! party; test labels are for evaluation only.

use nalgebra::{DMatrix, DVector};

/// One party's private view of the world.
#[derive(Debug, Clone, PartialEq)]
pub struct PartyData {
    pub name: String,
    /// Names of this party's covariate columns.
    pub columns: Vec<String>,
    /// Private labelled rows (n_i × d_i) and their labels.
    pub x_train: DMatrix<f64>,
    pub y_train: DVector<f64>,
    /// This party's covariates of the shared unlabelled pool (P × d_i); row j is pool index j.
    pub x_pool: DMatrix<f64>,
    /// This party's covariates of the shared test entities (T × d_i) and the test labels.
    pub x_test: DMatrix<f64>,
    pub y_test: DVector<f64>,
}

/// Whether each column of `x` takes one value on every row (to 10⁻¹² relative). Fewer than two
/// rows show nothing of how a column varies: no column is reported.
pub fn constant_columns(x: &DMatrix<f64>) -> Vec<bool> {
    (0..x.ncols())
        .map(|j| {
            let c = x.column(j);
            x.nrows() >= 2 && c.max() - c.min() <= 1e-12 * c.amax().max(1.0)
        })
        .collect()
}

/// A covariate that takes one value on every private labelled row: a party that has seen one
/// value of a category (one sex, one class type). Its rows cannot tell how much the covariate
/// matters, so the model's predictions at the pool's other values are extrapolation
/// (docs/results.md, "The twelfth pass"). Label-free; for the party's own operator.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ConstantCovariate {
    /// The column's name in this party's view.
    pub column: String,
    /// Pool entities at another value of it (the extrapolation a peer's answers would fill).
    pub pool_rows_elsewhere: usize,
    /// Pool entities in all.
    pub pool_rows: usize,
}

impl std::fmt::Display for ConstantCovariate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "covariate {:?} takes one value on every labelled row and another at {} of {} pool entities: \
             predictions at another value are extrapolation",
            self.column, self.pool_rows_elsewhere, self.pool_rows
        )
    }
}

impl PartyData {
    /// The covariates constant on the private labelled rows, in column order.
    pub fn constant_covariates(&self) -> Vec<ConstantCovariate> {
        constant_columns(&self.x_train)
            .iter()
            .enumerate()
            .filter(|(_, c)| **c)
            .map(|(j, _)| {
                let seen = self.x_train[(0, j)];
                let tol = 1e-12 * seen.abs().max(1.0);
                ConstantCovariate {
                    column: self.columns.get(j).cloned().unwrap_or_else(|| format!("column {j}")),
                    pool_rows_elsewhere: self.x_pool.column(j).iter().filter(|v| (*v - seen).abs() > tol).count(),
                    pool_rows: self.x_pool.nrows(),
                }
            })
            .collect()
    }

    pub fn dim(&self) -> usize {
        self.x_train.ncols()
    }
    pub fn pool_size(&self) -> usize {
        self.x_pool.nrows()
    }
}

/// A co-training scenario: the parties over one shared pool and test set.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    pub parties: Vec<PartyData>,
    /// Human-readable description of how it was generated.
    pub description: String,
    /// The pool entities' labels where the generator knows them (simulated and shipped data;
    /// None for a user's views). Never given to a party: only the harm study's oracle
    /// (`frontier::trace_run`) reads them.
    pub pool_labels: Option<DVector<f64>>,
}

impl Scenario {
    /// Check that all parties agree on pool and test sizes and have consistent shapes.
    pub fn validate(&self) -> Result<(), crate::CotrainError> {
        let Some(first) = self.parties.first() else {
            return Err(crate::error::DataError::NoneGiven { what: "party in a scenario" }.into());
        };
        for p in &self.parties {
            let d = p.dim();
            let checks = [
                (p.y_train.len() == p.x_train.nrows(), "training labels and rows differ in number"),
                (p.x_pool.ncols() == d && p.x_test.ncols() == d, "pool/test views have a different number of columns"),
                (p.x_pool.nrows() == first.x_pool.nrows(), "pool size differs between parties"),
                (p.x_test.nrows() == first.x_test.nrows(), "test size differs between parties"),
                (p.y_test.len() == p.x_test.nrows(), "test labels and rows differ in number"),
                (p.columns.len() == d, "column names and columns differ in number"),
            ];
            for (ok, msg) in checks {
                if !ok {
                    return Err(crate::error::DataError::Inconsistent { party: p.name.clone(), what: msg }.into());
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A column with one value on every labelled row is reported with the pool entities at
    /// another value; a column that varies by 10⁻⁹ is not; a matrix of fewer than two rows has none.
    #[test]
    fn a_covariate_with_one_value_on_the_labelled_rows_is_named_with_the_pool_beyond_it() {
        let x_train = DMatrix::from_row_slice(3, 3, &[0.1, 1.0, 5.0, 0.4, 1.0, 5.0, 0.9, 1.0, 5.0 + 1e-9]);
        let x_pool = DMatrix::from_row_slice(4, 3, &[0.0, 1.0, 5.0, 0.5, -1.0, 5.0, 0.2, -1.0, 5.0, 0.3, 1.0, 5.0]);
        let data = PartyData {
            name: "A".into(),
            columns: vec!["age".into(), "male".into(), "hours".into()],
            x_train,
            y_train: DVector::from_vec(vec![1.0, 2.0, 3.0]),
            x_pool,
            x_test: DMatrix::zeros(0, 3),
            y_test: DVector::zeros(0),
        };
        let c = data.constant_covariates();
        assert_eq!(c, vec![ConstantCovariate { column: "male".into(), pool_rows_elsewhere: 2, pool_rows: 4 }]);
        let text = c[0].to_string();
        assert!(text.contains("\"male\"") && text.contains("2 of 4 pool entities"), "{text}");
        assert_eq!(constant_columns(&DMatrix::zeros(0, 2)), vec![false, false]);
        assert_eq!(constant_columns(&DMatrix::from_row_slice(1, 2, &[1.0, 2.0])), vec![false, false]);
    }
}
