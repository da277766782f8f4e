//! Uncertainty sampling [Thomas §4.2.1; science-notes D20]: the querier predicts at every pool
//! index it has not asked yet and picks the one with the largest latent predictive variance;
//! ties go to the lowest index.

use crate::CotrainError;
use crate::combiner::CoModel;

/// The next pool index to ask about, or `None` when every index has been asked.
pub fn most_uncertain(model: &mut CoModel) -> Result<Option<usize>, CotrainError> {
    let asked = model.asked();
    let candidates: Vec<usize> = (0..model.x_pool().nrows()).filter(|i| asked.binary_search(i).is_err()).collect();
    if candidates.is_empty() {
        return Ok(None);
    }
    let xs = model.x_pool().select_rows(candidates.iter());
    let p = model.predict(&xs, false)?;
    let mut best = 0;
    for k in 1..candidates.len() {
        if p.var[k] > p.var[best] {
            best = k;
        }
    }
    Ok(Some(candidates[best]))
}
