//! The one transform of kernel hyperparameters. Every kernel parameter is positive, and the
//! optimiser works on its logarithm inside a box in the same log scale (GPflow's
//! `Parameter(value, transform=positive())`, with GPy's log where GPflow uses softplus). A
//! kernel keeps its parameters in [`Positive`] blocks, in the order of its parameter vector, so
//! `params`, `set_params`, `bounds` and `set_bounds` are the blocks' and no kernel writes a log,
//! an exp or a length check of its own.

use super::Bounds;
use serde::{Deserialize, Serialize};

/// Positive hyperparameters (natural scale), each with the bounds of its logarithm.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Positive {
    values: Vec<f64>,
    bounds: Vec<Bounds>,
}

impl Positive {
    /// Values the caller has checked to be positive and finite, with [`Bounds::positive_default`].
    pub(crate) fn new(values: Vec<f64>) -> Self {
        debug_assert!(values.iter().all(|v| v.is_finite() && *v > 0.0), "positive parameters: {values:?}");
        let bounds = vec![Bounds::positive_default(); values.len()];
        Positive { values, bounds }
    }

    /// The values on their natural scale.
    pub(crate) fn values(&self) -> &[f64] {
        &self.values
    }

    pub(crate) fn len(&self) -> usize {
        self.values.len()
    }

    /// The optimiser's coordinates: ln of every value.
    pub(crate) fn log_values(&self) -> impl Iterator<Item = f64> + '_ {
        self.values.iter().map(|v| v.ln())
    }

    /// Set every value from the optimiser's coordinates (exp of each); `kind` names the kernel
    /// in the panic a wrong length (a programmer error) raises.
    pub(crate) fn set_log_values(&mut self, kind: &str, p: &[f64]) {
        assert_eq!(p.len(), self.values.len(), "kernel {kind}: wrong number of parameters");
        self.values.iter_mut().zip(p).for_each(|(v, q)| *v = q.exp());
    }

    /// The bounds of the logarithms, in parameter order.
    pub(crate) fn bounds(&self) -> &[Bounds] {
        &self.bounds
    }

    pub(crate) fn set_bounds(&mut self, kind: &str, b: &[Bounds]) {
        assert_eq!(b.len(), self.values.len(), "kernel {kind}: wrong number of bounds");
        self.bounds = b.to_vec();
    }
}

/// Several blocks as one parameter vector (a kernel whose parameters live in parts).
pub(crate) fn log_values(blocks: &[&Positive]) -> Vec<f64> {
    blocks.iter().flat_map(|b| b.log_values()).collect()
}

/// Set several blocks from one parameter vector, each taking its length in order.
pub(crate) fn set_log_values(kind: &str, blocks: &mut [&mut Positive], p: &[f64]) {
    let parts = per_block(kind, "parameters", blocks, p);
    for (b, part) in blocks.iter_mut().zip(parts) {
        b.set_log_values(kind, part);
    }
}

/// The bounds of several blocks as one vector.
pub(crate) fn bounds(blocks: &[&Positive]) -> Vec<Bounds> {
    blocks.iter().flat_map(|b| b.bounds().iter().copied()).collect()
}

/// Set the bounds of several blocks from one vector, each taking its length in order.
pub(crate) fn set_bounds(kind: &str, blocks: &mut [&mut Positive], b: &[Bounds]) {
    let parts = per_block(kind, "bounds", blocks, b);
    for (x, part) in blocks.iter_mut().zip(parts) {
        x.set_bounds(kind, part);
    }
}

/// `v` cut into the blocks' lengths, in order; a total that does not match is a programmer
/// error, named.
fn per_block<'v, T>(kind: &str, what: &str, blocks: &[&mut Positive], v: &'v [T]) -> Vec<&'v [T]> {
    let n: usize = blocks.iter().map(|b| b.len()).sum();
    assert_eq!(v.len(), n, "kernel {kind}: wrong number of {what}");
    let mut at = 0;
    blocks
        .iter()
        .map(|b| {
            at += b.len();
            &v[at - b.len()..at]
        })
        .collect()
}

/// `base` alone, or `base[0]`, `base[1]`, … for one value per input dimension.
pub(crate) fn names(base: &str, per_dimension: bool, n: usize) -> Vec<String> {
    if per_dimension { (0..n).map(|d| format!("{base}[{d}]")).collect() } else { vec![base.to_string()] }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_optimiser_sees_logs_and_the_blocks_split_one_vector() {
        let mut a = Positive::new(vec![2.0]);
        let mut b = Positive::new(vec![0.5, 4.0]);
        assert_eq!(log_values(&[&a, &b]), vec![2f64.ln(), 0.5f64.ln(), 4f64.ln()]);
        set_log_values("k", &mut [&mut a, &mut b], &[0.0, 1.0, -1.0]);
        assert_eq!(a.values(), &[1.0]);
        assert_eq!(b.values(), &[1f64.exp(), (-1f64).exp()]);
        let nb = [Bounds::new(-1.0, 1.0), Bounds::new(-2.0, 2.0), Bounds::new(-3.0, 3.0)];
        set_bounds("k", &mut [&mut a, &mut b], &nb);
        assert_eq!(bounds(&[&a, &b]), nb.to_vec());
        assert_eq!(names("lengthscale", true, 2), ["lengthscale[0]", "lengthscale[1]"]);
        assert_eq!(names("lengthscale", false, 2), ["lengthscale"]);
    }

    #[test]
    #[should_panic(expected = "kernel k: wrong number of parameters")]
    fn a_wrong_length_is_a_named_panic() {
        set_log_values("k", &mut [&mut Positive::new(vec![1.0])], &[0.0, 0.0]);
    }
}
