//! The Combined Cycle Power Plant benchmark of Thomas §4.5 (docs/decisions.md D3, D4,
//! D18).
//!
//! The UCI CCPP data (9,568 hourly rows; covariates AT, V, AP, RH; response PE; CC BY 4.0, source
//! and attribution in `crates/cotrain/data/README.md`) are embedded in the binary, so the loader works offline
//! and from any working directory.
//!
//! Protocol:
//! - Covariates and PE are standardised to mean 0 and sd 1 with **full-data** statistics, as the
//!   thesis did (the reproduction choice of D18; the sd is the sample sd, divisor n − 1).
//! - Views are configurable by column name; the default is view 1 = {AT, V} (strong) and
//!   view 2 = {AP, RH} (weak), decision D3.
//! - The test set and the unlabelled pool (250 each in the thesis) are drawn at random without
//!   replacement from all rows, unmasked, and shared by index.
//! - Each party's private labelled rows come from the remaining rows, disjoint between parties.
//!   Unmasked: from all remaining rows. Masked (D4): k-means with k = 2 (k-means++ seeding with
//!   `cfg.seed`) on the four standardised covariates of the full data; each row goes to its nearest
//!   centroid; party 1 draws from the cluster with the lower mean AT and party 2 from the other.

use nalgebra::{DMatrix, DVector};
use rand::SeedableRng;
use rand::seq::index::sample;
use rand_chacha::ChaCha20Rng;

use crate::CotrainError;
use crate::data::{PartyData, Scenario};
use crate::error::DataError;
use crate::table::Table;

/// The embedded CSV (header `AT,V,AP,RH,PE`).
const CCPP_CSV: &str = include_str!("../data/ccpp.csv");

/// Name of the CCPP response column.
pub const RESPONSE: &str = "PE";

/// A real data set shipped with the crate (source, licence, derivation and checksum of each in
/// `crates/cotrain/data/README.md`), split into two parties' views as this module describes.
/// Every one is embedded, so the scenarios work offline and from any working directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RealData {
    /// UCI Combined Cycle Power Plant (Tüfekci 2014): 9,568 rows, PE from AT, V, AP, RH.
    Ccpp,
    /// Capital Bikeshare hourly counts (Fanaee-T & Gama 2014, via ISLP 0.6.0): 8,645 rows,
    /// log(1 + riders) from the time of day and week ({hr, workingday, weekday}) or from the
    /// weather and season ({temp, hum, windspeed, weathersit, mnth}).
    Bikeshare,
    /// Mid-Atlantic wages (ISLP 0.6.0): 3,000 rows, log wage from demographics
    /// ({age, year, maritl}) or from schooling, job and health ({education, jobclass, health,
    /// health_ins, race}).
    Wage,
}

impl RealData {
    pub fn name(self) -> &'static str {
        match self {
            RealData::Ccpp => "ccpp",
            RealData::Bikeshare => "bikeshare",
            RealData::Wage => "wage",
        }
    }

    fn csv(self) -> &'static str {
        match self {
            RealData::Ccpp => CCPP_CSV,
            RealData::Bikeshare => include_str!("../data/bikeshare.csv"),
            RealData::Wage => include_str!("../data/wage.csv"),
        }
    }

    /// How messages and descriptions name the data set.
    fn label(self) -> &'static str {
        match self {
            RealData::Ccpp => "CCPP",
            other => other.name(),
        }
    }

    /// The response column.
    pub fn response(self) -> &'static str {
        match self {
            RealData::Ccpp => RESPONSE,
            RealData::Bikeshare => "log_bikers",
            RealData::Wage => "logwage",
        }
    }

    /// Masking: party P1 draws from the k-means cluster with the lower mean of this covariate.
    fn order_by(self) -> &'static str {
        match self {
            RealData::Ccpp => "AT",
            RealData::Bikeshare => "temp",
            RealData::Wage => "age",
        }
    }

    /// The default views of P1 and P2 (disjoint; for CCPP decision D3).
    pub fn views(self) -> (Vec<String>, Vec<String>) {
        let v = |c: &[&str]| c.iter().map(|s| (*s).to_string()).collect::<Vec<_>>();
        match self {
            RealData::Ccpp => (v(&["AT", "V"]), v(&["AP", "RH"])),
            RealData::Bikeshare => {
                (v(&["hr", "workingday", "weekday"]), v(&["temp", "hum", "windspeed", "weathersit", "mnth"]))
            }
            RealData::Wage => {
                (v(&["age", "year", "maritl"]), v(&["education", "jobclass", "health", "health_ins", "race"]))
            }
        }
    }
}

/// Lloyd iterations allowed to the k-means of the masking (k = 2 converges in a few).
const KMEANS_ITERS: usize = 100;

/// Configuration of one CCPP co-training scenario (Thomas 2017 §4.5).
#[derive(Debug, Clone, PartialEq)]
pub struct CcppConfig {
    /// The data set (CCPP unless said otherwise; the others through [`CcppConfig::of`]).
    pub data: RealData,
    /// Covariate columns of party "P1" (default `["AT", "V"]`, D3).
    pub view1: Vec<String>,
    /// Covariate columns of party "P2" (default `["AP", "RH"]`, D3).
    pub view2: Vec<String>,
    /// Whether each party's labelled rows come from its own k-means cluster (D4).
    pub masking: bool,
    /// Private labelled rows per party; thesis grid {25, 50, 100, 200}.
    pub n_obs: usize,
    /// Shared unlabelled pool size (thesis: 250).
    pub n_pool: usize,
    /// Shared test-set size (thesis: 250).
    pub n_test: usize,
    /// Seed of the row selection and of the k-means++ seeding.
    pub seed: u64,
}

impl Default for CcppConfig {
    /// Views {AT, V} | {AP, RH}, masked, n_obs = 25, 250 pool and 250 test rows, seed 0.
    fn default() -> Self {
        CcppConfig {
            data: RealData::Ccpp,
            view1: vec!["AT".into(), "V".into()],
            view2: vec!["AP".into(), "RH".into()],
            masking: true,
            n_obs: 25,
            n_pool: 250,
            n_test: 250,
            seed: 0,
        }
    }
}

impl CcppConfig {
    /// The default scenario of `data`: its default views, otherwise as [`CcppConfig::default`].
    pub fn of(data: RealData) -> Self {
        let (view1, view2) = data.views();
        CcppConfig { data, view1, view2, ..CcppConfig::default() }
    }
}

/// Parse the embedded CSV: the column names and the raw (unstandardised) 9,568 × 5 matrix.
pub fn ccpp_raw() -> Result<(Vec<String>, DMatrix<f64>), CotrainError> {
    parse_csv(CCPP_CSV, "data/ccpp.csv")
}

/// Parse CSV text through the one CSV reader of the workspace ([`Table::parse`]); errors name
/// `file` with the line and column.
fn parse_csv(text: &str, file: &str) -> Result<(Vec<String>, DMatrix<f64>), CotrainError> {
    let t = Table::parse(std::path::Path::new(file), text.as_bytes()).map_err(DataError::from)?;
    Ok((t.columns, t.data))
}

/// The data with every column standardised to mean 0 and sample sd 1 over the full data
/// (D18, reproduction profile).
fn standardised(data: RealData) -> Result<(Vec<String>, DMatrix<f64>), CotrainError> {
    let (names, mut x) = parse_csv(data.csv(), &format!("data/{}.csv", data.name()))?;
    standardise(&mut x)?;
    Ok((names, x))
}

fn ccpp_standardised() -> Result<(Vec<String>, DMatrix<f64>), CotrainError> {
    standardised(RealData::Ccpp)
}

fn standardise(x: &mut DMatrix<f64>) -> Result<(), CotrainError> {
    let n = x.nrows();
    if n < 2 {
        return Err(DataError::TooFewToStandardise.into());
    }
    for mut col in x.column_iter_mut() {
        let mean = col.sum() / n as f64;
        let sd = (col.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt();
        if sd <= 0.0 {
            return Err(DataError::ConstantColumn.into());
        }
        col.apply(|v| *v = (*v - mean) / sd);
    }
    Ok(())
}

/// Which data rows go where (indices into the full data).
#[derive(Debug, Clone, PartialEq)]
struct Selection {
    test: Vec<usize>,
    pool: Vec<usize>,
    /// Private labelled rows of P1 and P2.
    train: [Vec<usize>; 2],
    /// k-means cluster of every row, relabelled so that cluster 0 has the lower mean AT
    /// (`None` when unmasked).
    cluster: Option<Vec<usize>>,
}

/// Column indices of a view, checked against the covariate names.
fn view_columns(names: &[String], view: &[String], label: &str, data: RealData) -> Result<Vec<usize>, CotrainError> {
    if view.is_empty() {
        return Err(DataError::EmptyView { view: label.to_string() }.into());
    }
    let response = data.response();
    let covariates: Vec<&str> = names.iter().map(String::as_str).filter(|n| *n != response).collect();
    let mut cols = Vec::with_capacity(view.len());
    for name in view {
        if name == response {
            return Err(DataError::ResponseAsCovariate { view: label.to_string(), column: response.to_string() }.into());
        }
        let Some(j) = names.iter().position(|n| n == name) else {
            return Err(DataError::UnknownColumn {
                view: label.to_string(),
                data: data.label(),
                column: name.clone(),
                known: covariates.join(", "),
            }
            .into());
        };
        if cols.contains(&j) {
            return Err(DataError::RepeatedColumn { view: label.to_string(), column: name.clone() }.into());
        }
        cols.push(j);
    }
    Ok(cols)
}

/// k-means (k = 2, k-means++ seeded) on the standardised covariates; each row's nearest centroid,
/// relabelled so that cluster 0 has the lower mean of `at`.
fn kmeans_clusters(cov: &DMatrix<f64>, at: usize, seed: u64) -> Result<Vec<usize>, CotrainError> {
    let cent = dpcotrain_gp::inducing::kmeans(cov, 2, KMEANS_ITERS, seed)?;
    let dist2 = |i: usize, k: usize| -> f64 { (0..cov.ncols()).map(|d| (cov[(i, d)] - cent[(k, d)]).powi(2)).sum() };
    let mut cluster: Vec<usize> = (0..cov.nrows()).map(|i| if dist2(i, 1) < dist2(i, 0) { 1 } else { 0 }).collect();
    let mut sum = [0.0; 2];
    let mut count = [0usize; 2];
    for (i, &c) in cluster.iter().enumerate() {
        sum[c] += cov[(i, at)];
        count[c] += 1;
    }
    if count.contains(&0) {
        return Err(DataError::EmptyCluster.into());
    }
    let (m0, m1) = (sum[0] / count[0] as f64, sum[1] / count[1] as f64);
    if m1 < m0 {
        cluster.iter_mut().for_each(|c| *c = 1 - *c);
    }
    Ok(cluster)
}

fn select(cfg: &CcppConfig, names: &[String], data: &DMatrix<f64>) -> Result<Selection, CotrainError> {
    let n = data.nrows();
    for (value, what) in
        [(cfg.n_obs, "n_obs (private labelled rows per party)"), (cfg.n_pool, "n_pool"), (cfg.n_test, "n_test")]
    {
        if value == 0 {
            return Err(CotrainError::setting(what, 0.0, "be at least 1"));
        }
    }
    let shared = cfg.n_test.checked_add(cfg.n_pool).filter(|&s| s <= n).ok_or(DataError::TooFewRows {
        what: "n_test + n_pool",
        need: cfg.n_test.saturating_add(cfg.n_pool),
        have: n,
    })?;
    let mut rng = ChaCha20Rng::seed_from_u64(cfg.seed);
    let perm = sample(&mut rng, n, n).into_vec();
    let test = perm[..cfg.n_test].to_vec();
    let pool = perm[cfg.n_test..shared].to_vec();
    let mut rest = perm[shared..].to_vec();
    rest.sort_unstable();

    let (train, cluster) = if cfg.masking {
        let (response, order_by) = (cfg.data.response(), cfg.data.order_by());
        let cov_cols: Vec<usize> = (0..names.len()).filter(|&j| names[j] != response).collect();
        let at = names.iter().filter(|n| *n != response).position(|n| n == order_by).ok_or_else(|| {
            DataError::MissingColumn { data: cfg.data.name().to_string(), column: order_by.to_string() }
        })?;
        let cov = data.select_columns(cov_cols.iter());
        let cluster = kmeans_clusters(&cov, at, cfg.seed)?;
        let mut train = [Vec::new(), Vec::new()];
        for (p, rows) in train.iter_mut().enumerate() {
            let cand: Vec<usize> = rest.iter().copied().filter(|&i| cluster[i] == p).collect();
            if cand.len() < cfg.n_obs {
                return Err(DataError::ClusterTooSmall { party: p + 1, need: cfg.n_obs, have: cand.len() }.into());
            }
            *rows = sample(&mut rng, cand.len(), cfg.n_obs).into_iter().map(|k| cand[k]).collect();
        }
        (train, Some(cluster))
    } else {
        let need = cfg.n_obs.saturating_mul(2);
        if rest.len() < need {
            return Err(DataError::TooFewRows {
                what: "two parties' labelled rows, after the test set and pool",
                need,
                have: rest.len(),
            }
            .into());
        }
        let picked: Vec<usize> = sample(&mut rng, rest.len(), need).into_iter().map(|k| rest[k]).collect();
        ([picked[..cfg.n_obs].to_vec(), picked[cfg.n_obs..].to_vec()], None)
    };
    Ok(Selection { test, pool, train, cluster })
}

/// Build the two-party CCPP scenario (Thomas §4.5) described in the module documentation.
///
/// Party "P1" holds `cfg.view1` and party "P2" holds `cfg.view2`; all values are on the
/// standardised scale. Deterministic in `cfg`. Errors for unknown or repeated column names,
/// overlapping views, PE in a view, zero sizes, or too few rows.
pub fn ccpp(cfg: &CcppConfig) -> Result<Scenario, CotrainError> {
    let (names, data) = standardised(cfg.data)?;
    build(cfg, &names, &data).map(|(s, _)| s)
}

/// An unmasked CCPP scenario with any number of parties, party i (named "P{i+1}") holding
/// `views[i]` (views may share columns). Test and pool are drawn as in [`ccpp`]; each party's
/// labelled rows are a disjoint random sample of the rest. Deterministic in the arguments.
pub fn ccpp_views(
    views: &[Vec<String>],
    n_obs: usize,
    n_pool: usize,
    n_test: usize,
    seed: u64,
) -> Result<Scenario, CotrainError> {
    if views.is_empty() {
        return Err(DataError::NoneGiven { what: "view" }.into());
    }
    let (names, data) = ccpp_standardised()?;
    let cols = views
        .iter()
        .enumerate()
        .map(|(i, v)| view_columns(&names, v, &format!("view {}", i + 1), RealData::Ccpp))
        .collect::<Result<Vec<_>, _>>()?;
    let yj = names.iter().position(|n| n == RESPONSE).ok_or_else(|| DataError::MissingColumn {
        data: RealData::Ccpp.name().to_string(),
        column: RESPONSE.to_string(),
    })?;
    let n = data.nrows();
    let need = n_test + n_pool + views.len() * n_obs;
    for (value, what) in [(n_obs, "n_obs (private labelled rows per party)"), (n_pool, "n_pool"), (n_test, "n_test")] {
        if value == 0 {
            return Err(CotrainError::setting(what, 0.0, "be at least 1"));
        }
    }
    if need > n {
        return Err(DataError::TooFewRows {
            what: "the parties' labelled rows, the pool and the test set",
            need,
            have: n,
        }
        .into());
    }
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let perm = sample(&mut rng, n, need).into_vec();
    let test = &perm[..n_test];
    let pool = &perm[n_test..n_test + n_pool];
    let rows = |idx: &[usize], c: &[usize]| DMatrix::from_fn(idx.len(), c.len(), |a, b| data[(idx[a], c[b])]);
    let labels = |idx: &[usize]| DVector::from_iterator(idx.len(), idx.iter().map(|&i| data[(i, yj)]));
    let parties = cols
        .iter()
        .enumerate()
        .map(|(p, c)| {
            let start = n_test + n_pool + p * n_obs;
            let train = &perm[start..start + n_obs];
            PartyData {
                name: format!("P{}", p + 1),
                columns: views[p].clone(),
                x_train: rows(train, c),
                y_train: labels(train),
                x_pool: rows(pool, c),
                x_test: rows(test, c),
                y_test: labels(test),
            }
        })
        .collect();
    let description = format!(
        "CCPP, full-data standardisation, unmasked, views {}, n_obs = {n_obs}, pool = {n_pool}, test = {n_test}, seed = {seed}",
        views.iter().map(|v| format!("[{}]", v.join(", "))).collect::<Vec<_>>().join(" ")
    );
    let sc = Scenario { parties, description, pool_labels: Some(labels(pool)) };
    sc.validate()?;
    Ok(sc)
}

/// The centralised reference of a CCPP scenario: one "party" holding *every* view's columns and
/// *every* party's labelled rows (what pooling all data would give; not private, evaluation
/// only). Same pool and test entities as [`ccpp`]`(cfg)`.
pub fn ccpp_pooled(cfg: &CcppConfig) -> Result<PartyData, CotrainError> {
    let (names, data) = standardised(cfg.data)?;
    let (_, sel) = build(cfg, &names, &data)?;
    let mut cols = view_columns(&names, &cfg.view1, "view1", cfg.data)?;
    cols.extend(view_columns(&names, &cfg.view2, "view2", cfg.data)?);
    let response = cfg.data.response();
    let yj = names
        .iter()
        .position(|n| n == response)
        .ok_or_else(|| DataError::MissingColumn { data: cfg.data.name().to_string(), column: response.to_string() })?;
    let train: Vec<usize> = sel.train.iter().flatten().copied().collect();
    let rows = |idx: &[usize]| DMatrix::from_fn(idx.len(), cols.len(), |a, b| data[(idx[a], cols[b])]);
    let labels = |idx: &[usize]| DVector::from_iterator(idx.len(), idx.iter().map(|&i| data[(i, yj)]));
    Ok(PartyData {
        name: "pooled".into(),
        columns: cols.iter().map(|&j| names[j].clone()).collect(),
        x_train: rows(&train),
        y_train: labels(&train),
        x_pool: rows(&sel.pool),
        x_test: rows(&sel.test),
        y_test: labels(&sel.test),
    })
}

fn build(cfg: &CcppConfig, names: &[String], data: &DMatrix<f64>) -> Result<(Scenario, Selection), CotrainError> {
    let v1 = view_columns(names, &cfg.view1, "view1", cfg.data)?;
    let v2 = view_columns(names, &cfg.view2, "view2", cfg.data)?;
    if let Some(j) = v1.iter().find(|j| v2.contains(j)) {
        return Err(DataError::ViewsOverlap { column: names[*j].clone() }.into());
    }
    let yj = names.iter().position(|n| n == cfg.data.response()).ok_or_else(|| DataError::MissingColumn {
        data: cfg.data.name().to_string(),
        column: cfg.data.response().to_string(),
    })?;
    let sel = select(cfg, names, data)?;
    let rows = |idx: &[usize], cols: &[usize]| DMatrix::from_fn(idx.len(), cols.len(), |a, b| data[(idx[a], cols[b])]);
    let labels = |idx: &[usize]| DVector::from_iterator(idx.len(), idx.iter().map(|&i| data[(i, yj)]));
    let y_test = labels(&sel.test);
    let party = |p: usize, cols: &[usize], view: &[String]| PartyData {
        name: format!("P{}", p + 1),
        columns: view.to_vec(),
        x_train: rows(&sel.train[p], cols),
        y_train: labels(&sel.train[p]),
        x_pool: rows(&sel.pool, cols),
        x_test: rows(&sel.test, cols),
        y_test: y_test.clone(),
    };
    let parties = vec![party(0, &v1, &cfg.view1), party(1, &v2, &cfg.view2)];
    let masking = format!("yes (k-means k = 2; P1 = low-{} cluster)", cfg.data.order_by());
    let description = format!(
        "{}, full-data standardisation: P1 view [{}], P2 view [{}], masking = {}, n_obs = {}, \
         pool = {}, test = {}, seed = {}",
        if cfg.data == RealData::Ccpp { "CCPP (Thomas §4.5)" } else { cfg.data.name() },
        cfg.view1.join(", "),
        cfg.view2.join(", "),
        if cfg.masking { masking.as_str() } else { "no" },
        cfg.n_obs,
        cfg.n_pool,
        cfg.n_test,
        cfg.seed
    );
    let scenario = Scenario { parties, description, pool_labels: Some(labels(&sel.pool)) };
    scenario.validate()?;
    Ok((scenario, sel))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data() -> (Vec<String>, DMatrix<f64>) {
        ccpp_standardised().unwrap()
    }

    #[test]
    fn any_number_of_views() {
        let v = |c: &[&str]| c.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let sc = ccpp_views(&[v(&["AT", "V"]), v(&["AP", "RH"]), v(&["V", "RH"])], 20, 100, 50, 3).unwrap();
        assert_eq!(sc.parties.len(), 3);
        assert_eq!(sc.parties[2].columns, ["V", "RH"]);
        // Same pool entities in every view: A's V column equals C's V column.
        assert_eq!(sc.parties[0].x_pool.column(1), sc.parties[2].x_pool.column(0));
        assert_eq!(sc.parties[1].x_test.column(1), sc.parties[2].x_test.column(1));
        assert_eq!(sc, ccpp_views(&[v(&["AT", "V"]), v(&["AP", "RH"]), v(&["V", "RH"])], 20, 100, 50, 3).unwrap());
        assert!(ccpp_views(&[v(&["AT", "XX"])], 20, 100, 50, 3).unwrap_err().to_string().contains("XX"));
        assert!(ccpp_views(&[v(&["AT"])], 9500, 100, 50, 3).is_err(), "9,650 rows > 9,568");
    }

    #[test]
    fn pooled_reference_holds_every_column_and_label() {
        let cfg = CcppConfig { n_obs: 30, seed: 4, ..CcppConfig::default() };
        let sc = ccpp(&cfg).unwrap();
        let pooled = ccpp_pooled(&cfg).unwrap();
        assert_eq!(pooled.columns, ["AT", "V", "AP", "RH"]);
        assert_eq!(pooled.x_train.nrows(), 60);
        assert_eq!(pooled.y_test, sc.parties[0].y_test);
        // P1's labelled rows are the first 30, with P1's columns first; P2's follow.
        assert_eq!(pooled.x_train.view((0, 0), (30, 2)), sc.parties[0].x_train.view((0, 0), (30, 2)));
        assert_eq!(pooled.x_train.view((30, 2), (30, 2)), sc.parties[1].x_train.view((0, 0), (30, 2)));
        assert_eq!(pooled.y_train.rows(30, 30), sc.parties[1].y_train.rows(0, 30));
    }

    #[test]
    fn raw_data_matches_readme() {
        let (names, x) = ccpp_raw().unwrap();
        assert_eq!(names, ["AT", "V", "AP", "RH", "PE"]);
        assert_eq!(x.shape(), (9568, 5));
        // First data row of the file.
        assert_eq!(x.row(0).iter().copied().collect::<Vec<_>>(), [8.34, 40.77, 1010.84, 90.01, 480.48]);
        let expected = [19.651, 54.306, 1013.259, 73.309, 454.365];
        for (j, e) in expected.iter().enumerate() {
            let m = x.column(j).mean();
            assert!((m - e).abs() < 1e-3, "mean of {}: {m} vs {e}", names[j]);
        }
    }

    #[test]
    fn csv_errors_are_reported() {
        assert!(parse_csv("", "data/ccpp.csv").is_err());
        assert!(parse_csv("A,B\n", "data/ccpp.csv").is_err());
        assert!(parse_csv("A,B\n1,2\n3\n", "data/ccpp.csv").unwrap_err().to_string().contains("line 3"));
        let e = parse_csv("A,B\n1,x\n", "data/ccpp.csv").unwrap_err().to_string();
        assert!(e.contains("data/ccpp.csv") && e.contains("\"B\"") && e.contains("cannot parse"), "{e}");
        let (n, x) = parse_csv("A,B\r\n1,2\r\n3,4\r\n", "data/ccpp.csv").unwrap();
        assert_eq!(n, ["A", "B"]);
        assert_eq!(x, DMatrix::from_row_slice(2, 2, &[1.0, 2.0, 3.0, 4.0]));
    }

    #[test]
    fn standardised_on_full_data() {
        let (_, x) = data();
        let n = x.nrows() as f64;
        for col in x.column_iter() {
            let m = col.mean();
            let sd = (col.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
            assert!(m.abs() < 1e-10, "mean {m}");
            assert!((sd - 1.0).abs() < 1e-10, "sd {sd}");
        }
        // AT and PE are strongly anti-correlated on the full data (about −0.95).
        let c = x.column(0).dot(&x.column(4)) / (n - 1.0);
        assert!((c + 0.948).abs() < 0.01, "corr(AT, PE) = {c}");
    }

    #[test]
    fn default_shapes_and_names() {
        for masking in [false, true] {
            let cfg = CcppConfig { masking, ..CcppConfig::default() };
            let s = ccpp(&cfg).unwrap();
            s.validate().unwrap();
            assert_eq!(s.parties.len(), 2);
            assert_eq!((s.parties[0].name.as_str(), s.parties[1].name.as_str()), ("P1", "P2"));
            assert_eq!(s.parties[0].columns, ["AT", "V"]);
            assert_eq!(s.parties[1].columns, ["AP", "RH"]);
            for p in &s.parties {
                assert_eq!(p.x_train.shape(), (25, 2));
                assert_eq!(p.y_train.len(), 25);
                assert_eq!(p.x_pool.shape(), (250, 2));
                assert_eq!(p.x_test.shape(), (250, 2));
                assert_eq!(p.y_test.len(), 250);
            }
        }
    }

    #[test]
    fn rows_are_shared_by_index_and_disjoint() {
        let (names, x) = data();
        for masking in [false, true] {
            let cfg = CcppConfig { masking, n_obs: 100, seed: 5, ..CcppConfig::default() };
            let (s, sel) = build(&cfg, &names, &x).unwrap();
            // P1's and P2's test views plus the label reassemble genuine standardised rows.
            for (a, &i) in sel.test.iter().enumerate() {
                let got = [
                    s.parties[0].x_test[(a, 0)],
                    s.parties[0].x_test[(a, 1)],
                    s.parties[1].x_test[(a, 0)],
                    s.parties[1].x_test[(a, 1)],
                    s.parties[0].y_test[a],
                ];
                assert_eq!(got.to_vec(), x.row(i).iter().copied().collect::<Vec<_>>());
            }
            for (a, &i) in sel.pool.iter().enumerate() {
                assert_eq!(s.parties[1].x_pool[(a, 1)], x[(i, 3)]);
            }
            for p in 0..2 {
                for (a, &i) in sel.train[p].iter().enumerate() {
                    assert_eq!(s.parties[p].y_train[a], x[(i, 4)]);
                }
            }
            let mut all: Vec<usize> =
                sel.test.iter().chain(&sel.pool).chain(&sel.train[0]).chain(&sel.train[1]).copied().collect();
            let len = all.len();
            all.sort_unstable();
            all.dedup();
            assert_eq!(all.len(), len, "test, pool and private rows must be disjoint");
            assert_eq!(len, 250 + 250 + 200);
        }
    }

    #[test]
    fn masking_puts_p1_in_the_low_at_cluster() {
        let (names, x) = data();
        let cfg = CcppConfig { n_obs: 200, seed: 9, ..CcppConfig::default() };
        let (_, sel) = build(&cfg, &names, &x).unwrap();
        let cluster = sel.cluster.as_ref().unwrap();
        assert!(sel.train[0].iter().all(|&i| cluster[i] == 0));
        assert!(sel.train[1].iter().all(|&i| cluster[i] == 1));
        let mean_at = |idx: &[usize]| idx.iter().map(|&i| x[(i, 0)]).sum::<f64>() / idx.len() as f64;
        let (c0, c1): (Vec<usize>, Vec<usize>) = (0..x.nrows()).partition(|&i| cluster[i] == 0);
        assert!(mean_at(&c0) < mean_at(&c1));
        assert!(mean_at(&sel.train[0]) < mean_at(&sel.train[1]));
        // The clusters are a real split, not a sliver.
        assert!(c0.len() > 1000 && c1.len() > 1000, "cluster sizes {} / {}", c0.len(), c1.len());
        // Test set and pool are unmasked: they contain rows of both clusters.
        for idx in [&sel.test, &sel.pool] {
            assert!(idx.iter().any(|&i| cluster[i] == 0) && idx.iter().any(|&i| cluster[i] == 1));
        }
        // Unmasked labelled rows straddle both clusters.
        let (_, un) = build(&CcppConfig { masking: false, ..cfg.clone() }, &names, &x).unwrap();
        assert!(un.cluster.is_none());
        assert!(un.train[0].iter().any(|&i| cluster[i] == 0) && un.train[0].iter().any(|&i| cluster[i] == 1));
        // The masked and unmasked scenarios share the test set and pool for the same seed.
        assert_eq!((&un.test, &un.pool), (&sel.test, &sel.pool));
    }

    #[test]
    fn kmeans_split_is_nearly_seed_independent() {
        let (_, x) = data();
        let cov = x.columns(0, 4).into_owned();
        let base = kmeans_clusters(&cov, 0, 0).unwrap();
        for seed in 1..6 {
            let c = kmeans_clusters(&cov, 0, seed).unwrap();
            let diff = c.iter().zip(&base).filter(|(a, b)| a != b).count();
            assert!(diff < 50, "seed {seed}: {diff} rows change cluster");
        }
    }

    #[test]
    fn masking_visible_in_the_scenario() {
        // With AT in view 1, P1's private AT values are clearly lower than the test set's.
        let s = ccpp(&CcppConfig { n_obs: 200, ..CcppConfig::default() }).unwrap();
        let p1 = &s.parties[0];
        assert!(p1.x_train.column(0).mean() < p1.x_test.column(0).mean() - 0.5);
        // Swapping the views still gives P1 the low-AT cluster.
        let cfg = CcppConfig {
            view1: vec!["RH".into()],
            view2: vec!["AT".into(), "V".into(), "AP".into()],
            n_obs: 200,
            ..CcppConfig::default()
        };
        let s = ccpp(&cfg).unwrap();
        assert_eq!(s.parties[0].dim(), 1);
        assert_eq!(s.parties[1].dim(), 3);
        assert!(s.parties[1].x_train.column(0).mean() > s.parties[1].x_test.column(0).mean() + 0.5);
    }

    #[test]
    fn deterministic_in_the_seed() {
        let cfg = CcppConfig { seed: 3, ..CcppConfig::default() };
        let a = ccpp(&cfg).unwrap();
        assert_eq!(a, ccpp(&cfg).unwrap());
        let b = ccpp(&CcppConfig { seed: 4, ..cfg.clone() }).unwrap();
        assert_ne!(a.parties[0].x_test, b.parties[0].x_test);
        assert_ne!(a.parties[0].x_train, b.parties[0].x_train);
        assert_ne!(a.parties[1].x_pool, b.parties[1].x_pool);
    }

    #[test]
    fn configuration_errors() {
        let base = CcppConfig::default();
        let err = |cfg: CcppConfig| ccpp(&cfg).unwrap_err().to_string();
        assert!(
            err(CcppConfig { view1: vec!["AT".into(), "TEMP".into()], ..base.clone() })
                .contains("unknown CCPP column \"TEMP\"")
        );
        assert!(err(CcppConfig { view2: vec!["AP".into(), "AT".into()], ..base.clone() }).contains("overlap"));
        assert!(err(CcppConfig { view2: vec!["PE".into()], ..base.clone() }).contains("response"));
        assert!(err(CcppConfig { view1: vec![], ..base.clone() }).contains("no columns"));
        assert!(err(CcppConfig { view1: vec!["AT".into(), "AT".into()], ..base.clone() }).contains("twice"));
        assert!(err(CcppConfig { n_obs: 0, ..base.clone() }).contains("at least 1"));
        assert!(err(CcppConfig { n_test: 0, ..base.clone() }).contains("at least 1"));
        assert!(
            err(CcppConfig { n_pool: 9000, n_test: 1000, ..base.clone() }).contains("n_test + n_pool: need 10000 rows")
        );
        assert!(err(CcppConfig { n_obs: 6000, ..base.clone() }).contains("cluster has only"));
        assert!(err(CcppConfig { n_obs: 4600, masking: false, ..base }).contains("after the test set and pool"));
    }

    /// The other shipped data sets: their files parse (checked row counts and columns), their
    /// default views are disjoint covariates, and masked and unmasked scenarios with 400
    /// labelled rows per party and the frontier's 250 pool and 250 test rows build, standardised
    /// and finite; where a masked cluster is too small (Wage with 500 + 500 shared rows) the
    /// error says so.
    #[test]
    fn the_other_real_data_sets_build_two_view_scenarios() {
        for (data, rows, cols) in [(RealData::Bikeshare, 8645, 9), (RealData::Wage, 3000, 9)] {
            let (names, x) = standardised(data).unwrap();
            assert_eq!((x.nrows(), names.len()), (rows, cols), "{data:?}");
            let (v1, v2) = data.views();
            assert!(v1.iter().all(|c| !v2.contains(c) && names.contains(c) && c != data.response()));
            assert!(v2.iter().all(|c| names.contains(c) && c != data.response()));
            for masking in [true, false] {
                let cfg = CcppConfig { masking, n_obs: 400, n_pool: 250, n_test: 250, seed: 3, ..CcppConfig::of(data) };
                let sc = ccpp(&cfg).unwrap();
                assert_eq!(sc.parties.len(), 2);
                for (p, view) in sc.parties.iter().zip([&v1, &v2]) {
                    assert_eq!(&p.columns, view);
                    assert_eq!((p.x_train.nrows(), p.x_pool.nrows(), p.x_test.nrows()), (400, 250, 250));
                    assert!(p.x_train.iter().chain(p.y_train.iter()).all(|v| v.is_finite()));
                }
                assert_eq!(sc, ccpp(&cfg).unwrap(), "deterministic in the seed");
                assert!(sc.description.starts_with(data.name()), "{}", sc.description);
            }
        }
        let big = CcppConfig { n_obs: 400, n_pool: 500, n_test: 500, seed: 3, ..CcppConfig::of(RealData::Wage) };
        assert!(ccpp(&big).unwrap_err().to_string().contains("cluster has only"));
        let e =
            ccpp(&CcppConfig { view1: vec!["AT".into()], ..CcppConfig::of(RealData::Wage) }).unwrap_err().to_string();
        assert!(e.contains("unknown wage column \"AT\"") && e.contains("education"), "{e}");
    }
}
