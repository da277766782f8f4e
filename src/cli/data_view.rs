//! `dpcotrain data ids` and `dpcotrain data view`: a party's own table turned into the three
//! files its node reads. Parties name entities by index: they agree on the pool's and the test
//! set's entities (by an id every party's table carries, in one public order: `data ids` draws
//! them), and each party then writes, from its own table alone, its labelled rows (`train.csv`),
//! its covariates of the pool in that order (`pool.csv`: never a label) and of the test entities
//! with their labels (`test.csv`). The id column itself leaves no file.

use anyhow::Context;
use clap::Args;
use dpcotrain_cotrain::table::write_csv;
use nalgebra::DMatrix;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

#[derive(Debug, Args)]
pub struct IdsArgs {
    /// A table holding the id column (any party's, or a public list of the entities).
    #[arg(long)]
    pub input: PathBuf,
    /// The id column: names each entity in every party's table.
    #[arg(long)]
    pub id: String,
    /// Pool entities to draw.
    #[arg(long)]
    pub pool: usize,
    /// Test entities to draw (none of them in the pool).
    #[arg(long)]
    pub test: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Writes pool-ids.csv and test-ids.csv here (one column, the id, in the agreed order).
    #[arg(long)]
    pub out: PathBuf,
    /// Replace id files already in --out.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct ViewArgs {
    /// This party's own table (CSV with a header row): the id column, its covariates and, on
    /// the rows it has them, its labels.
    #[arg(long)]
    pub input: PathBuf,
    /// The id column.
    #[arg(long)]
    pub id: String,
    /// The label column. Its values are read for train.csv and test.csv only.
    #[arg(long)]
    pub target: String,
    /// The covariates to keep, in order (default: every column but the id and the target).
    #[arg(long, value_delimiter = ',')]
    pub columns: Vec<String>,
    /// The agreed pool ids, in order (`data ids` writes them).
    #[arg(long)]
    pub pool_ids: PathBuf,
    /// The agreed test ids, in order.
    #[arg(long)]
    pub test_ids: PathBuf,
    /// Writes train.csv, pool.csv and test.csv here.
    #[arg(long)]
    pub out: PathBuf,
    /// Replace those files if --out already holds them.
    #[arg(long)]
    pub force: bool,
}

/// A CSV's header and rows as text, with each row's line in the file.
struct Raw {
    path: PathBuf,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    lines: Vec<u64>,
}

impl Raw {
    fn read(path: &Path) -> anyhow::Result<Raw> {
        // Read once: the CSV reader parses these bytes, and their newlines number the lines.
        let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        let mut r = csv::ReaderBuilder::new().trim(csv::Trim::All).from_reader(bytes.as_slice());
        let header: Vec<String> = r
            .headers()
            .with_context(|| format!("{}: no header row", path.display()))?
            .iter()
            .map(String::from)
            .collect();
        // The line each row starts on, counted from its byte offset (the header is line 1;
        // blank lines and quoted line breaks count as the file has them).
        let newlines: Vec<u64> =
            bytes.iter().enumerate().filter(|(_, b)| **b == b'\n').map(|(i, _)| i as u64).collect();
        let (mut rows, mut lines) = (Vec::new(), Vec::new());
        for rec in r.records() {
            let rec = rec.with_context(|| format!("cannot read {}", path.display()))?;
            // The position may sit on blank lines the reader skipped before the row.
            let mut at = rec.position().map_or(0, csv::Position::byte) as usize;
            while at < bytes.len() && (bytes[at] == b'\n' || bytes[at] == b'\r') {
                at += 1;
            }
            let at = at as u64;
            lines.push(newlines.partition_point(|&n| n < at) as u64 + 1);
            rows.push(rec.iter().map(String::from).collect());
        }
        Ok(Raw { path: path.to_path_buf(), header, rows, lines })
    }

    fn column(&self, name: &str) -> anyhow::Result<usize> {
        self.header
            .iter()
            .position(|h| h == name)
            .with_context(|| format!("{}: no column {name:?} (it has {})", self.path.display(), self.header.join(", ")))
    }

    /// Row index of every id; a repeated or empty id is an error naming its rows.
    fn ids(&self, col: usize) -> anyhow::Result<HashMap<&str, usize>> {
        let mut at = HashMap::new();
        for (i, row) in self.rows.iter().enumerate() {
            let id = row[col].as_str();
            if id.is_empty() {
                anyhow::bail!("{} line {}: the id {:?} is empty", self.path.display(), self.lines[i], self.header[col]);
            }
            if let Some(j) = at.insert(id, i) {
                anyhow::bail!("{}: id {id:?} on lines {} and {}", self.path.display(), self.lines[j], self.lines[i]);
            }
        }
        Ok(at)
    }

    /// The number at `row`, `col`, finite.
    fn number(&self, row: usize, col: usize) -> anyhow::Result<f64> {
        let text = &self.rows[row][col];
        match text.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(v),
            _ => anyhow::bail!(
                "{} line {}, column {:?}: {text:?} is not a finite number",
                self.path.display(),
                self.lines[row],
                self.header[col]
            ),
        }
    }
}

/// `data ids`: draw the pool's and the test set's entities from a table's id column.
pub fn ids(a: IdsArgs) -> anyhow::Result<()> {
    let raw = Raw::read(&a.input)?;
    let col = raw.column(&a.id)?;
    raw.ids(col)?;
    let n = raw.rows.len();
    if a.pool == 0 || a.test == 0 || a.pool.checked_add(a.test).is_none_or(|k| k >= n) {
        anyhow::bail!(
            "--pool {} and --test {} must each be at least 1 and leave labelled rows: {} has {n} rows",
            a.pool,
            a.test,
            a.input.display()
        );
    }
    let files = [a.out.join("pool-ids.csv"), a.out.join("test-ids.csv")];
    refuse_existing(&files, a.force)?;
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(a.seed));
    std::fs::create_dir_all(&a.out).with_context(|| format!("cannot create {}", a.out.display()))?;
    for (path, ids) in files.iter().zip([&order[..a.pool], &order[a.pool..a.pool + a.test]]) {
        let mut w = csv::Writer::from_writer(Vec::new());
        w.write_record([&a.id])?;
        for &i in ids {
            w.write_record([&raw.rows[i][col]])?;
        }
        let text = String::from_utf8(w.into_inner()?)?;
        dpcotrain_federation::durable::write_report(path, &text)?;
    }
    eprintln!("wrote {} ({} pool ids) and {} ({} test ids)", files[0].display(), a.pool, files[1].display(), a.test);
    Ok(())
}

/// The ids of an id file (one column, a header), in order.
fn id_list(path: &Path) -> anyhow::Result<Vec<String>> {
    let raw = Raw::read(path)?;
    if raw.header.len() != 1 {
        anyhow::bail!("{}: an id file has one column, the id (it has {})", path.display(), raw.header.join(", "));
    }
    let mut seen = HashSet::new();
    for (i, row) in raw.rows.iter().enumerate() {
        if !seen.insert(row[0].as_str()) {
            anyhow::bail!("{} line {}: id {:?} is listed twice", path.display(), raw.lines[i], row[0]);
        }
    }
    Ok(raw.rows.into_iter().map(|mut r| r.swap_remove(0)).collect())
}

/// `data view`: this party's train, pool and test files from its own table and the agreed ids.
pub fn view(a: ViewArgs) -> anyhow::Result<()> {
    let raw = Raw::read(&a.input)?;
    let id = raw.column(&a.id)?;
    let target = raw.column(&a.target)?;
    if id == target {
        anyhow::bail!("--id and --target name the same column {:?}", a.id);
    }
    let columns: Vec<String> = if a.columns.is_empty() {
        raw.header.iter().enumerate().filter(|(j, _)| *j != id && *j != target).map(|(_, h)| h.clone()).collect()
    } else {
        a.columns.clone()
    };
    let cols: Vec<usize> = columns.iter().map(|c| raw.column(c)).collect::<anyhow::Result<_>>()?;
    if let Some(c) = columns.iter().enumerate().find_map(|(i, c)| columns[..i].contains(c).then_some(c)) {
        anyhow::bail!("--columns names {c:?} twice");
    }
    if let Some(c) = cols.iter().find(|&&c| c == id || c == target) {
        anyhow::bail!("--columns: {:?} is the id or the target, not a covariate", raw.header[*c]);
    }
    if cols.is_empty() {
        anyhow::bail!("{}: no covariate columns besides the id and the target", a.input.display());
    }
    let at = raw.ids(id)?;
    let pool = id_list(&a.pool_ids)?;
    let test = id_list(&a.test_ids)?;
    let test_set: HashSet<&String> = test.iter().collect();
    if let Some(both) = pool.iter().find(|p| test_set.contains(p)) {
        anyhow::bail!("id {both:?} is in both {} and {}", a.pool_ids.display(), a.test_ids.display());
    }
    let rows_of = |ids: &[String], file: &Path| -> anyhow::Result<Vec<usize>> {
        ids.iter()
            .map(|i| {
                at.get(i.as_str()).copied().with_context(|| {
                    format!("{}: id {i:?} (listed in {}) is not in this table", a.input.display(), file.display())
                })
            })
            .collect()
    };
    let pool_rows = rows_of(&pool, &a.pool_ids)?;
    let test_rows = rows_of(&test, &a.test_ids)?;
    let shared: HashSet<usize> = pool_rows.iter().chain(&test_rows).copied().collect();
    // Labelled rows: every other row with a label; rows without one are left out (and counted).
    let train_rows: Vec<usize> =
        (0..raw.rows.len()).filter(|i| !shared.contains(i) && !raw.rows[*i][target].is_empty()).collect();
    let unlabelled = raw.rows.len() - shared.len() - train_rows.len();
    if train_rows.is_empty() {
        anyhow::bail!("{}: no labelled rows outside the pool and the test set", a.input.display());
    }
    let matrix = |rows: &[usize], with_y: bool| -> anyhow::Result<DMatrix<f64>> {
        let width = cols.len() + usize::from(with_y);
        let mut m = DMatrix::zeros(rows.len(), width);
        for (r, &i) in rows.iter().enumerate() {
            for (c, &j) in cols.iter().enumerate() {
                m[(r, c)] = raw.number(i, j)?;
            }
            if with_y {
                if raw.rows[i][target].is_empty() {
                    anyhow::bail!(
                        "{} line {}: entity {:?} has no label in {:?}, and a test entity needs one (draw the ids again with another --seed, or from rows that are labelled)",
                        raw.path.display(),
                        raw.lines[i],
                        raw.rows[i][id],
                        raw.header[target]
                    );
                }
                m[(r, cols.len())] = raw.number(i, target)?;
            }
        }
        Ok(m)
    };
    let (train, pool_x, test_x) = (matrix(&train_rows, true)?, matrix(&pool_rows, false)?, matrix(&test_rows, true)?);
    let files = [a.out.join("train.csv"), a.out.join("pool.csv"), a.out.join("test.csv")];
    refuse_existing(&files, a.force)?;
    std::fs::create_dir_all(&a.out).with_context(|| format!("cannot create {}", a.out.display()))?;
    let mut with_target = columns.clone();
    with_target.push(a.target.clone());
    // All three are written beside their names first, then renamed: a failure leaves none of
    // them half-written. train.csv and test.csv hold labels: readable by their owner only.
    let parts: Vec<PathBuf> = files.iter().map(|f| f.with_extension("csv.partial")).collect();
    let written = (|| -> anyhow::Result<()> {
        write_csv(&parts[0], &with_target, &train)?;
        write_csv(&parts[1], &columns, &pool_x)?;
        write_csv(&parts[2], &with_target, &test_x)?;
        #[cfg(unix)]
        for p in [&parts[0], &parts[2]] {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o600))?;
        }
        for (part, file) in parts.iter().zip(&files) {
            std::fs::rename(part, file).with_context(|| format!("cannot write {}", file.display()))?;
        }
        Ok(())
    })();
    if written.is_err() {
        for p in &parts {
            let _ = std::fs::remove_file(p);
        }
    }
    written?;
    eprintln!(
        "wrote {}: train.csv {} labelled rows, pool.csv {} entities, test.csv {} entities; covariates {}{}",
        a.out.display(),
        train_rows.len(),
        pool_rows.len(),
        test_rows.len(),
        columns.join(", "),
        if unlabelled > 0 { format!("; {unlabelled} rows without a label left out") } else { String::new() }
    );
    Ok(())
}

fn refuse_existing(files: &[PathBuf], force: bool) -> anyhow::Result<()> {
    if !force && let Some(f) = files.iter().find(|f| f.exists()) {
        anyhow::bail!("{} exists: choose another --out, or add --force to replace it", f.display());
    }
    Ok(())
}
