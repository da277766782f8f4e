//! Where SVGP's minibatches come from: rows in memory ([`InMemory`]) or any other source
//! (the CLI streams a CSV from disk) behind [`MinibatchSource`]. A source's order is a
//! function of its seed and epoch only, and its [`SourcePosition`] is enough to resume it, so a
//! fit restarted from a checkpoint sees the same minibatches as one that never stopped.

use crate::GpError;
use nalgebra::{DMatrix, DMatrixView, DVector, DVectorView};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Where a source is in its training order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SourcePosition {
    /// Completed passes over the data.
    pub epoch: u64,
    /// Rows of this epoch already handed out.
    pub row: u64,
    /// Streaming sources: the index, in this epoch's chunk order, of the chunk being served,
    /// and the rows of it already handed out (0 for sources in memory).
    pub chunk: u64,
    pub in_chunk: u64,
}

/// What [`MinibatchSource::for_each_block`] calls with each block of rows (inputs, targets).
pub type BlockVisitor<'a> = dyn FnMut(DMatrixView<'_, f64>, DVectorView<'_, f64>) -> Result<(), GpError> + 'a;

/// A supply of minibatches.
pub trait MinibatchSource {
    /// Rows in the whole data set (N, the scale of the minibatch bound).
    fn n_rows(&self) -> usize;
    /// Input columns.
    fn dim(&self) -> usize;
    /// The next minibatch in training order. Batches never straddle an epoch: the last one of
    /// an epoch may be shorter.
    fn next_batch(&mut self) -> Result<(DMatrix<f64>, DVector<f64>), GpError>;
    fn position(&self) -> SourcePosition;
    /// Continue from `pos` (a position this source reported before).
    fn seek(&mut self, pos: &SourcePosition) -> Result<(), GpError>;
    /// Visit every row once, in blocks, in stored order, without moving the training position.
    fn for_each_block(&mut self, f: &mut BlockVisitor<'_>) -> Result<(), GpError>;
}

/// The generator of a source's shuffle in `epoch` (`part` tells apart several shuffles of one
/// epoch, e.g. a streamed file's chunk order and each chunk's rows): a function of the seed,
/// the epoch and the part only, so a resumed source shuffles as before.
pub fn epoch_rng(seed: u64, epoch: u64, part: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(
        seed ^ epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ part.wrapping_mul(0xD1B5_4A32_D192_ED03),
    )
}

/// Rows held in memory, reshuffled every epoch by a permutation drawn from (seed, epoch).
#[derive(Debug, Clone)]
pub struct InMemory {
    x: DMatrix<f64>,
    y: DVector<f64>,
    batch: usize,
    seed: u64,
    pos: SourcePosition,
    order: Vec<usize>,
}

/// Rows per block of a full pass.
const PASS_BLOCK: usize = 4096;

impl InMemory {
    pub fn new(x: DMatrix<f64>, y: DVector<f64>, batch: usize, seed: u64) -> Result<Self, GpError> {
        if x.nrows() != y.len() {
            return Err(GpError::shape("training data", y.len(), "targets", x.nrows(), "rows of X"));
        }
        if x.nrows() == 0 {
            return Err(GpError::Empty { what: "training rows" });
        }
        if batch == 0 {
            return Err(GpError::parameter("minibatch size", 0.0, "be at least 1"));
        }
        let mut s = InMemory { x, y, batch, seed, pos: SourcePosition::default(), order: vec![] };
        s.order = s.permutation(0);
        Ok(s)
    }

    fn permutation(&self, epoch: u64) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.x.nrows()).collect();
        order.shuffle(&mut epoch_rng(self.seed, epoch, 0));
        order
    }
}

impl MinibatchSource for InMemory {
    fn n_rows(&self) -> usize {
        self.x.nrows()
    }
    fn dim(&self) -> usize {
        self.x.ncols()
    }
    fn next_batch(&mut self) -> Result<(DMatrix<f64>, DVector<f64>), GpError> {
        let n = self.x.nrows() as u64;
        if self.pos.row >= n {
            self.pos = SourcePosition { epoch: self.pos.epoch + 1, ..Default::default() };
            self.order = self.permutation(self.pos.epoch);
        }
        let start = self.pos.row as usize;
        let rows = &self.order[start..(start + self.batch).min(self.order.len())];
        self.pos.row += rows.len() as u64;
        let x = DMatrix::from_fn(rows.len(), self.x.ncols(), |i, j| self.x[(rows[i], j)]);
        let y = DVector::from_fn(rows.len(), |i, _| self.y[rows[i]]);
        Ok((x, y))
    }
    fn position(&self) -> SourcePosition {
        self.pos
    }
    fn seek(&mut self, pos: &SourcePosition) -> Result<(), GpError> {
        if pos.row > self.x.nrows() as u64 || pos.chunk != 0 || pos.in_chunk != 0 {
            return Err(GpError::CannotResume { position: *pos, rows: self.x.nrows() });
        }
        self.pos = *pos;
        self.order = self.permutation(pos.epoch);
        Ok(())
    }
    fn for_each_block(&mut self, f: &mut BlockVisitor<'_>) -> Result<(), GpError> {
        let n = self.x.nrows();
        for start in (0..n).step_by(PASS_BLOCK) {
            let len = PASS_BLOCK.min(n - start);
            f(self.x.rows(start, len), self.y.rows(start, len))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_memory_epochs_cover_every_row_once_and_resume_exactly() {
        let x = DMatrix::from_fn(10, 1, |i, _| i as f64);
        let y = DVector::from_fn(10, |i, _| i as f64 * 10.0);
        let mut s = InMemory::new(x.clone(), y.clone(), 4, 7).unwrap();
        let mut seen = vec![];
        for _ in 0..3 {
            let (bx, by) = s.next_batch().unwrap();
            for i in 0..bx.nrows() {
                assert_eq!(by[i], bx[(i, 0)] * 10.0, "rows stay paired with their labels");
                seen.push(bx[(i, 0)] as usize);
            }
        }
        seen.sort();
        assert_eq!(seen, (0..10).collect::<Vec<_>>(), "one epoch is a permutation (batches 4, 4, 2)");
        let pos = s.position();
        let next: Vec<_> = (0..3).map(|_| s.next_batch().unwrap()).collect();
        let mut t = InMemory::new(x, y, 4, 7).unwrap();
        t.seek(&pos).unwrap();
        let again: Vec<_> = (0..3).map(|_| t.next_batch().unwrap()).collect();
        assert_eq!(next, again);
        assert_eq!(t.position().epoch, 1);
        assert!(t.seek(&SourcePosition { row: 11, ..Default::default() }).is_err());
    }
}
