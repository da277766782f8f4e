//! A CSV too large for memory as a source of SVGP minibatches ([`CsvStream`]).
//!
//! Opening the file makes one validating pass (the same format and error messages as
//! [`crate::table::Table::read`], with file, line and column): it counts the rows, records the
//! byte offset of every chunk of `chunk_rows` rows and each input column's mean and standard
//! deviation (Welford), and keeps none of the data. Training then reads one chunk at a time:
//! each epoch visits the chunks in an order drawn from (seed, epoch) and serves each chunk's rows
//! shuffled by (seed, epoch, chunk), in minibatches that never straddle a chunk. Memory is one
//! chunk, independent of the number of rows; the [`SourcePosition`] (epoch, chunk, rows served)
//! resumes the stream exactly.

use crate::table::{TableError, csv_error, is_blank, parse_header, parse_row};
use dpcotrain_gp::GpError;
use dpcotrain_gp::standardize::Standardizer;
use dpcotrain_gp::svgp::{BlockVisitor, MinibatchSource, SourcePosition};
use nalgebra::{DMatrix, DVector};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use std::fs::File;
use std::io::{BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// Rows of a CSV file, streamed in shuffled chunks.
#[derive(Debug)]
pub struct CsvStream {
    path: PathBuf,
    /// Header columns of the file.
    columns: Vec<String>,
    /// File column of each input, in the order asked for.
    inputs: Vec<usize>,
    target: usize,
    n_rows: usize,
    batch: usize,
    chunk_rows: usize,
    /// (byte offset, first data row, line) of each chunk.
    chunks: Vec<(u64, u64, u64)>,
    seed: u64,
    /// The inputs' and target's means and standard deviations, from the validating pass.
    stats: Standardizer,
    /// Map served rows through `stats` (x' = (x − μ)/s, y' likewise).
    standardize: bool,
    pos: SourcePosition,
    /// The chunk being served: its rows (shuffled) and its index in the file.
    current: Option<(usize, DMatrix<f64>, DVector<f64>)>,
}

fn io_err(path: &Path, source: std::io::Error) -> GpError {
    GpError::invalid(TableError::Read { path: path.to_path_buf(), source }.to_string())
}

fn reader(file: File) -> csv::Reader<BufReader<File>> {
    csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(BufReader::with_capacity(1 << 20, file))
}

impl CsvStream {
    /// Open `path`, with `target` and `inputs` named by column (`inputs` = None: every other
    /// column, in file order), minibatches of `batch` rows and chunks of about `chunk_rows`
    /// rows (rounded up to whole minibatches).
    pub fn open(
        path: &Path,
        target: &str,
        inputs: Option<&[String]>,
        batch: usize,
        chunk_rows: usize,
        seed: u64,
    ) -> Result<Self, GpError> {
        if batch == 0 {
            return Err(GpError::invalid("minibatch size must be at least 1"));
        }
        let chunk_rows = chunk_rows.max(batch).div_ceil(batch) * batch;
        let file = File::open(path).map_err(|e| io_err(path, e))?;
        let mut rd = reader(file);
        let mut record = csv::ByteRecord::new();
        let mut columns: Option<Vec<String>> = None;
        let (mut n, mut chunks, mut row_vals) = (0u64, Vec::new(), Vec::new());
        let (mut mean, mut m2): (Vec<f64>, Vec<f64>) = (vec![], vec![]);
        loop {
            let start = rd.position().clone();
            let more =
                rd.read_byte_record(&mut record).map_err(|e| GpError::invalid(csv_error(path, e).to_string()))?;
            if !more {
                break;
            }
            let line = record.position().map_or(0, |p| p.line());
            if is_blank(&record) {
                continue;
            }
            let Some(cols) = &columns else {
                let cols = parse_header(path, line, &record).map_err(|e| GpError::invalid(e.to_string()))?;
                (mean, m2) = (vec![0.0; cols.len()], vec![0.0; cols.len()]);
                columns = Some(cols);
                continue;
            };
            row_vals.clear();
            parse_row(path, line, &record, cols, &mut row_vals).map_err(|e| GpError::invalid(e.to_string()))?;
            if n % chunk_rows as u64 == 0 {
                chunks.push((start.byte(), n, start.line()));
            }
            n += 1;
            for (j, v) in row_vals.iter().enumerate() {
                let d = v - mean[j];
                mean[j] += d / n as f64;
                m2[j] += d * (v - mean[j]);
            }
        }
        let Some(columns) = columns else {
            return Err(GpError::invalid(TableError::Empty { path: path.to_path_buf() }.to_string()));
        };
        if n == 0 {
            return Err(GpError::invalid(format!("{}: no data rows", path.display())));
        }
        let find = |name: &str| {
            columns.iter().position(|c| c == name).ok_or_else(|| {
                GpError::invalid(format!(
                    "{}: no column named {name:?} (columns: {})",
                    path.display(),
                    columns.join(", ")
                ))
            })
        };
        let t = find(target)?;
        let inputs: Vec<usize> = match inputs {
            Some(names) => names.iter().map(|s| find(s)).collect::<Result<_, _>>()?,
            None => (0..columns.len()).filter(|&j| j != t).collect(),
        };
        if inputs.is_empty() {
            return Err(GpError::invalid(format!("{}: no input columns besides {target:?}", path.display())));
        }
        if inputs.contains(&t) {
            return Err(GpError::invalid(format!("{}: {target:?} is both the target and an input", path.display())));
        }
        // Sample standard deviations, as Standardizer::fit; a constant column gets scale 1.
        let scale = |j: usize| {
            let sd = (m2[j] / (n.max(2) - 1) as f64).sqrt();
            if sd > 0.0 && sd.is_finite() { sd } else { 1.0 }
        };
        let stats = Standardizer {
            x_mean: inputs.iter().map(|&j| mean[j]).collect(),
            x_scale: inputs.iter().map(|&j| scale(j)).collect(),
            y_mean: mean[t],
            y_scale: scale(t),
        };
        Ok(CsvStream {
            path: path.to_path_buf(),
            columns,
            inputs,
            target: t,
            n_rows: n as usize,
            batch,
            chunk_rows,
            chunks,
            seed,
            stats,
            standardize: false,
            pos: SourcePosition::default(),
            current: None,
        })
    }

    /// Names of the input columns, in the order of the matrix columns served.
    pub fn input_names(&self) -> Vec<String> {
        self.inputs.iter().map(|&j| self.columns[j].clone()).collect()
    }
    pub fn target_name(&self) -> &str {
        &self.columns[self.target]
    }
    /// Means and standard deviations of the inputs and the target (from the opening pass).
    pub fn stats(&self) -> &Standardizer {
        &self.stats
    }
    /// Serve standardised rows (x' = (x − μ_x)/s_x, y' = (y − μ_y)/s_y) from now on.
    pub fn set_standardize(&mut self, on: bool) {
        self.standardize = on;
        self.current = None;
    }
    pub fn chunk_rows(&self) -> usize {
        self.chunk_rows
    }

    /// This epoch's chunk order.
    fn chunk_order(&self, epoch: u64) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.chunks.len()).collect();
        order.shuffle(&mut ChaCha8Rng::seed_from_u64(self.seed ^ epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
        order
    }

    /// Read chunk `c` of the file (inputs, target), in file order.
    fn read_chunk(&self, c: usize) -> Result<(DMatrix<f64>, DVector<f64>), GpError> {
        let (byte, first, line) = self.chunks[c];
        let rows = (self.n_rows as u64 - first).min(self.chunk_rows as u64) as usize;
        let mut file = File::open(&self.path).map_err(|e| io_err(&self.path, e))?;
        file.seek(SeekFrom::Start(byte)).map_err(|e| io_err(&self.path, e))?;
        let mut rd = reader(file);
        let mut record = csv::ByteRecord::new();
        let (d, mut vals, mut row) =
            (self.inputs.len(), Vec::with_capacity(rows * (self.inputs.len() + 1)), Vec::new());
        let mut got = 0;
        while got < rows {
            if !rd.read_byte_record(&mut record).map_err(|e| GpError::invalid(csv_error(&self.path, e).to_string()))? {
                break;
            }
            if is_blank(&record) {
                continue;
            }
            let at = line + record.position().map_or(0, |p| p.line()) - 1;
            row.clear();
            parse_row(&self.path, at, &record, &self.columns, &mut row).map_err(|e| GpError::invalid(e.to_string()))?;
            vals.extend(self.inputs.iter().map(|&j| row[j]));
            vals.push(row[self.target]);
            got += 1;
        }
        if got != rows {
            return Err(GpError::invalid(format!(
                "{}: the file changed since it was opened (chunk {c} has {got} rows, expected {rows})",
                self.path.display()
            )));
        }
        let all = DMatrix::from_row_slice(rows, d + 1, &vals);
        let (x, y) = (all.columns(0, d).into_owned(), all.column(d).into_owned());
        if self.standardize { Ok((self.stats.transform_x(&x)?, self.stats.transform_y(&y))) } else { Ok((x, y)) }
    }

    /// Load the chunk at position `k` of `epoch`'s order, shuffled.
    fn load(&mut self, epoch: u64, k: usize) -> Result<(), GpError> {
        let c = self.chunk_order(epoch)[k];
        let (x, y) = self.read_chunk(c)?;
        let mut perm: Vec<usize> = (0..y.len()).collect();
        let mix =
            self.seed ^ epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (c as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03);
        perm.shuffle(&mut ChaCha8Rng::seed_from_u64(mix));
        let xs = DMatrix::from_fn(perm.len(), x.ncols(), |i, j| x[(perm[i], j)]);
        let ys = DVector::from_fn(perm.len(), |i, _| y[perm[i]]);
        self.current = Some((k, xs, ys));
        Ok(())
    }
}

impl MinibatchSource for CsvStream {
    fn n_rows(&self) -> usize {
        self.n_rows
    }
    fn dim(&self) -> usize {
        self.inputs.len()
    }
    fn next_batch(&mut self) -> Result<(DMatrix<f64>, DVector<f64>), GpError> {
        if self.pos.row >= self.n_rows as u64 {
            self.pos = SourcePosition { epoch: self.pos.epoch + 1, ..Default::default() };
        }
        let k = self.pos.chunk as usize;
        if self.current.as_ref().is_none_or(|(ck, _, _)| *ck != k) {
            self.load(self.pos.epoch, k)?;
        }
        let (_, x, y) = self.current.as_ref().expect("loaded");
        let start = self.pos.in_chunk as usize;
        let len = self.batch.min(y.len() - start);
        let out = (x.rows(start, len).into_owned(), y.rows(start, len).into_owned());
        self.pos.row += len as u64;
        self.pos.in_chunk += len as u64;
        if self.pos.in_chunk as usize == y.len() {
            self.pos.chunk += 1;
            self.pos.in_chunk = 0;
        }
        Ok(out)
    }
    fn position(&self) -> SourcePosition {
        self.pos
    }
    fn seek(&mut self, pos: &SourcePosition) -> Result<(), GpError> {
        if pos.row > self.n_rows as u64
            || pos.chunk > self.chunks.len() as u64
            || pos.in_chunk >= self.chunk_rows as u64
        {
            return Err(GpError::invalid(format!(
                "{}: cannot resume at row {} (chunk {}, +{}) of {} rows in {} chunks; was the checkpoint written for another file or --batch?",
                self.path.display(),
                pos.row,
                pos.chunk,
                pos.in_chunk,
                self.n_rows,
                self.chunks.len()
            )));
        }
        self.pos = *pos;
        self.current = None;
        Ok(())
    }
    fn for_each_block(&mut self, f: &mut BlockVisitor<'_>) -> Result<(), GpError> {
        for c in 0..self.chunks.len() {
            let (x, y) = self.read_chunk(c)?;
            f(x.as_view(), y.as_view())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dpcotrain_gp::svgp::InMemory;

    fn write(name: &str, body: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("dpcotrain-stream-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("data.csv");
        std::fs::write(&p, body).unwrap();
        p
    }

    fn csv_body(n: usize) -> String {
        let mut s = String::from("b,y,a\n");
        for i in 0..n {
            s.push_str(&format!("{},{},{}\n", i as f64 * 0.5, i as f64 * 10.0, -(i as f64)));
        }
        s
    }

    /// An epoch serves every row once, paired with its own label and its inputs in the order
    /// asked for; statistics match the data; a resumed stream continues exactly.
    #[test]
    fn stream_serves_each_row_once_per_epoch_and_resumes() {
        let p = write("epoch", &csv_body(23));
        let names = vec!["a".to_string(), "b".to_string()];
        let mut s = CsvStream::open(&p, "y", Some(&names), 4, 8, 5).unwrap();
        assert_eq!((s.n_rows(), s.dim(), s.chunk_rows()), (23, 2, 8));
        assert!((s.stats().y_mean - 110.0).abs() < 1e-12, "target mean");
        assert!((s.stats().x_scale[0] - (23.0 * 24.0 / 12.0f64).sqrt()).abs() < 1e-9, "sample sd of 0..22");
        let mut seen = vec![];
        while s.position().epoch == 0 && seen.len() < 23 {
            let (x, y) = s.next_batch().unwrap();
            for i in 0..y.len() {
                let r = y[i] / 10.0;
                assert_eq!((x[(i, 0)], x[(i, 1)]), (-r, r * 0.5), "inputs in the asked order, with their label");
                seen.push(r as usize);
            }
        }
        seen.sort();
        assert_eq!(seen, (0..23).collect::<Vec<_>>());
        let pos = s.position();
        let a: Vec<_> = (0..5).map(|_| s.next_batch().unwrap()).collect();
        let mut t = CsvStream::open(&p, "y", Some(&names), 4, 8, 5).unwrap();
        t.seek(&pos).unwrap();
        let b: Vec<_> = (0..5).map(|_| t.next_batch().unwrap()).collect();
        assert_eq!(a, b);
        assert_eq!(t.position().epoch, 1);
        // The two epochs differ in order (the shuffle depends on the epoch).
        let mut u = CsvStream::open(&p, "y", Some(&names), 4, 8, 5).unwrap();
        assert_ne!(u.next_batch().unwrap(), a[0]);
        // A full pass visits every row in file order, as an in-memory source does.
        let (mut rows, mut mem_rows) = (vec![], vec![]);
        t.for_each_block(&mut |x, y| {
            rows.extend((0..y.len()).map(|i| (x[(i, 0)], y[i])));
            Ok(())
        })
        .unwrap();
        let xm = DMatrix::from_fn(23, 2, |i, j| if j == 0 { -(i as f64) } else { i as f64 * 0.5 });
        let ym = DVector::from_fn(23, |i, _| i as f64 * 10.0);
        InMemory::new(xm, ym, 4, 0)
            .unwrap()
            .for_each_block(&mut |x, y| {
                mem_rows.extend((0..y.len()).map(|i| (x[(i, 0)], y[i])));
                Ok(())
            })
            .unwrap();
        assert_eq!(rows, mem_rows);
    }

    #[test]
    fn stream_errors_name_the_file_line_and_column() {
        let p = write("bad", "a,y\n1,2\n3,x\n");
        let e = CsvStream::open(&p, "y", None, 2, 4, 0).unwrap_err().to_string();
        assert!(e.contains("data.csv") && e.contains("line 3") && e.contains("\"y\""), "{e}");
        let p = write("name", "a,y\n1,2\n");
        let e = CsvStream::open(&p, "z", None, 2, 4, 0).unwrap_err().to_string();
        assert!(e.contains("no column named \"z\"") && e.contains("a, y"), "{e}");
        let e = CsvStream::open(&p, "y", Some(&["y".to_string()]), 2, 4, 0).unwrap_err().to_string();
        assert!(e.contains("both the target and an input"), "{e}");
        let p = write("empty", "a,y\n");
        assert!(CsvStream::open(&p, "y", None, 2, 4, 0).unwrap_err().to_string().contains("no data rows"));
        let mut s = CsvStream::open(&write("seek", &csv_body(5)), "y", None, 2, 4, 0).unwrap();
        assert!(s.seek(&SourcePosition { row: 9, ..Default::default() }).is_err());
    }
}
