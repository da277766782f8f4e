//! Numeric tables read from, and written to, CSV files.
//!
//! # Accepted input format ([`Table::read`])
//!
//! - The first non-blank line is the header: one name per column. Names must be non-empty and
//!   unique.
//! - Every following non-blank line is one data row with exactly as many fields as the header.
//!   Every cell must parse with Rust's `f64` parser (`"1e-3"`, `"-0.5"`, `"+2"`, `".5"` are fine)
//!   and be finite: `NaN`, `inf` and values that overflow `f64` (`"1e400"`) are rejected.
//! - Whitespace around cells and header names is ignored, as are fields in double quotes
//!   (`"3.5"`), a UTF-8 byte-order mark, and `\n`, `\r\n` or `\r` line endings.
//! - **Blank lines** (empty or whitespace-only) are **skipped** wherever they appear: at the end of
//!   the file, before the header, or between data rows. They still count for line numbers, so
//!   every line number in an error is the line a text editor shows.
//!
//! # Error messages
//!
//! Every [`TableError`] names the file, and where it applies the 1-based line number in the file
//! (the header is line 1 unless blank lines precede it) and the column by name and 1-based index:
//!
//! ```text
//! train.csv: line 7, column "AT" (1): cannot parse "abc" as a number
//! ```
//!
//! A row containing a quoted line break is reported at the line on which it starts. Nothing in
//! this module panics, whatever the file contains or however the public fields of a [`Table`]
//! were set.
//!
//! # Output ([`write_csv`])
//!
//! Values are written with Rust's shortest round-trip representation (`{:?}`, e.g. `0.1`, `1e-7`,
//! `-0.0`), so a finite matrix read back with [`Table::read`] is bit-for-bit identical.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

use nalgebra::{DMatrix, DVector};

/// At most this many characters of a bad cell are quoted in an error message.
const MAX_QUOTED_CHARS: usize = 40;
/// At most this many column names are listed in an error message.
const MAX_LISTED_COLUMNS: usize = 20;

/// What [`Table::split_target`] returns: `(inputs, target values, input column names, target
/// column name)`. A plain tuple; the alias only names it.
pub(crate) type Split = (DMatrix<f64>, DVector<f64>, Vec<String>, String);

/// A numeric table read from a CSV file with a header row.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// The file the table was read from, as given to [`Table::read`].
    pub path: PathBuf,
    /// Column names from the header row, trimmed, non-empty and unique.
    pub columns: Vec<String>,
    /// rows × columns, one CSV row per matrix row; every value is finite.
    pub data: DMatrix<f64>,
}

/// Everything that can go wrong reading, splitting or writing a table.
///
/// Each message starts with the file name; `line` is the 1-based line in the file, `index` a
/// 1-based column index.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    /// The file could not be opened or read (missing, a directory, no permission, ...).
    #[error("{}: cannot read file: {source}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// The file could not be created or written.
    #[error("{}: cannot write file: {source}", .path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// The CSV reader itself failed (should not happen with in-memory input; kept for safety).
    #[error("{}: cannot parse as CSV: {source}", .path.display())]
    Csv {
        path: PathBuf,
        #[source]
        source: csv::Error,
    },

    /// No header row: the file is empty or contains only blank lines.
    #[error(
        "{}: the file is empty; expected a header row of column names followed by data rows",
        .path.display()
    )]
    Empty { path: PathBuf },

    /// A header row but no data rows.
    #[error(
        "{}: no data rows: the file has only a header row (line {header_line})",
        .path.display()
    )]
    NoDataRows { path: PathBuf, header_line: u64 },

    /// A header field is empty (e.g. `a,,b` or a trailing comma).
    #[error("{}: line {line}: column {index} has an empty name in the header", .path.display())]
    EmptyColumnName { path: PathBuf, line: u64, index: usize },

    /// A header field is not valid UTF-8.
    #[error(
        "{}: line {line}: the name of column {index} is not valid UTF-8 (read as {name:?})",
        .path.display()
    )]
    NonUtf8ColumnName { path: PathBuf, line: u64, index: usize, name: String },

    /// Two header fields have the same name.
    #[error(
        "{}: line {line}: duplicate column name {name:?} (columns {first} and {second})",
        .path.display()
    )]
    DuplicateColumn { path: PathBuf, line: u64, name: String, first: usize, second: usize },

    /// A data row has a different number of fields than the header.
    #[error(
        "{}: line {line}: row has {found} field{}, but the header has {expected} column{} ({detail})",
        .path.display(), plural_s(*.found), plural_s(*.expected)
    )]
    RaggedRow { path: PathBuf, line: u64, found: usize, expected: usize, detail: String },

    /// A cell is empty (e.g. `1,,3`).
    #[error(
        "{}: line {line}, column {column:?} ({index}): empty cell, expected a number",
        .path.display()
    )]
    EmptyCell { path: PathBuf, line: u64, column: String, index: usize },

    /// A cell is not a number; `text` is the cell, truncated to about 40 characters.
    #[error(
        "{}: line {line}, column {column:?} ({index}): cannot parse {text:?} as a number",
        .path.display()
    )]
    NotANumber { path: PathBuf, line: u64, column: String, index: usize, text: String },

    /// A cell is NaN, ±infinity, or overflows `f64`.
    #[error(
        "{}: line {line}, column {column:?} ({index}): {text:?} is not a finite number \
         (NaN, infinities and values beyond ±1.8e308 are not allowed)",
        .path.display()
    )]
    NotFinite { path: PathBuf, line: u64, column: String, index: usize, text: String },

    /// Fewer data rows than required ([`Table::require_rows`]).
    #[error(
        "{}: need at least {min} data row{}, found {found}",
        file_label(.path, .what), plural_s(*.min)
    )]
    TooFewRows { path: PathBuf, what: &'static str, min: usize, found: usize },

    /// The target is neither a column name nor a valid 0-based index.
    #[error(
        "{}: no column named {target:?}; available columns: {} \
         (or give a 0-based column index from 0 to {})",
        .path.display(), list_names(.available), .available.len().saturating_sub(1)
    )]
    UnknownTarget { path: PathBuf, target: String, available: Vec<String> },

    /// The target was given as a 0-based index that is too large.
    #[error(
        "{}: target column index {index} is out of range: the table has {ncols} column{} \
         (0-based indices 0 to {})",
        .path.display(), plural_s(*.ncols), .ncols.saturating_sub(1)
    )]
    TargetIndexOutOfRange { path: PathBuf, index: usize, ncols: usize },

    /// Splitting off the target would leave no input columns.
    #[error(
        "{}: no input columns: the table has only the target column {target:?}; \
         at least one input column besides the target is needed",
        .path.display()
    )]
    NoInputColumns { path: PathBuf, target: String },

    /// The file's columns are not, by name, the columns expected (in any order).
    #[error(
        "{}: columns do not match {against}: {}",
        file_label(.path, .what), mismatch_detail(.missing, .extra, .expected)
    )]
    ColumnMismatch {
        path: PathBuf,
        what: &'static str,
        against: &'static str,
        missing: Box<[String]>,
        extra: Box<[String]>,
        expected: Box<[String]>,
    },

    /// The number of column names does not match the number of data columns.
    #[error(
        "{}: {names} column name{} but {ncols} data column{}",
        .path.display(), plural_s(*.names), plural_s(*.ncols)
    )]
    ShapeMismatch { path: PathBuf, names: usize, ncols: usize },

    /// A column asked for by name is not in the header (the streaming reader's inputs and
    /// target, by name only).
    #[error("{}: no column named {name:?} (columns: {})", .path.display(), .available.join(", "))]
    UnknownColumn { path: PathBuf, name: String, available: Vec<String> },

    /// An empty list of input columns was given (`None` means every column but the target).
    #[error("{}: the list of input columns is empty; name at least one", .path.display())]
    NoInputsNamed { path: PathBuf },

    /// The target column is also listed as an input.
    #[error("{}: {target:?} is both the target and an input", .path.display())]
    TargetIsInput { path: PathBuf, target: String },

    /// A streamed file changed after it was opened: chunk `chunk` now has `found` rows where
    /// the opening pass counted `expected`.
    #[error(
        "{}: the file changed since it was opened (chunk {chunk} has {found} rows, expected {expected})",
        .path.display()
    )]
    FileChanged { path: PathBuf, chunk: usize, found: usize, expected: usize },

    /// A streamed file cannot resume at a position that does not add up for it: `row`
    /// (`in_chunk` rows into chunk `chunk` of this epoch's order) of `rows` rows in `chunks`
    /// chunks.
    #[error(
        "{}: cannot resume at row {row} (chunk {chunk}, +{in_chunk}) of {rows} rows in {chunks} chunks; was the \
         checkpoint written for another file or --batch?",
        .path.display()
    )]
    CannotResume { path: PathBuf, row: u64, chunk: u64, in_chunk: u64, rows: usize, chunks: usize },
}

fn plural_s(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// `train.csv` or, with a description, `train.csv (training data)`.
fn file_label(path: &Path, what: &str) -> String {
    if what.is_empty() { path.display().to_string() } else { format!("{} ({what})", path.display()) }
}

/// `"a", "b", "c"`, listing at most [`MAX_LISTED_COLUMNS`] names.
fn list_names(names: &[String]) -> String {
    if names.is_empty() {
        return "none".to_owned();
    }
    let mut out = String::new();
    for (i, name) in names.iter().take(MAX_LISTED_COLUMNS).enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{name:?}");
    }
    if names.len() > MAX_LISTED_COLUMNS {
        let _ = write!(out, ", ... and {} more", names.len() - MAX_LISTED_COLUMNS);
    }
    out
}

/// `missing "AT"; unexpected "foo" (expected "AT", "V" in any order)`.
fn mismatch_detail(missing: &[String], extra: &[String], expected: &[String]) -> String {
    let mut parts = Vec::new();
    if !missing.is_empty() {
        parts.push(format!("missing {}", list_names(missing)));
    }
    if !extra.is_empty() {
        parts.push(format!("unexpected {}", list_names(extra)));
    }
    format!("{} (expected {}, in any order)", parts.join("; "), list_names(expected))
}

/// The cell text for an error message, cut to [`MAX_QUOTED_CHARS`] characters.
fn quote_cell(text: &str) -> String {
    match text.char_indices().nth(MAX_QUOTED_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// Maps byte offsets in the file to 1-based line numbers.
///
/// The csv crate's own record positions are unreliable for this: with `\r\n` endings or skipped
/// blank lines they point at the end of the previous record, one or more lines too early. So a
/// record's true start is found by skipping line-break bytes from the offset the csv reader
/// reports, and lines are counted here (`\n`, `\r\n` and a lone `\r` each end a line).
struct LineCounter<'a> {
    bytes: &'a [u8],
    pos: usize,
    line: u64,
}

impl<'a> LineCounter<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        LineCounter { bytes, pos: 0, line: 1 }
    }

    /// Line on which the record reported at byte offset `offset` starts. Offsets must not
    /// decrease between calls (records are read in order); a smaller one returns the last line.
    fn line_at(&mut self, offset: u64) -> u64 {
        let len = self.bytes.len();
        let mut start = usize::try_from(offset).unwrap_or(len).min(len);
        while start < len && matches!(self.bytes[start], b'\r' | b'\n') {
            start += 1;
        }
        while self.pos < start {
            match self.bytes[self.pos] {
                b'\n' => self.line += 1,
                b'\r' if self.bytes.get(self.pos + 1) != Some(&b'\n') => self.line += 1,
                _ => {}
            }
            self.pos += 1;
        }
        self.line
    }
}

/// A record with no content: an empty or whitespace-only line (fields are already trimmed).
pub(crate) fn is_blank(record: &csv::ByteRecord) -> bool {
    record.is_empty() || (record.len() == 1 && record[0].is_empty())
}

impl Table {
    /// Read a CSV file with a header row; see the [module documentation](self) for the format.
    pub fn read(path: &Path) -> Result<Table, TableError> {
        let bytes = std::fs::read(path).map_err(|source| TableError::Read { path: path.to_path_buf(), source })?;
        Self::parse(path, &bytes)
    }

    /// Parse CSV text held in memory; `path` is used for the table and in error messages.
    pub fn parse(path: &Path, bytes: &[u8]) -> Result<Table, TableError> {
        let mut reader =
            csv::ReaderBuilder::new().has_headers(false).flexible(true).trim(csv::Trim::All).from_reader(bytes);
        let mut lines = LineCounter::new(bytes);
        let mut record = csv::ByteRecord::new();
        let mut header: Option<(Vec<String>, u64)> = None;
        let mut values: Vec<f64> = Vec::new();
        let mut nrows = 0usize;

        loop {
            let more = reader.read_byte_record(&mut record).map_err(|source| csv_error(path, source))?;
            if !more {
                break;
            }
            let line = lines.line_at(record.position().map_or(0, |p| p.byte()));
            if is_blank(&record) {
                continue;
            }
            match &header {
                None => header = Some((parse_header(path, line, &record)?, line)),
                Some((columns, _)) => {
                    parse_row(path, line, &record, columns, &mut values)?;
                    nrows += 1;
                }
            }
        }

        let Some((columns, header_line)) = header else {
            return Err(TableError::Empty { path: path.to_path_buf() });
        };
        if nrows == 0 {
            return Err(TableError::NoDataRows { path: path.to_path_buf(), header_line });
        }
        let data = DMatrix::from_row_slice(nrows, columns.len(), &values);
        Ok(Table { path: path.to_path_buf(), columns, data })
    }

    /// Split into inputs (every column but `target`) and the target vector.
    ///
    /// `target` is a column name, or a 0-based column index given as a string (`"3"`); a column
    /// whose name equals the string wins over the index. `None` means the last column.
    /// Returns `(inputs, target values, input column names, target column name)`; inputs keep
    /// their original order.
    pub fn split_target(&self, target: Option<&str>) -> Result<Split, TableError> {
        self.check_shape()?;
        let ncols = self.columns.len();
        let t = match target {
            None => match ncols.checked_sub(1) {
                Some(last) => last,
                None => {
                    return Err(TableError::NoInputColumns { path: self.path.clone(), target: String::new() });
                }
            },
            Some(spec) => self.resolve_column(spec.trim())?,
        };
        if ncols < 2 {
            return Err(TableError::NoInputColumns { path: self.path.clone(), target: self.columns[t].clone() });
        }
        let inputs =
            DMatrix::from_fn(self.data.nrows(), ncols - 1, |i, j| self.data[(i, if j < t { j } else { j + 1 })]);
        let y = self.data.column(t).into_owned();
        let names = self.columns.iter().enumerate().filter(|&(j, _)| j != t).map(|(_, name)| name.clone()).collect();
        Ok((inputs, y, names, self.columns[t].clone()))
    }

    /// The columns named `names`, in that order, matched **by name** (scikit-learn's feature-name
    /// check): a file whose header lists the same names in another order is reordered; a file
    /// with a missing or an unexpected column is refused, naming both. `what` describes the file
    /// (`"pool view"`), `against` what it must match (`"the training inputs"`).
    pub fn select_columns(
        &self,
        names: &[String],
        what: &'static str,
        against: &'static str,
    ) -> Result<DMatrix<f64>, TableError> {
        self.check_shape()?;
        let missing: Vec<String> = names.iter().filter(|n| !self.columns.contains(n)).cloned().collect();
        let extra: Vec<String> = self.columns.iter().filter(|c| !names.contains(c)).cloned().collect();
        if !missing.is_empty() || !extra.is_empty() || names.len() != self.columns.len() {
            return Err(TableError::ColumnMismatch {
                path: self.path.clone(),
                what,
                against,
                missing: missing.into(),
                extra: extra.into(),
                expected: names.into(),
            });
        }
        let order: Vec<usize> =
            names.iter().map(|n| self.columns.iter().position(|c| c == n).unwrap_or_default()).collect();
        Ok(DMatrix::from_fn(self.data.nrows(), names.len(), |i, j| self.data[(i, order[j])]))
    }

    /// [`Table::split_target`] on a file that must hold the target and exactly the input
    /// columns `names` (any order): the inputs come back in the order of `names`.
    pub fn split_target_named(
        &self,
        target: &str,
        names: &[String],
        what: &'static str,
        against: &'static str,
    ) -> Result<(DMatrix<f64>, DVector<f64>), TableError> {
        let (inputs, y, found, _) = self.split_target(Some(target))?;
        let rest = Table { path: self.path.clone(), columns: found, data: inputs };
        Ok((rest.select_columns(names, what, against)?, y))
    }

    /// Check that the table has at least `min` data rows. `what` describes the file in the
    /// message, e.g. `"training data"`; may be empty:
    /// `train.csv (training data): need at least 2 data rows, found 1`.
    pub fn require_rows(&self, min: usize, what: &'static str) -> Result<(), TableError> {
        if self.data.nrows() >= min {
            return Ok(());
        }
        Err(TableError::TooFewRows { path: self.path.clone(), what, min, found: self.data.nrows() })
    }

    /// Index of the column named `spec`, else `spec` read as a 0-based index.
    fn resolve_column(&self, spec: &str) -> Result<usize, TableError> {
        if let Some(j) = self.columns.iter().position(|c| c == spec) {
            return Ok(j);
        }
        match spec.parse::<usize>() {
            Ok(index) if index < self.columns.len() => Ok(index),
            Ok(index) => {
                Err(TableError::TargetIndexOutOfRange { path: self.path.clone(), index, ncols: self.columns.len() })
            }
            Err(_) => Err(TableError::UnknownTarget {
                path: self.path.clone(),
                target: spec.to_owned(),
                available: self.columns.clone(),
            }),
        }
    }

    /// The public fields may have been set by hand: refuse rather than index out of bounds.
    fn check_shape(&self) -> Result<(), TableError> {
        if self.columns.len() == self.data.ncols() {
            return Ok(());
        }
        Err(TableError::ShapeMismatch { path: self.path.clone(), names: self.columns.len(), ncols: self.data.ncols() })
    }
}

pub(crate) fn csv_error(path: &Path, source: csv::Error) -> TableError {
    if !source.is_io_error() {
        return TableError::Csv { path: path.to_path_buf(), source };
    }
    let source = match source.into_kind() {
        csv::ErrorKind::Io(source) => source,
        other => io::Error::other(format!("{other:?}")),
    };
    TableError::Read { path: path.to_path_buf(), source }
}

pub(crate) fn parse_header(path: &Path, line: u64, record: &csv::ByteRecord) -> Result<Vec<String>, TableError> {
    let mut columns = Vec::with_capacity(record.len());
    let mut seen: HashMap<String, usize> = HashMap::with_capacity(record.len());
    for (j, field) in record.iter().enumerate() {
        let index = j + 1;
        let name = match std::str::from_utf8(field) {
            Ok(name) => name.trim().to_owned(),
            Err(_) => {
                return Err(TableError::NonUtf8ColumnName {
                    path: path.to_path_buf(),
                    line,
                    index,
                    name: quote_cell(&String::from_utf8_lossy(field)),
                });
            }
        };
        if name.is_empty() {
            return Err(TableError::EmptyColumnName { path: path.to_path_buf(), line, index });
        }
        if let Some(&first) = seen.get(&name) {
            return Err(TableError::DuplicateColumn { path: path.to_path_buf(), line, name, first, second: index });
        }
        seen.insert(name.clone(), index);
        columns.push(name);
    }
    Ok(columns)
}

pub(crate) fn parse_row(
    path: &Path,
    line: u64,
    record: &csv::ByteRecord,
    columns: &[String],
    values: &mut Vec<f64>,
) -> Result<(), TableError> {
    let (found, expected) = (record.len(), columns.len());
    if found != expected {
        let detail = if found < expected {
            let first = found + 1;
            if found + 1 == expected {
                format!("column {:?} ({first}) is missing", columns[found])
            } else {
                format!(
                    "columns {:?} ({first}) to {:?} ({expected}) are missing",
                    columns[found],
                    columns[expected - 1]
                )
            }
        } else if record.iter().skip(expected).all(<[u8]>::is_empty) {
            if found - expected == 1 {
                format!("field {found} after the last column is empty; a trailing comma?")
            } else {
                format!("fields {} to {found} after the last column are empty; trailing commas?", expected + 1)
            }
        } else {
            let extra = String::from_utf8_lossy(&record[expected]);
            format!(
                "unexpected field {} {:?} after the last column {:?} ({expected})",
                expected + 1,
                quote_cell(extra.trim()),
                columns[expected - 1]
            )
        };
        return Err(TableError::RaggedRow { path: path.to_path_buf(), line, found, expected, detail });
    }
    for (j, field) in record.iter().enumerate() {
        values.push(parse_cell(path, line, &columns[j], j + 1, field)?);
    }
    Ok(())
}

fn parse_cell(path: &Path, line: u64, column: &str, index: usize, field: &[u8]) -> Result<f64, TableError> {
    let text = match std::str::from_utf8(field) {
        Ok(text) => text.trim(),
        Err(_) => {
            return Err(TableError::NotANumber {
                path: path.to_path_buf(),
                line,
                column: column.to_owned(),
                index,
                text: quote_cell(&String::from_utf8_lossy(field)),
            });
        }
    };
    if text.is_empty() {
        return Err(TableError::EmptyCell { path: path.to_path_buf(), line, column: column.to_owned(), index });
    }
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        Ok(_) => Err(TableError::NotFinite {
            path: path.to_path_buf(),
            line,
            column: column.to_owned(),
            index,
            text: quote_cell(text),
        }),
        Err(_) => Err(TableError::NotANumber {
            path: path.to_path_buf(),
            line,
            column: column.to_owned(),
            index,
            text: quote_cell(text),
        }),
    }
}

/// Write a matrix with a header as CSV (used for outputs).
///
/// Values use Rust's shortest round-trip representation (`{:?}`), so finite values read back
/// with [`Table::read`] bit-for-bit. Non-finite values are written as `NaN`, `inf` and `-inf`
/// so no output is lost, but [`Table::read`] rejects them. Names containing commas, quotes or
/// line breaks are quoted.
pub fn write_csv(path: &Path, header: &[String], data: &DMatrix<f64>) -> Result<(), TableError> {
    if header.len() != data.ncols() {
        return Err(TableError::ShapeMismatch { path: path.to_path_buf(), names: header.len(), ncols: data.ncols() });
    }
    let write_error = |source: io::Error| TableError::Write { path: path.to_path_buf(), source };
    let csv_write_error = |e: csv::Error| {
        write_error(match e.into_kind() {
            csv::ErrorKind::Io(source) => source,
            other => io::Error::other(format!("{other:?}")),
        })
    };
    let file = std::fs::File::create(path).map_err(write_error)?;
    let mut writer = csv::WriterBuilder::new().from_writer(file);
    writer.write_record(header).map_err(csv_write_error)?;
    let mut cell = String::new();
    for i in 0..data.nrows() {
        for j in 0..data.ncols() {
            cell.clear();
            let _ = write!(cell, "{:?}", data[(i, j)]);
            writer.write_field(&cell).map_err(csv_write_error)?;
        }
        writer.write_record(None::<&[u8]>).map_err(csv_write_error)?;
    }
    writer.flush().map_err(write_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file `name` in its own temporary directory; both removed on drop.
    struct TempFile {
        _dir: tempfile::TempDir,
        path: PathBuf,
    }

    impl TempFile {
        fn new(name: &str) -> Self {
            let dir = tempfile::tempdir().expect("temporary directory");
            let path = dir.path().join(name);
            TempFile { _dir: dir, path }
        }

        fn with(name: &str, contents: &[u8]) -> Self {
            let file = Self::new(name);
            std::fs::write(&file.path, contents).expect("write temp file");
            file
        }

        fn name(&self) -> String {
            self.path.display().to_string()
        }
    }

    /// Read `contents` from a temp file; it must fail. Returns the message and the file name.
    fn read_err(contents: &str) -> (String, String) {
        let file = TempFile::with("train.csv", contents.as_bytes());
        match Table::read(&file.path) {
            Ok(t) => panic!("expected an error for {contents:?}, got {t:?}"),
            Err(e) => (e.to_string(), file.name()),
        }
    }

    fn read_ok(contents: &str) -> Table {
        let file = TempFile::with("train.csv", contents.as_bytes());
        Table::read(&file.path).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The message starts with the file name and contains every one of `parts`.
    fn assert_msg(msg: &str, file: &str, parts: &[&str]) {
        assert!(msg.starts_with(&format!("{file}:")), "message does not start with the file name {file:?}: {msg}");
        for part in parts {
            assert!(msg.contains(part), "message lacks {part:?}: {msg}");
        }
    }

    #[test]
    fn missing_file_names_file_and_os_error() {
        let file = TempFile::new("missing.csv");
        let err = Table::read(&file.path).unwrap_err();
        assert!(matches!(err, TableError::Read { .. }), "{err:?}");
        let msg = err.to_string();
        assert_msg(&msg, &file.name(), &["cannot read file", "os error 2"]);
        let os = io::Error::from_raw_os_error(2).to_string();
        assert!(msg.contains(&os), "{msg} lacks {os}");
    }

    #[test]
    fn directory_is_unreadable() {
        let dir = TempFile::new("dir.csv");
        std::fs::create_dir(&dir.path).unwrap();
        let err = Table::read(&dir.path);
        let _ = std::fs::remove_dir(&dir.path);
        let msg = err.unwrap_err().to_string();
        assert_msg(&msg, &dir.name(), &["cannot read file", "os error"]);
    }

    #[test]
    fn empty_file() {
        for contents in ["", "\n", "\r\n\r\n", "  \n\t\n"] {
            let (msg, file) = read_err(contents);
            assert_msg(&msg, &file, &["the file is empty", "header row"]);
        }
    }

    #[test]
    fn header_only() {
        for contents in ["a,b", "a,b\n", "a,b\r\n\r\n", "\na,b\n  \n"] {
            let (msg, file) = read_err(contents);
            assert_msg(&msg, &file, &["no data rows", "only a header row"]);
        }
        let (msg, file) = read_err("\n\na,b\n");
        assert_msg(&msg, &file, &["(line 3)"]);
    }

    #[test]
    fn duplicate_column_name() {
        let (msg, file) = read_err("x, AT ,y,AT\n1,2,3,4\n");
        assert_msg(&msg, &file, &["line 1:", "duplicate column name \"AT\"", "columns 2 and 4"]);
    }

    #[test]
    fn empty_column_names() {
        let (msg, file) = read_err("a,,b\n1,2,3\n");
        assert_msg(&msg, &file, &["line 1:", "column 2 has an empty name"]);
        let (msg, file) = read_err("a,b,\n1,2,3\n");
        assert_msg(&msg, &file, &["line 1:", "column 3 has an empty name"]);
        let (msg, file) = read_err("\n\na,\"  \"\n1,2\n");
        assert_msg(&msg, &file, &["line 3:", "column 2 has an empty name"]);
    }

    #[test]
    fn non_utf8_header() {
        let file = TempFile::with("train.csv", b"a,b\xff\n1,2\n");
        let msg = Table::read(&file.path).unwrap_err().to_string();
        assert_msg(&msg, &file.name(), &["line 1:", "column 2", "not valid UTF-8"]);
    }

    #[test]
    fn ragged_rows() {
        let (msg, file) = read_err("a,b,c\n1,2,3\n4,5\n");
        assert_msg(
            &msg,
            &file,
            &["line 3:", "row has 2 fields, but the header has 3 columns", "column \"c\" (3) is missing"],
        );
        let (msg, file) = read_err("a,b,c\n1\n");
        assert_msg(&msg, &file, &["line 2:", "row has 1 field,", "\"b\" (2) to \"c\" (3)"]);
        let (msg, file) = read_err("a,b,c\n1,2,3\n4,5,6,zz\n");
        assert_msg(
            &msg,
            &file,
            &[
                "line 3:",
                "row has 4 fields, but the header has 3 columns",
                "unexpected field 4 \"zz\" after the last column \"c\" (3)",
            ],
        );
        let (msg, file) = read_err("a,b\n1,2,\n");
        assert_msg(&msg, &file, &["line 2:", "3 fields", "trailing comma"]);
    }

    #[test]
    fn non_numeric_cell_exact_message() {
        let (msg, file) = read_err("AT,V,AP\n1,2,3\n4,5,6\n7,8,9\n1,1,1\n2,2,2\nabc,3,3\n");
        assert_eq!(msg, format!("{file}: line 7, column \"AT\" (1): cannot parse \"abc\" as a number"));
        let (msg, file) = read_err("x,y\n1,2\n3, 1.5.2 \n");
        assert_eq!(msg, format!("{file}: line 3, column \"y\" (2): cannot parse \"1.5.2\" as a number"));
    }

    #[test]
    fn non_numeric_cell_is_truncated() {
        let long = "z".repeat(100);
        let (msg, file) = read_err(&format!("a,b\n1,{long}\n"));
        let shown = format!("\"{}…\"", "z".repeat(MAX_QUOTED_CHARS));
        assert_msg(&msg, &file, &["line 2", "column \"b\" (2)", &shown]);
        assert!(!msg.contains(&"z".repeat(MAX_QUOTED_CHARS + 1)), "{msg}");
        // Multi-byte characters are cut on a character boundary.
        let (msg, _) = read_err(&format!("a\n{}\n", "é".repeat(60)));
        assert!(msg.contains(&format!("\"{}…\"", "é".repeat(40))), "{msg}");
    }

    #[test]
    fn non_utf8_cell() {
        let file = TempFile::with("train.csv", b"a,b\n1,2\n3,\xff4\n");
        let msg = Table::read(&file.path).unwrap_err().to_string();
        assert_msg(&msg, &file.name(), &["line 3", "column \"b\" (2)", "cannot parse"]);
    }

    #[test]
    fn empty_cell() {
        let (msg, file) = read_err("a,b,c\n1,2,3\n4,,6\n");
        assert_eq!(msg, format!("{file}: line 3, column \"b\" (2): empty cell, expected a number"));
        let (msg, file) = read_err("a,b\n1,\"\"\n");
        assert_msg(&msg, &file, &["line 2", "column \"b\" (2)", "empty cell"]);
    }

    #[test]
    fn non_finite_cells_are_rejected() {
        for bad in ["NaN", "nan", "inf", "-inf", "+Infinity", "1e400", "-1e309"] {
            let (msg, file) = read_err(&format!("a,target\n1,2\n3,4\n5,{bad}\n"));
            assert_msg(&msg, &file, &["line 4", "column \"target\" (2)", &format!("\"{bad}\" is not a finite number")]);
        }
    }

    #[test]
    fn too_few_rows() {
        let file = TempFile::with("train.csv", b"a,b\n1,2\n");
        let table = Table::read(&file.path).unwrap();
        let msg = table.require_rows(2, "").unwrap_err().to_string();
        assert_eq!(msg, format!("{}: need at least 2 data rows, found 1", file.name()));
        let msg = table.require_rows(3, "training data").unwrap_err().to_string();
        assert_eq!(msg, format!("{} (training data): need at least 3 data rows, found 1", file.name()));
        table.require_rows(1, "training data").unwrap();
        table.require_rows(0, "").unwrap();
    }

    #[test]
    fn unknown_target_lists_columns() {
        let table = read_ok("a,b,c\n1,2,3\n");
        let msg = table.split_target(Some("y")).unwrap_err().to_string();
        assert_msg(
            &msg,
            &table.path.display().to_string(),
            &["no column named \"y\"", "\"a\", \"b\", \"c\"", "0 to 2"],
        );
        let msg = table.split_target(Some("-1")).unwrap_err().to_string();
        assert!(msg.contains("no column named \"-1\""), "{msg}");
    }

    #[test]
    fn unknown_target_list_is_capped() {
        let header: Vec<String> = (0..30).map(|j| format!("c{j}")).collect();
        let row = vec!["1"; 30].join(",");
        let table = read_ok(&format!("{}\n{row}\n", header.join(",")));
        let msg = table.split_target(Some("zz")).unwrap_err().to_string();
        assert!(msg.contains("\"c19\", ... and 10 more"), "{msg}");
        assert!(!msg.contains("\"c20\""), "{msg}");
    }

    #[test]
    fn target_index_out_of_range() {
        let table = read_ok("a,b,c\n1,2,3\n");
        let msg = table.split_target(Some("3")).unwrap_err().to_string();
        assert_msg(
            &msg,
            &table.path.display().to_string(),
            &["target column index 3 is out of range", "3 columns", "0 to 2"],
        );
    }

    #[test]
    fn single_column_has_no_inputs() {
        let table = read_ok("y\n1\n2\n");
        for target in [None, Some("y"), Some("0")] {
            let msg = table.split_target(target).unwrap_err().to_string();
            assert_msg(&msg, &table.path.display().to_string(), &["no input columns", "\"y\""]);
        }
    }

    #[test]
    fn columns_are_matched_by_name_not_position() {
        let names: Vec<String> = ["AT", "V"].map(String::from).to_vec();
        // Same names, other order: reordered to the expected order.
        let table = read_ok("V,AT\n1,2\n3,4\n");
        let x = table.select_columns(&names, "pool view", "the training inputs").unwrap();
        assert_eq!(x, DMatrix::from_row_slice(2, 2, &[2., 1., 4., 3.]));
        // Same count, other names: refused, naming what is missing and what is unexpected.
        let table = read_ok("foo,V\n1,2\n");
        let msg = table.select_columns(&names, "pool view", "the training inputs").unwrap_err().to_string();
        assert_eq!(
            msg,
            format!(
                "{} (pool view): columns do not match the training inputs: missing \"AT\"; unexpected \"foo\" \
                 (expected \"AT\", \"V\", in any order)",
                table.path.display()
            )
        );
        // A missing column only; an extra column only.
        let msg = read_ok("V\n1\n").select_columns(&names, "", "x").unwrap_err().to_string();
        assert!(msg.contains("missing \"AT\" (expected"), "{msg}");
        let msg = read_ok("AT,V,RH\n1,2,3\n").select_columns(&names, "", "x").unwrap_err().to_string();
        assert!(msg.contains("unexpected \"RH\" (expected"), "{msg}");
    }

    #[test]
    fn test_view_with_target_is_matched_by_name() {
        let names: Vec<String> = ["AT", "V"].map(String::from).to_vec();
        let table = read_ok("V,PE,AT\n1,9,2\n3,8,4\n");
        let (x, y) = table.split_target_named("PE", &names, "test view", "the training inputs").unwrap();
        assert_eq!(x, DMatrix::from_row_slice(2, 2, &[2., 1., 4., 3.]));
        assert_eq!(y, DVector::from_vec(vec![9., 8.]));
        let err = read_ok("V,PE,RH\n1,9,2\n").split_target_named("PE", &names, "test view", "the training inputs");
        assert!(err.unwrap_err().to_string().contains("missing \"AT\"; unexpected \"RH\""));
    }

    #[test]
    fn split_target_by_name_index_and_default() {
        let table = read_ok("a,b,c\n1,2,3\n4,5,6\n");
        assert_eq!(table.columns, ["a", "b", "c"]);
        assert_eq!(table.data, DMatrix::from_row_slice(2, 3, &[1., 2., 3., 4., 5., 6.]));

        let (x, y, names, t) = table.split_target(None).unwrap();
        assert_eq!(x, DMatrix::from_row_slice(2, 2, &[1., 2., 4., 5.]));
        assert_eq!(y, DVector::from_vec(vec![3., 6.]));
        assert_eq!((names, t.as_str()), (vec!["a".into(), "b".into()], "c"));

        let by_name = table.split_target(Some("b")).unwrap();
        let by_index = table.split_target(Some(" 1 ")).unwrap();
        assert_eq!(by_name.0, DMatrix::from_row_slice(2, 2, &[1., 3., 4., 6.]));
        assert_eq!(by_name.1, DVector::from_vec(vec![2., 5.]));
        assert_eq!(by_name.2, ["a", "c"]);
        assert_eq!(by_name.3, "b");
        assert_eq!(by_name, by_index);

        let first = table.split_target(Some("0")).unwrap();
        assert_eq!(first.1, DVector::from_vec(vec![1., 4.]));
        assert_eq!(first.2, ["b", "c"]);
    }

    #[test]
    fn target_name_wins_over_index() {
        let table = read_ok("x,0,z\n1,2,3\n");
        let (_, y, names, t) = table.split_target(Some("0")).unwrap();
        assert_eq!(t, "0");
        assert_eq!(y, DVector::from_vec(vec![2.]));
        assert_eq!(names, ["x", "z"]);
    }

    #[test]
    fn crlf_whitespace_bom_and_trailing_blank_line() {
        let table = read_ok("\u{feff} a , b \r\n 1 ,\t+2\r\n1e-3 , -0.5\r\n\"3.5\",.5\r\n\r\n");
        assert_eq!(table.columns, ["a", "b"]);
        assert_eq!(table.data, DMatrix::from_row_slice(3, 2, &[1., 2., 1e-3, -0.5, 3.5, 0.5]));
    }

    #[test]
    fn crlf_line_numbers() {
        let (msg, file) = read_err("a,b\r\n1,2\r\n3,4\r\n5,x\r\n");
        assert_msg(&msg, &file, &["line 4, column \"b\" (2)"]);
        let (msg, file) = read_err("a,b\r\n\r\n1,2\r\n\r\n\r\n5,6,7\r\n");
        assert_msg(&msg, &file, &["line 6:"]);
        // Old Mac line endings.
        let (msg, file) = read_err("a,b\r1,2\r3,x\r");
        assert_msg(&msg, &file, &["line 3, column \"b\" (2)"]);
    }

    #[test]
    fn blank_lines_are_skipped_and_counted() {
        let table = read_ok("\n\na,b\n1,2\n\n   \n3,4\n\n");
        assert_eq!(table.data, DMatrix::from_row_slice(2, 2, &[1., 2., 3., 4.]));
        let (msg, file) = read_err("a,b\n1,2\n\n   \n3,x\n");
        assert_msg(&msg, &file, &["line 5, column \"b\" (2)"]);
        let (msg, file) = read_err("a,b\n1,2\n\n\n3,x\n");
        assert_msg(&msg, &file, &["line 5, column \"b\" (2)"]);
        let (msg, file) = read_err("\n\na,b\n1,x\n");
        assert_msg(&msg, &file, &["line 4, column \"b\" (2)"]);
    }

    #[test]
    fn quoted_line_break_counts_lines() {
        let table = read_ok("\"a\nb\",c\n1,2\n");
        assert_eq!(table.columns, ["a\nb", "c"]);
        let (msg, file) = read_err("\"a\nb\",c\n1,2\n3,x\n");
        assert_msg(&msg, &file, &["line 4, column \"c\" (2)"]);
    }

    /// Finite values with awkward decimal representations.
    fn awkward_values() -> Vec<f64> {
        let mut values = vec![
            0.0,
            -0.0,
            0.1,
            -0.1,
            1.0 / 3.0,
            std::f64::consts::PI,
            1e-7,
            1e21,
            123_456_789.125,
            f64::MAX,
            f64::MIN,
            f64::MIN_POSITIVE,
            f64::EPSILON,
            5e-324,
            -f64::from_bits(0x000F_FFFF_FFFF_FFFF), // largest subnormal
        ];
        // Pseudo-random bit patterns (a fixed LCG), keeping the finite ones.
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        while values.len() < 300 {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            let v = f64::from_bits(state);
            if v.is_finite() {
                values.push(v);
            }
        }
        values
    }

    #[test]
    fn display_and_debug_round_trip() {
        for v in awkward_values() {
            for text in [format!("{v}"), format!("{v:?}")] {
                let back: f64 = text.parse().unwrap();
                assert_eq!(back.to_bits(), v.to_bits(), "{text}");
            }
        }
        // Debug is the compact one: Display never uses an exponent.
        assert_eq!(format!("{:?}", 1e-7), "1e-7");
        assert_eq!(format!("{}", 1e-7), "0.0000001");
    }

    #[test]
    fn write_then_read_is_bit_exact() {
        let values = awkward_values();
        let ncols = 3;
        let nrows = values.len() / ncols;
        let data = DMatrix::from_row_slice(nrows, ncols, &values[..nrows * ncols]);
        let header = vec!["x 1".to_owned(), "with,comma".to_owned(), "y".to_owned()];
        let file = TempFile::new("out.csv");
        write_csv(&file.path, &header, &data).unwrap();
        let table = Table::read(&file.path).unwrap();
        assert_eq!(table.path, file.path);
        assert_eq!(table.columns, header);
        assert_eq!(table.data.shape(), data.shape());
        for (a, b) in table.data.iter().zip(data.iter()) {
            assert_eq!(a.to_bits(), b.to_bits(), "{a:?} != {b:?}");
        }
        let text = std::fs::read_to_string(&file.path).unwrap();
        assert!(text.starts_with("x 1,\"with,comma\",y\n"), "{text}");
        assert!(text.contains("\n0.0,-0.0,0.1\n"), "{text}");
    }

    #[test]
    fn write_csv_errors() {
        let data = DMatrix::from_row_slice(1, 2, &[1.0, 2.0]);
        let file = TempFile::new("out.csv");
        let msg = write_csv(&file.path, &["a".to_owned()], &data).unwrap_err().to_string();
        assert_msg(&msg, &file.name(), &["1 column name but 2 data columns"]);
        assert!(!file.path.exists());

        let missing_dir = TempFile::new("no-such-dir");
        let path = missing_dir.path.join("out.csv");
        let err = write_csv(&path, &["a".to_owned(), "b".to_owned()], &data).unwrap_err();
        assert!(matches!(err, TableError::Write { .. }), "{err:?}");
        assert_msg(&err.to_string(), &path.display().to_string(), &["cannot write file", "os error 2"]);
    }

    #[test]
    fn hand_built_inconsistent_table_does_not_panic() {
        let table = Table {
            path: PathBuf::from("hand.csv"),
            columns: vec!["a".into(), "b".into(), "c".into()],
            data: DMatrix::zeros(2, 2),
        };
        let msg = table.split_target(None).unwrap_err().to_string();
        assert_eq!(msg, "hand.csv: 3 column names but 2 data columns");
        assert!(table.select_columns(&table.columns, "", "").is_err());

        let empty = Table { path: PathBuf::from("none.csv"), columns: vec![], data: DMatrix::zeros(0, 0) };
        assert!(empty.split_target(None).is_err());
        assert!(empty.split_target(Some("0")).is_err());
        assert!(empty.require_rows(1, "").is_err());
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        /// Any finite f64 (every exponent, both signs, subnormals).
        fn finite() -> impl Strategy<Value = f64> {
            any::<f64>().prop_filter("finite", |v| v.is_finite())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(128))]

            /// `write_csv` then `Table::read` gives back the names and every value bit for bit.
            #[test]
            fn any_finite_table_round_trips(
                (names, values, rows) in (1usize..6, 1usize..8).prop_flat_map(|(c, r)| (
                    prop::collection::btree_set("[a-zA-Z_][a-zA-Z0-9_ ,\"]{0,8}", c..=c),
                    prop::collection::vec(finite(), c * r..=c * r),
                    Just(r),
                ))
            ) {
                let names: Vec<String> = names.into_iter().map(|n| n.trim().to_string()).collect();
                prop_assume!(names.iter().all(|n| !n.is_empty()));
                prop_assume!(names.iter().collect::<std::collections::BTreeSet<_>>().len() == names.len());
                let data = DMatrix::from_row_slice(rows, names.len(), &values);
                let file = TempFile::new("t.csv");
                write_csv(&file.path, &names, &data).unwrap();
                let t = Table::read(&file.path).unwrap();
                prop_assert_eq!(&t.columns, &names);
                prop_assert_eq!(t.data.shape(), data.shape());
                for (a, b) in t.data.iter().zip(data.iter()) {
                    prop_assert_eq!(a.to_bits(), b.to_bits());
                }
            }

            /// Any bytes: a table or an error that names the file, never a panic or a NaN.
            #[test]
            fn any_bytes_give_a_table_or_an_error(bytes in prop::collection::vec(
                prop_oneof![any::<u8>(), Just(b','), Just(b'\n'), Just(b'"'), Just(b'1'), Just(b'.'), Just(b'e')], 0..200))
            {
                match Table::parse(Path::new("fuzz.csv"), &bytes) {
                    Ok(t) => prop_assert!(t.data.iter().all(|v| v.is_finite())),
                    Err(e) => prop_assert!(e.to_string().contains("fuzz.csv"), "{}", e),
                }
            }
        }
    }
}
