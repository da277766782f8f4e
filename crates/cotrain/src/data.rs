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

impl PartyData {
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
