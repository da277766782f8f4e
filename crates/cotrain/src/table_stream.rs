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
use dpcotrain_gp::svgp::{BlockVisitor, MinibatchSource, SourcePosition, epoch_rng};
use nalgebra::{DMatrix, DVector};
use rand::seq::SliceRandom;
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
    /// (byte offset, first data row) of each chunk.
    chunks: Vec<(u64, u64)>,
    seed: u64,
    /// The inputs' and target's means and standard deviations, from the validating pass.
    stats: Standardizer,
    /// Map served rows through `stats` (x' = (x − μ)/s, y' likewise).
    standardize: bool,
    pos: SourcePosition,
    /// The chunk being served: its rows (shuffled) and its index in the file.
    current: Option<(usize, DMatrix<f64>, DVector<f64>)>,
}

/// A table error reaches the fit whole, as [`GpError::Source`] (it downcasts to `TableError`).
impl From<TableError> for GpError {
    fn from(e: TableError) -> Self {
        GpError::from_source(e)
    }
}

fn io_err(path: &Path, source: std::io::Error) -> GpError {
    TableError::Read { path: path.to_path_buf(), source }.into()
}

fn reader(file: File) -> csv::Reader<BufReader<File>> {
    csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(BufReader::with_capacity(1 << 20, file))
}

/// Byte offsets of a file to 1-based line numbers: the streaming form of the table reader's
/// counter, used only to number an error (counting is a second read of the file). The csv
/// crate's record positions point before any line breaks and blank lines that precede a record,
/// so a record's line is found by skipping line-break bytes from its offset; `\n`, `\r\n` and a
/// lone `\r` each end a line.
fn line_of(path: &Path, offset: u64) -> Result<u64, GpError> {
    use std::io::BufRead;
    let file = File::open(path).map_err(|e| io_err(path, e))?;
    let mut reader = BufReader::with_capacity(1 << 16, file);
    let (mut pos, mut line, mut after_cr) = (0u64, 1u64, false);
    loop {
        let buf = reader.fill_buf().map_err(|e| io_err(path, e))?;
        if buf.is_empty() {
            return Ok(line);
        }
        let mut used = 0;
        for &b in buf {
            // Past the record's offset only line-break bytes still precede it.
            if pos >= offset && b != b'\r' && b != b'\n' {
                return Ok(line);
            }
            match b {
                b'\r' => line += 1,
                b'\n' if !after_cr => line += 1,
                _ => {}
            }
            after_cr = b == b'\r';
            pos += 1;
            used += 1;
        }
        reader.consume(used);
    }
}

/// Run a parse step numbered with line 0, and only when it fails, again with the record's true
/// line (found by [`line_of`]) for the error message.
fn numbered<T>(path: &Path, offset: u64, mut parse: impl FnMut(u64) -> Result<T, TableError>) -> Result<T, GpError> {
    parse(0).or_else(|_| Ok(parse(line_of(path, offset)?)?))
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
            return Err(GpError::parameter("minibatch size", 0.0, "be at least 1"));
        }
        let chunk_rows = chunk_rows.max(batch).div_ceil(batch) * batch;
        let file = File::open(path).map_err(|e| io_err(path, e))?;
        let mut rd = reader(file);
        let mut record = csv::ByteRecord::new();
        let mut columns: Option<Vec<String>> = None;
        let mut header_offset = 0;
        let (mut n, mut chunks, mut row_vals) = (0u64, Vec::new(), Vec::new());
        let (mut mean, mut m2): (Vec<f64>, Vec<f64>) = (vec![], vec![]);
        loop {
            let start = rd.position().byte();
            let more = rd.read_byte_record(&mut record).map_err(|e| csv_error(path, e))?;
            if !more {
                break;
            }
            let offset = record.position().map_or(start, |p| p.byte());
            if is_blank(&record) {
                continue;
            }
            let Some(cols) = &columns else {
                let cols = numbered(path, offset, |line| parse_header(path, line, &record))?;
                (mean, m2) = (vec![0.0; cols.len()], vec![0.0; cols.len()]);
                (columns, header_offset) = (Some(cols), offset);
                continue;
            };
            numbered(path, offset, |line| {
                row_vals.clear();
                parse_row(path, line, &record, cols, &mut row_vals)
            })?;
            if n % chunk_rows as u64 == 0 {
                chunks.push((start, n));
            }
            n += 1;
            for (j, v) in row_vals.iter().enumerate() {
                let d = v - mean[j];
                mean[j] += d / n as f64;
                m2[j] += d * (v - mean[j]);
            }
        }
        let Some(columns) = columns else {
            return Err(TableError::Empty { path: path.to_path_buf() }.into());
        };
        if n == 0 {
            let header_line = line_of(path, header_offset)?;
            return Err(TableError::NoDataRows { path: path.to_path_buf(), header_line }.into());
        }
        let find = |name: &str| {
            columns.iter().position(|c| c == name).ok_or_else(|| TableError::UnknownColumn {
                path: path.to_path_buf(),
                name: name.to_owned(),
                available: columns.clone(),
            })
        };
        let t = find(target)?;
        let inputs_named = inputs.is_some();
        let inputs: Vec<usize> = match inputs {
            Some(names) => names.iter().map(|s| find(s)).collect::<Result<_, _>>()?,
            None => (0..columns.len()).filter(|&j| j != t).collect(),
        };
        if inputs.is_empty() {
            let path = path.to_path_buf();
            let e = if inputs_named {
                TableError::NoInputsNamed { path }
            } else {
                TableError::NoInputColumns { path, target: target.to_owned() }
            };
            return Err(e.into());
        }
        if inputs.contains(&t) {
            return Err(TableError::TargetIsInput { path: path.to_path_buf(), target: target.to_owned() }.into());
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
        order.shuffle(&mut epoch_rng(self.seed, epoch, 0));
        order
    }

    /// Read chunk `c` of the file (inputs, target), in file order.
    fn read_chunk(&self, c: usize) -> Result<(DMatrix<f64>, DVector<f64>), GpError> {
        let (byte, first) = self.chunks[c];
        let rows = (self.n_rows as u64 - first).min(self.chunk_rows as u64) as usize;
        let mut file = File::open(&self.path).map_err(|e| io_err(&self.path, e))?;
        file.seek(SeekFrom::Start(byte)).map_err(|e| io_err(&self.path, e))?;
        let mut rd = reader(file);
        let mut record = csv::ByteRecord::new();
        let (d, mut vals, mut row) =
            (self.inputs.len(), Vec::with_capacity(rows * (self.inputs.len() + 1)), Vec::new());
        let mut got = 0;
        while got < rows {
            if !rd.read_byte_record(&mut record).map_err(|e| csv_error(&self.path, e))? {
                break;
            }
            if is_blank(&record) {
                continue;
            }
            let offset = byte + record.position().map_or(0, |p| p.byte());
            numbered(&self.path, offset, |line| {
                row.clear();
                parse_row(&self.path, line, &record, &self.columns, &mut row)
            })?;
            vals.extend(self.inputs.iter().map(|&j| row[j]));
            vals.push(row[self.target]);
            got += 1;
        }
        if got != rows {
            let path = self.path.clone();
            return Err(TableError::FileChanged { path, chunk: c, found: got, expected: rows }.into());
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
        perm.shuffle(&mut epoch_rng(self.seed, epoch, c as u64 + 1));
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
        // Consistent only if `row` is the rows of the chunks before `chunk` in this epoch's
        // order plus `in_chunk`, inside that chunk (or at the epoch's very end).
        let size = |c: usize| (self.n_rows as u64 - self.chunks[c].1).min(self.chunk_rows as u64);
        let order = self.chunk_order(pos.epoch);
        let consistent = match usize::try_from(pos.chunk).ok().filter(|&k| k <= order.len()) {
            Some(k) => {
                let before: u64 = order[..k].iter().map(|&c| size(c)).sum();
                let inside = if k < order.len() { pos.in_chunk < size(order[k]) } else { pos.in_chunk == 0 };
                inside && pos.row == before + pos.in_chunk
            }
            None => false,
        };
        if !consistent {
            return Err(TableError::CannotResume {
                path: self.path.clone(),
                row: pos.row,
                chunk: pos.chunk,
                in_chunk: pos.in_chunk,
                rows: self.n_rows,
                chunks: self.chunks.len(),
            }
            .into());
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

    thread_local! {
        /// This test's own temporary directory, removed when the test's thread ends (a named
        /// folder under the system's temporary directory stayed behind after every run).
        static TEST_DIR: tempfile::TempDir = tempfile::tempdir().expect("temporary directory");
    }

    fn write(name: &str, body: &str) -> PathBuf {
        let dir = TEST_DIR.with(|d| d.path().join(name));
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
        // Positions that do not add up are refused (they would index past a chunk).
        for bad in [
            SourcePosition { epoch: 0, row: 2, chunk: 2, in_chunk: 0 },
            SourcePosition { epoch: 0, row: 3, chunk: 0, in_chunk: 3 },
            SourcePosition { epoch: 0, row: 1, chunk: 0, in_chunk: 2 },
        ] {
            assert!(s.seek(&bad).is_err(), "{bad:?}");
        }
        let ok = SourcePosition { epoch: 0, row: 5, chunk: 2, in_chunk: 0 };
        assert!(s.seek(&ok).is_ok(), "the end of an epoch");
    }

    /// The stream's refusals reach the fit as `GpError::Source`, whole: the table error with
    /// its fields, not its text.
    #[test]
    fn stream_errors_are_table_errors_inside_gp_errors() {
        // Whether `e` is a source error holding a TableError that `is` accepts.
        let table = |e: GpError, is: &dyn Fn(&TableError) -> bool| match &e {
            GpError::Source(s) => s.downcast_ref::<TableError>().is_some_and(is),
            _ => false,
        };
        let p = write("typed", "a,y\n1,2\n");
        let e = CsvStream::open(&p, "z", None, 2, 4, 0).unwrap_err();
        assert!(
            table(e, &|t| matches!(t, TableError::UnknownColumn { name, available, .. }
                if name == "z" && available == &["a", "y"])),
            "an unknown column, with the columns there are"
        );
        let e = CsvStream::open(&p, "y", Some(&["y".to_string()]), 2, 4, 0).unwrap_err();
        assert!(table(e, &|t| matches!(t, TableError::TargetIsInput { target, .. } if target == "y")));
        let e = CsvStream::open(&p, "y", Some(&[]), 2, 4, 0).unwrap_err();
        assert!(table(e, &|t| matches!(t, TableError::NoInputsNamed { .. })));
        let e = CsvStream::open(&write("only", "y\n1\n"), "y", None, 2, 4, 0).unwrap_err();
        assert!(table(e, &|t| matches!(t, TableError::NoInputColumns { target, .. } if target == "y")));
        let e = CsvStream::open(&write("header", "\n\na,y\n"), "y", None, 2, 4, 0).unwrap_err();
        assert!(table(e, &|t| matches!(t, TableError::NoDataRows { header_line: 3, .. })), "the header's own line");
        let mut s = CsvStream::open(&write("typed-seek", &csv_body(5)), "y", None, 2, 4, 0).unwrap();
        let e = s.seek(&SourcePosition { row: 9, ..Default::default() }).unwrap_err();
        assert!(table(e, &|t| matches!(t, TableError::CannotResume { row: 9, rows: 5, chunks: 2, .. })));
        // Not a table's error: a minibatch of no rows is a parameter outside its domain.
        let e = CsvStream::open(&p, "y", None, 0, 4, 0).unwrap_err();
        assert_eq!(e, GpError::parameter("minibatch size", 0.0, "be at least 1"));
    }

    /// Line numbers count `\r\n`, lone `\r` and blank lines as a text editor does, both in the
    /// opening pass and when a chunk is read again later (here: the file changed in between).
    #[test]
    fn stream_line_numbers_follow_crlf_and_blank_lines() {
        // Line 1 header, 2 blank, 3–4 rows, 5 blank, 6 row, 7 bad (CRLF endings).
        let body = "a,y\r\n\r\n1,2\r\n3,4\r\n\r\n5,6\r\n7,oops\r\n";
        let e = CsvStream::open(&write("crlf", body), "y", None, 1, 1, 0).unwrap_err().to_string();
        assert!(e.contains("line 7"), "{e}");
        let e = CsvStream::open(&write("cr", "a,y\r1,2\r\r3,x\r"), "y", None, 1, 1, 0).unwrap_err().to_string();
        assert!(e.contains("line 4"), "{e}");
        // A valid file, opened, then changed (same length) so that a later chunk is bad.
        let good = "a,y\r\n\r\n1,2\r\n3,4\r\n\r\n5,6\r\n7,8\r\n";
        let p = write("later", good);
        let mut s = CsvStream::open(&p, "y", None, 1, 1, 0).unwrap();
        std::fs::write(&p, good.replace("7,8", "7,x")).unwrap();
        let e = (0..4).find_map(|_| s.next_batch().err()).expect("the changed row is read").to_string();
        assert!(e.contains("line 7") && e.contains("\"y\""), "{e}");
    }
}
