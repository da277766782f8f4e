//! The node and federation configuration files (`party.toml`, `federation.toml`): their
//! schema, validation with errors that name the file and field, and what they resolve to —
//! the [`Party`], its peers, its TLS identity and tokens, and its state directory.
//!
//! Security layout (`[security] dir`, shared by the nodes of a deployment, or one copy each):
//! `ca.pem` (the federation CA), `NAME.pem` + `NAME.key` (each party's and the orchestrator's
//! certificate, CN = NAME), `tokens/A-B.token` (the shared secret of the pair A, B — names in
//! sorted order) and `tokens/orchestrator-NAME.token` (what the orchestrator presents to NAME).

use crate::auth::ORCHESTRATOR;
use dpcotrain_cotrain::CotrainError;
use dpcotrain_cotrain::PartyData;
use dpcotrain_cotrain::Uncertainty;
use dpcotrain_cotrain::combiner::{AnswerForm, AnswerGuard, CombinerKind, LocalModel, RefitPolicy};
use dpcotrain_cotrain::driver::default_kernel;
use dpcotrain_cotrain::error::Conflict;
use dpcotrain_cotrain::readings::{BlockyTheta, Readings};
use dpcotrain_cotrain::release_model::LengthscaleUnit;
use dpcotrain_cotrain::settings::{AnswerDiscount, DEFAULT_ANSWER_DISCOUNT};
use dpcotrain_cotrain::table::{Table, TableError};
use dpcotrain_cotrain::{DpConfig, DpMode, Party, ReleasePolicy};
use dpcotrain_cotrain::{PublicTheta, QueryPolicy, ReleaseForm, ThetaPolicy};
use dpcotrain_privacy::CapRule;
use dpcotrain_privacy::LabelRange;
use dpcotrain_privacy::NoiseScale;
use dpcotrain_privacy::RankRule;
use dpcotrain_privacy::calibrate::{Mechanism, THESIS_MULTIPLIER};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Why a configuration was refused. Every variant names the file (or, for a name given on the
/// command line, the option) it is about.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    /// The TOML does not parse or does not fit the schema (unknown key, wrong type, …).
    #[error("{}: {}{}{message}", path.display(), position.map(|(l, c)| format!("line {l}, column {c}: ")).unwrap_or_default(),
        key.as_ref().map(|k| format!("{k}: ")).unwrap_or_default())]
    Syntax { path: PathBuf, position: Option<(usize, usize)>, key: Option<String>, message: String },
    /// A value the schema accepts but the node cannot use: the `key` it is set under (where
    /// one key is at fault) and the problem, typed.
    #[error("{}: {}", path.display(), keyed(*key, problem))]
    Setting { path: PathBuf, key: Option<&'static str>, problem: Box<SettingProblem> },
    /// A data file named by the config (the error names the file, line and column).
    #[error(transparent)]
    Data(#[from] TableError),
    /// The party could not be built from valid settings and data.
    #[error("{}: {source}", path.display())]
    Party { path: PathBuf, source: Box<CotrainError> },
    #[error(
        "{what} {name:?}: use 1-63 letters, digits, '-' or '_' (and not {ORCHESTRATOR:?} or \"ca\"): it names certificates and files"
    )]
    Name { what: String, name: String },
    #[error("cannot read token {} (nodes with `generate_dev = true` write it on first start; or make one with `dpcotrain certs`): {source}", path.display())]
    TokenRead { path: PathBuf, source: std::io::Error },
    #[error("{}: token shorter than {} characters", path.display(), crate::auth::MIN_TOKEN_LEN)]
    TokenShort { path: PathBuf },
    #[error("cannot write the configuration as TOML: {0}")]
    Serialize(#[from] toml::ser::Error),
}

/// Settings a party config gives that its privacy mode ignores: under `mode = "off"` every
/// `[privacy]` key but `mode` and `share_test_metrics` (the warning `node check` and
/// `node serve` print, so that a config switched off for a comparison does not look private).
pub(crate) fn ignored_privacy_settings(toml_text: &str) -> Vec<String> {
    let Ok(value) = toml_text.parse::<toml::Table>() else { return Vec::new() };
    let Some(privacy) = value.get("privacy").and_then(toml::Value::as_table) else { return Vec::new() };
    if privacy.get("mode").and_then(toml::Value::as_str) != Some("off") {
        return Vec::new();
    }
    privacy
        .keys()
        .filter(|k| !matches!(k.as_str(), "mode" | "share_test_metrics"))
        .map(|k| format!("privacy.{k}"))
        .collect()
}

/// [`ignored_privacy_settings`] of the file at `path` (empty if it cannot be read: loading it
/// reports that).
pub fn ignored_privacy_settings_at(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).map(|t| ignored_privacy_settings(&t)).unwrap_or_default()
}

/// Why a value of a config is refused (see [`ConfigError::Setting`]).
#[derive(Debug, thiserror::Error)]
pub enum SettingProblem {
    /// A number outside its domain: it must `bound`.
    #[error("must {bound}, got {value}")]
    Value { value: f64, bound: &'static str },
    /// Refused by the co-training layer that uses it (its typed error).
    #[error(transparent)]
    Cotrain(#[from] CotrainError),
    /// Refused by the privacy layer (its typed error).
    #[error(transparent)]
    Privacy(#[from] dpcotrain_privacy::PrivacyError),
    /// A target column the training file does not have.
    #[error("[data] target = {target:?}: {source}")]
    Target { target: String, source: TableError },
    /// A rule of the config file itself (keys that go together, a reading the wire protocol
    /// does not carry); the text names the keys and what to use instead.
    #[error("{0}")]
    Rule(&'static str),
    #[error("peer {name:?} is this party itself")]
    SelfPeer { name: String },
    #[error("peer {name} address {address:?} must start with {scheme}")]
    PeerScheme { name: String, address: String, scheme: &'static str },
    #[error("must be two finite numbers, low < high; got [{lo}, {hi}]")]
    Range { lo: f64, hi: f64 },
    #[error(
        "= {budget_epsilon} is below privacy.epsilon = {epsilon}, the cost of one release: every release would be refused"
    )]
    BelowOneRelease { budget_epsilon: f64, epsilon: f64 },
    #[error("must differ from listen (\"{ops}\"): the node's port speaks mutual TLS")]
    SameAsListen { ops: String },
    #[error("= true is only allowed on a loopback listen address, not \"{listen}\"")]
    NotLoopback { listen: String },
}

/// A setting's message: the key before a problem that reads after it ("privacy.delta must be
/// below 1"), or as a prefix to a layer's own message; a rule names its keys itself.
fn keyed(key: Option<&str>, problem: &SettingProblem) -> String {
    use SettingProblem as P;
    match (key, problem) {
        (
            Some(k),
            P::Value { .. }
            | P::Range { .. }
            | P::BelowOneRelease { .. }
            | P::SameAsListen { .. }
            | P::NotLoopback { .. },
        ) => {
            format!("{k} {problem}")
        }
        (Some(k), P::Cotrain(_) | P::Privacy(_)) => format!("{k}: {problem}"),
        _ => problem.to_string(),
    }
}

/// [`ConfigError::Setting`] of the file at `path`.
fn setting(path: &Path, key: Option<&'static str>, problem: impl Into<SettingProblem>) -> ConfigError {
    ConfigError::Setting { path: path.to_path_buf(), key, problem: Box::new(problem.into()) }
}

/// A rule of the config file broken, under `key`.
fn rule(path: &Path, key: &'static str, text: &'static str) -> ConfigError {
    setting(path, Some(key), SettingProblem::Rule(text))
}

/// A number under `key` outside its domain.
fn value(path: &Path, key: &'static str, value: f64, bound: &'static str) -> ConfigError {
    setting(path, Some(key), SettingProblem::Value { value, bound })
}

/// A party's node configuration (`party.toml`). Relative paths are relative to the file.
/// A `host:port` a node listens on (`listen`, `ops_listen`), checked when the config is read:
/// the host is non-empty and the port a number 0–65535. IPv6 hosts keep their brackets
/// (`[::1]:50051`). Written back as the same string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    pub host: String,
    pub port: u16,
}

impl HostPort {
    /// Whether the host is the loopback interface (where an insecure development node may listen).
    pub fn is_loopback(&self) -> bool {
        matches!(self.host.as_str(), "127.0.0.1" | "localhost" | "[::1]")
    }
}

impl std::fmt::Display for HostPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

impl std::str::FromStr for HostPort {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not host:port (e.g. \"127.0.0.1:50051\")");
        let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
        let port = port.parse::<u16>().map_err(|_| bad())?;
        if host.is_empty() || host.chars().any(char::is_whitespace) {
            return Err(bad());
        }
        Ok(HostPort { host: host.to_string(), port })
    }
}

impl Serialize for HostPort {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for HostPort {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

/// `listen`, with the key named in its error.
fn listen_key<'de, D: serde::Deserializer<'de>>(d: D) -> Result<HostPort, D::Error> {
    let s = String::deserialize(d)?;
    s.parse().map_err(|e| serde::de::Error::custom(format!("listen = {e}")))
}

/// `ops_listen`, with the key named in its error.
fn ops_listen_key<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<HostPort>, D::Error> {
    let s = String::deserialize(d)?;
    s.parse().map(Some).map_err(|e| serde::de::Error::custom(format!("ops_listen = {e}")))
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PartyConfig {
    pub name: String,
    pub federation_id: String,
    /// host:port to listen on.
    #[serde(deserialize_with = "listen_key")]
    pub listen: HostPort,
    /// host:port of the plaintext operations endpoint (`GET /metrics` in Prometheus text format
    /// and the gRPC health service), for probes and scrapers that cannot present the node's
    /// client certificate. Serves no private data. Omit it for no such endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "ops_listen_key")]
    pub ops_listen: Option<HostPort>,
    pub data: DataConfig,
    #[serde(default)]
    pub model: ModelConfig,
    #[serde(default)]
    pub privacy: PrivacyConfig,
    #[serde(default)]
    pub peers: Vec<PeerConfig>,
    /// Seed of simulation noise. Omit it in production: release noise then comes from the OS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Where the ledger, released answers and model history live (default `state/NAME` next
    /// to the config file). Keep it on persistent storage: it is what stops a restarted node
    /// from spending privacy again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_dir: Option<PathBuf>,
    /// TLS + tokens. Omitting it requires `insecure = true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security: Option<SecurityConfig>,
    /// Plaintext, unauthenticated (development on loopback only; refused on other addresses).
    #[serde(default)]
    pub insecure: bool,
}

/// `[security]`: mutual TLS and bearer tokens.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SecurityConfig {
    /// Folder with ca.pem, NAME.pem, NAME.key and tokens/ (see the module docs).
    pub dir: PathBuf,
    /// Create a throw-away CA, certificates and tokens there if they are missing (development:
    /// every node of the federation must see the same folder).
    #[serde(default)]
    pub generate_dev: bool,
    /// Host names / IPs the generated certificates are valid for.
    #[serde(default = "dev_hosts")]
    pub hosts: Vec<String>,
}

/// Host names the development certificates are valid for by default.
pub fn dev_hosts() -> Vec<String> {
    vec!["localhost".into(), "127.0.0.1".into()]
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DataConfig {
    /// Private labelled rows: this party's covariate columns plus the target column.
    pub train: PathBuf,
    /// This party's view of the shared pool (row j = pool index j); covariates only.
    pub pool: PathBuf,
    /// This party's view of the shared test entities, with the target (evaluation only).
    pub test: PathBuf,
    pub target: String,
    /// The public standardisation of y (docs/decisions.md D18) the labels are expressed in:
    /// y_std = (y − y_mean) / y_scale. Every party must declare the same (checked at the
    /// handshake). Default 0 and 1 (the files are already standardised).
    #[serde(default)]
    pub y_mean: f64,
    #[serde(default = "unit")]
    pub y_scale: f64,
}

fn unit() -> f64 {
    1.0
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    #[serde(default = "noisy")]
    pub combiner: CombinerKind,
    #[serde(default = "marginal")]
    pub uncertainty: Uncertainty,
    /// posterior | likelihood: how answers are read (default: likelihood under policy batches,
    /// posterior otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answers: Option<AnswerForm>,
    /// off | loo: set answers aside when they make the private rows' leave-one-out error
    /// worse (noisy combiner, exact local model; not with policy per-query).
    #[serde(default = "off")]
    pub guard: AnswerGuard,
    /// Where each re-fit after received answers starts: warm (default), warm+restart, every=K.
    #[serde(default = "warm")]
    pub refit: RefitPolicy,
    /// The GP fitted to the private view: auto (exact up to 3,000 private rows, VFE above),
    /// exact, vfe, or svgp (θ and Z by stochastic variational training; docs/decisions.md D26).
    #[serde(default = "auto_local")]
    pub local: LocalModel,
    /// Inducing inputs M of a sparse local model (default 300, at most the private rows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inducing: Option<usize>,
    /// `[model.readings]`: the readings of the protocol's ambiguous choices (docs/decisions.md
    /// D25); every key defaults to the project's reading.
    #[serde(default, skip_serializing_if = "Readings::is_default")]
    pub readings: Readings,
    /// What is added to every received answer's reported variance before it is folded in: an
    /// answer predicts the peer's E[y | its view], not ours, and this discounts it for that
    /// mismatch. A variance in the labels' public standardisation (`3.0`; `0.0` reads the
    /// answers as reported, the thesis's reading) or `"own:K"`, K times this party's own
    /// private-only fitted noise variance. Default `"own:30"`
    /// ([`dpcotrain_cotrain::settings::DEFAULT_ANSWER_DISCOUNT`], D30).
    #[serde(default = "default_answer_discount", skip_serializing_if = "is_default_answer_discount")]
    pub answer_extra_variance: AnswerDiscount,
}

fn default_answer_discount() -> AnswerDiscount {
    DEFAULT_ANSWER_DISCOUNT
}

fn is_default_answer_discount(v: &AnswerDiscount) -> bool {
    *v == DEFAULT_ANSWER_DISCOUNT
}

fn auto_local() -> LocalModel {
    LocalModel::Auto
}

fn warm() -> RefitPolicy {
    RefitPolicy::Warm
}

fn off() -> AnswerGuard {
    AnswerGuard::Off
}

fn noisy() -> CombinerKind {
    CombinerKind::Noisy
}
fn marginal() -> Uncertainty {
    Uncertainty::Marginal
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            combiner: noisy(),
            uncertainty: marginal(),
            answers: None,
            guard: off(),
            refit: warm(),
            local: auto_local(),
            inducing: None,
            readings: Readings::default(),
            answer_extra_variance: DEFAULT_ANSWER_DISCOUNT,
        }
    }
}

/// `[privacy] mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrivacyMode {
    /// Calibrated label DP (the analytic Gaussian mechanism).
    Calibrated,
    /// Thomas 2017's noise scale: no formal guarantee.
    Thesis,
    Off,
}

impl PrivacyMode {
    pub fn name(self) -> &'static str {
        match self {
            PrivacyMode::Calibrated => "calibrated",
            PrivacyMode::Thesis => "thesis",
            PrivacyMode::Off => "off",
        }
    }
}

dpcotrain_cotrain::named_enum!(PrivacyMode, "privacy.mode", [Calibrated, Thesis, Off]);

/// `[privacy] release`: the shape of a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseKind {
    /// At the asked points, with the exact hat-matrix sensitivity (and `cap`).
    Finite,
    /// The function-space release of Hall et al. (2013).
    Rkhs,
}

impl ReleaseKind {
    pub fn name(self) -> &'static str {
        match self {
            ReleaseKind::Finite => "finite",
            ReleaseKind::Rkhs => "rkhs",
        }
    }
}

dpcotrain_cotrain::named_enum!(ReleaseKind, "privacy.release", [Finite, Rkhs]);

/// `[privacy] theta`: where the release's hyperparameters come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThetaSource {
    Public,
    /// The DP vote over a public grid (`theta_epsilon`).
    Select,
    /// The node's label-fitted θ (leaks, uncounted).
    Fitted,
}

impl ThetaSource {
    pub fn name(self) -> &'static str {
        match self {
            ThetaSource::Public => "public",
            ThetaSource::Select => "select",
            ThetaSource::Fitted => "fitted",
        }
    }
}

dpcotrain_cotrain::named_enum!(ThetaSource, "privacy.theta", [Public, Select, Fitted]);

/// `[privacy] queries`: how a node chooses what to ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuerySource {
    /// Label-free greedy variance under the public θ.
    Public,
    /// Uncertainty sampling on the node's own model (the thesis).
    Adaptive,
}

impl QuerySource {
    pub fn name(self) -> &'static str {
        match self {
            QuerySource::Public => "public",
            QuerySource::Adaptive => "adaptive",
        }
    }
}

dpcotrain_cotrain::named_enum!(QuerySource, "privacy.queries", [Public, Adaptive]);

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PrivacyConfig {
    /// off | thesis | calibrated
    #[serde(default = "calibrated")]
    pub mode: PrivacyMode,
    #[serde(default = "one")]
    pub epsilon: f64,
    #[serde(default = "delta")]
    pub delta: f64,
    /// ε budget per requester (default: epsilon).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_epsilon: Option<f64>,
    #[serde(default = "range")]
    pub label_range: [f64; 2],
    /// batches | release-once | per-query (default: per-query in thesis mode, batches otherwise)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<ReleasePolicy>,
    /// finite | rkhs (default: finite under policy batches, rkhs otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<ReleaseKind>,
    /// Influence cap of the finite release: auto | auto=X,Y,… | none | eta=X.
    #[serde(default)]
    pub cap: Spelled<CapRule>,
    /// Rank of the finite release under policy batches: auto (default: the principal subspace
    /// of rank 3, 5 or 10, or the full release, by the label-free score) | auto=K,L,… | k=K |
    /// full. Release-once releases the whole pool at full rank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<Spelled<RankRule>>,
    /// public | select | fitted: where the release's hyperparameters come from (default: public
    /// under policy batches, fitted otherwise — fitted θ leaks through the variances, uncounted;
    /// select is a DP vote over a public grid around `public_theta`, charged `theta_epsilon`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub theta: Option<ThetaSource>,
    /// ε (at `delta`) of the θ vote under theta = "select", charged once to every requester's
    /// ledger; `budget_epsilon` must cover it and the releases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub theta_epsilon: Option<f64>,
    /// Public θ: [signal variance, length-scale, noise variance] on the standardised scale.
    #[serde(default = "public_theta")]
    pub public_theta: [f64; 3],
    /// median (default) | absolute: the unit of `public_theta`'s length-scale in the release
    /// model — a multiple of √(2D) for a view of D covariates, the root mean squared distance of
    /// standardised inputs, or as given (the default before 2026-11-28; docs/decisions.md D32).
    /// Public queries keep the length-scale as given.
    #[serde(default = "median_unit", skip_serializing_if = "is_median_unit")]
    pub public_lengthscale_unit: LengthscaleUnit,
    /// public | adaptive: how this node chooses what to ask (default: public under policy
    /// batches — label-free — adaptive otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queries: Option<QuerySource>,
    /// Pool indices asked per turn under public queries (one request, one release per peer).
    #[serde(default = "per_turn")]
    pub queries_per_turn: usize,
    /// Whether the orchestrator may see this node's label-dependent figures — its test RMSE
    /// alone and now, their paired SE, the RMSE per round, the answer guard's verdict, the
    /// predict-the-mean baseline and the count of labels its release clips — all computed on
    /// its private labels, and uncounted by the ledger. Off by default: the orchestrator then
    /// sees only label-free figures (rounds, model version, spend).
    #[serde(default)]
    pub share_test_metrics: bool,
}

fn calibrated() -> PrivacyMode {
    PrivacyMode::Calibrated
}
fn one() -> f64 {
    1.0
}
fn delta() -> f64 {
    1e-5
}
fn range() -> [f64; 2] {
    [-3.0, 3.0]
}
fn public_theta() -> [f64; 3] {
    [1.0, 1.0, 0.1]
}
fn median_unit() -> LengthscaleUnit {
    dpcotrain_cotrain::release_model::DEFAULT_RELEASE_THETA.unit
}
fn is_median_unit(u: &LengthscaleUnit) -> bool {
    *u == median_unit()
}
fn per_turn() -> usize {
    25
}

/// A privacy rule as `party.toml` spells it — the CLI's spelling (`CapRule`: `auto`,
/// `auto=X,Y,…`, `none`, `eta=X`; `RankRule`: `auto`, `auto=K,L,…`, `k=K`, `full`) — read into
/// its type when the file is read; a bad spelling is refused naming its key.
#[derive(Debug, Clone, PartialEq)]
pub struct Spelled<T>(pub T);

/// A type with one spelling per value and the `party.toml` key it is read from.
pub trait Spelling: std::str::FromStr<Err: std::fmt::Display> {
    const KEY: &'static str;
    fn spelling(&self) -> String;
}

impl Spelling for CapRule {
    const KEY: &'static str = "privacy.cap";
    fn spelling(&self) -> String {
        self.name()
    }
}

impl Spelling for RankRule {
    const KEY: &'static str = "privacy.rank";
    fn spelling(&self) -> String {
        self.name()
    }
}

impl Default for Spelled<CapRule> {
    fn default() -> Self {
        Spelled(CapRule::auto())
    }
}

impl<T: Spelling> Serialize for Spelled<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0.spelling())
    }
}

impl<'de, T: Spelling> Deserialize<'de> for Spelled<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map(Spelled).map_err(|e| serde::de::Error::custom(format!("{}: {e}", T::KEY)))
    }
}

impl Default for PrivacyConfig {
    fn default() -> Self {
        PrivacyConfig {
            mode: calibrated(),
            epsilon: 1.0,
            delta: 1e-5,
            budget_epsilon: None,
            label_range: range(),
            policy: None,
            release: None,
            cap: Spelled(CapRule::auto()),
            rank: None,
            theta: None,
            theta_epsilon: None,
            public_theta: public_theta(),
            public_lengthscale_unit: median_unit(),
            queries: None,
            queries_per_turn: per_turn(),
            share_test_metrics: false,
        }
    }
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PeerConfig {
    pub name: String,
    /// e.g. https://127.0.0.1:50052 (http:// only for insecure nodes)
    pub address: String,
}

/// The orchestrator's view (`federation.toml`).
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FederationConfig {
    pub federation_id: String,
    #[serde(default = "rounds")]
    pub rounds: u32,
    /// How long `run` waits for an unreachable node (retrying, and logging each retry) before it
    /// gives up with an error.
    #[serde(default = "wait_seconds")]
    pub wait_seconds: u64,
    pub nodes: Vec<PeerConfig>,
    /// The orchestrator's certificate (CN "orchestrator") and tokens; omit for insecure nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security: Option<SecurityConfig>,
}

fn rounds() -> u32 {
    25
}

fn wait_seconds() -> u64 {
    FederationConfig::DEFAULT_WAIT_SECONDS
}

impl FederationConfig {
    /// How long `run` waits for an unreachable node by default.
    pub const DEFAULT_WAIT_SECONDS: u64 = 120;
}

/// A config file's text: `header` as `#` comment lines, then `value` serialised as TOML (every
/// setting written out, defaults included, so the file shows what the node will do).
pub fn to_toml<T: Serialize>(header: &str, value: &T) -> Result<String, ConfigError> {
    let mut text: String = header.lines().map(|l| format!("# {l}\n")).collect();
    text += &toml::to_string(value)?;
    Ok(text)
}

/// Read and parse a TOML config; errors name the file, and the line and column of a syntax or
/// schema error (`party.toml: line 3, column 12: invalid string`).
pub fn load<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, ConfigError> {
    let text =
        std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
    toml::from_str(&text).map_err(|e| {
        let message = e.message().lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ");
        let position = e.span().map(|span| {
            let before = &text[..span.start.min(text.len())];
            (before.matches('\n').count() + 1, before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1)
        });
        let key = e.span().and_then(|span| key_at(&text, span.start));
        ConfigError::Syntax { path: path.to_path_buf(), position, key, message }
    })
}

/// The dotted key whose value starts at byte `at` (`privacy.epsilon` for the `"x"` of
/// `epsilon = "x"` under `[privacy]`), when `at` lies after a `key =` on its own line: the
/// name a wrong-type error needs besides its line and column.
fn key_at(text: &str, at: usize) -> Option<String> {
    let at = at.min(text.len());
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let (key, _) = text[line_start..at].split_once('=')?;
    let key = key.trim().replace(['"', '\''], "");
    let bare = |k: &str| !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c));
    if !bare(&key) {
        return None;
    }
    let table = text[..line_start]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('['))
        .map(|h| h.trim_start_matches('[').split(']').next().unwrap_or("").trim().replace(['"', '\''], ""));
    Some(match table {
        Some(t) if !t.is_empty() => format!("{t}.{key}"),
        _ => key,
    })
}

pub fn rel(base: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() { p.to_path_buf() } else { base.parent().unwrap_or(Path::new(".")).join(p) }
}

/// What a party config's `[model]` and `[privacy]` strings resolve to. Parsed before any file
/// is read, so `node check --offline` and `node serve` refuse the same typos.
pub struct NodeSettings {
    pub kind: CombinerKind,
    pub uncertainty: Uncertainty,
    pub dp: DpConfig,
    pub answers: AnswerForm,
    pub guard: AnswerGuard,
}

/// A party's private view: train, pool and test files, columns matched by name.
pub fn data_from_config(cfg: &PartyConfig, path: &Path) -> Result<PartyData, ConfigError> {
    let train = Table::read(&rel(path, &cfg.data.train))?;
    train.require_rows(2, "training data")?;
    // A target the file does not have is the config's mistake: name its key as well as the file.
    let target_key = |e: TableError| match e {
        e @ (TableError::UnknownTarget { .. } | TableError::TargetIndexOutOfRange { .. }) => {
            setting(path, Some("data.target"), SettingProblem::Target { target: cfg.data.target.clone(), source: e })
        }
        e => e.into(),
    };
    let (x_train, y_train, columns, _) = train.split_target(Some(&cfg.data.target)).map_err(target_key)?;
    let pool = Table::read(&rel(path, &cfg.data.pool))?;
    let x_pool = pool.select_columns(&columns, "pool view", "the training inputs")?;
    let test = Table::read(&rel(path, &cfg.data.test))?;
    let (x_test, y_test) = test.split_target_named(&cfg.data.target, &columns, "test view", "the training inputs")?;
    Ok(PartyData { name: cfg.name.clone(), columns, x_train, y_train, x_pool, x_test, y_test })
}

/// The party a config describes: its data, its settings, and its local GP fitted.
pub fn party_from_config(cfg: &PartyConfig, path: &Path) -> Result<Party, ConfigError> {
    let NodeSettings { kind, uncertainty, dp, answers, guard } = settings_from_config(cfg, path)?;
    let data = data_from_config(cfg, path)?;
    let (k, noise) = default_kernel(&data);
    let readings = cfg.model.readings;
    if readings.blocky_theta == BlockyTheta::Querier {
        return Err(rule(
            path,
            "model.readings.blocky_theta",
            "model.readings.blocky_theta = \"querier\" needs the querier's θ with every request, which the wire protocol does not carry (in-process experiments only); use \"responder\"",
        ));
    }
    let (local, inducing) = (cfg.model.local, cfg.model.inducing);
    if let Some(m) = inducing {
        if local == LocalModel::Exact {
            return Err(rule(
                path,
                "model.inducing",
                "model.inducing applies to sparse local models (vfe, svgp, or auto above 3,000 rows), not to local = \"exact\"",
            ));
        }
        if m == 0 {
            return Err(value(path, "model.inducing", 0.0, "be at least 1"));
        }
    }
    let mut party = Party::with_local_model(data, kind, uncertainty, k, noise, dp, cfg.seed, readings, local, inducing)
        .map_err(|source| ConfigError::Party { path: path.to_path_buf(), source: Box::new(source) })?;
    party.set_answer_form(answers).map_err(|e| setting(path, Some("model.answers"), e))?;
    party.set_guard(guard).map_err(|e| setting(path, Some("model.guard"), e))?;
    party.set_refit_policy(cfg.model.refit);
    party
        .set_answer_discount(cfg.model.answer_extra_variance)
        .map_err(|e| setting(path, Some("model.answer_extra_variance"), e))?;
    Ok(party)
}

/// Parse and cross-check the config's `[model]` and `[privacy]` strings (no file is read).
pub fn settings_from_config(cfg: &PartyConfig, path: &Path) -> Result<NodeSettings, ConfigError> {
    let (kind, unc) = (cfg.model.combiner, cfg.model.uncertainty);
    let pv = &cfg.privacy;
    let default_policy = if pv.mode == PrivacyMode::Thesis { ReleasePolicy::PerQuery } else { ReleasePolicy::Batches };
    let policy = pv.policy.unwrap_or(default_policy);
    let honest = policy == ReleasePolicy::Batches;
    let cap = pv.cap.0.clone();
    let rank = pv.rank.as_ref().map_or(if honest { RankRule::auto() } else { RankRule::Full }, |r| r.0.clone());
    let release = match pv.release.unwrap_or(if honest { ReleaseKind::Finite } else { ReleaseKind::Rkhs }) {
        ReleaseKind::Finite => ReleaseForm::Finite { cap, rank },
        ReleaseKind::Rkhs => ReleaseForm::Rkhs,
    };
    let [signal_variance, lengthscale, noise_variance] = pv.public_theta;
    let public = PublicTheta { signal_variance, lengthscale, noise_variance, unit: pv.public_lengthscale_unit };
    public.validate().map_err(|e| setting(path, Some("privacy.public_theta"), e))?;
    let theta = match pv.theta.unwrap_or(if honest { ThetaSource::Public } else { ThetaSource::Fitted }) {
        ThetaSource::Public => ThetaPolicy::Public(public),
        ThetaSource::Fitted => ThetaPolicy::Fitted,
        ThetaSource::Select => {
            let mu = match (pv.mode, pv.theta_epsilon) {
                (_, Some(e)) if e.is_finite() && e > 0.0 && pv.delta > 0.0 && pv.delta < 1.0 => {
                    NoiseScale::mu_for(e, pv.delta).map_err(|err| setting(path, Some("privacy.theta_epsilon"), err))?
                }
                (_, Some(e)) => {
                    return Err(value(path, "privacy.theta_epsilon", e, "be a positive number"));
                }
                (PrivacyMode::Calibrated, None) => {
                    return Err(rule(
                        path,
                        "privacy.theta_epsilon",
                        "privacy.theta = \"select\" needs privacy.theta_epsilon (the ε of the θ vote, charged to every requester)",
                    ));
                }
                // DP off: the vote is exact and μ unused.
                _ => 1.0,
            };
            ThetaPolicy::Selected { default: public, mu }
        }
    };
    if pv.theta_epsilon.is_some() && !matches!(theta, ThetaPolicy::Selected { .. }) {
        return Err(rule(
            path,
            "privacy.theta_epsilon",
            "privacy.theta_epsilon is set but privacy.theta is not \"select\"",
        ));
    }
    let queries = match pv.queries.unwrap_or(if honest { QuerySource::Public } else { QuerySource::Adaptive }) {
        QuerySource::Public => {
            if pv.queries_per_turn == 0 {
                return Err(value(path, "privacy.queries_per_turn", 0.0, "be at least 1"));
            }
            // The length-scale unit is the release model's: queries keep the length-scale as
            // given (what the frontier measured, docs/decisions.md D32).
            QueryPolicy::Public {
                per_turn: pv.queries_per_turn,
                theta: PublicTheta { unit: LengthscaleUnit::Absolute, ..public },
            }
        }
        QuerySource::Adaptive => QueryPolicy::Adaptive,
    };
    let likelihood_ok = kind == CombinerKind::Noisy && unc == Uncertainty::Marginal;
    if cfg.model.answers == Some(AnswerForm::Functionals) {
        return Err(rule(
            path,
            "model.answers",
            "model.answers = \"functionals\" is an in-process reading (experiment frontier --answers functionals): the wire protocol does not carry the release likelihood it needs; use likelihood",
        ));
    }
    let answers = cfg.model.answers.unwrap_or(if honest && likelihood_ok {
        AnswerForm::Likelihood
    } else {
        AnswerForm::Posterior
    });
    dpcotrain_privacy::calibrate::check_epsilon(pv.epsilon).map_err(|e| setting(path, Some("privacy.epsilon"), e))?;
    dpcotrain_privacy::calibrate::check_delta(pv.delta).map_err(|e| setting(path, Some("privacy.delta"), e))?;
    let mode = match pv.mode {
        PrivacyMode::Off => DpMode::Off,
        PrivacyMode::Thesis => DpMode::Thesis { multiplier: THESIS_MULTIPLIER },
        PrivacyMode::Calibrated => DpMode::Calibrated {
            epsilon: pv.epsilon,
            delta: pv.delta,
            mechanism: Mechanism::Analytic,
            range: LabelRange::new(pv.label_range[0], pv.label_range[1])
                .map_err(|e| setting(path, Some("privacy.label_range"), e))?,
            budget_epsilon: pv.budget_epsilon.unwrap_or(pv.epsilon),
        },
    };
    if let DpMode::Calibrated { epsilon, budget_epsilon, .. } = mode
        && budget_epsilon < epsilon
    {
        return Err(setting(
            path,
            Some("privacy.budget_epsilon"),
            SettingProblem::BelowOneRelease { budget_epsilon, epsilon },
        ));
    }
    let dp = DpConfig { mode, policy, inflate_variance: true, release, theta, queries };
    dp.validate().map_err(|e| setting(path, None, e))?;
    dp.check_combiner(kind, unc).map_err(|e| setting(path, Some("[model]"), e))?;
    answers.check(kind, unc).map_err(|e| setting(path, Some("model.answers"), e))?;
    let guard = cfg.model.guard;
    if guard != AnswerGuard::Off && kind != CombinerKind::Noisy {
        let e = CotrainError::from(Conflict::GuardNeedsNoisy { combiner: kind.name() });
        return Err(setting(path, Some("model.guard"), e));
    }
    dp.check_guard(guard).map_err(|e| setting(path, Some("model.guard"), e))?;
    Ok(NodeSettings { kind, uncertainty: unc, dp, answers, guard })
}

/// Party names become certificate names and file names: letters, digits, '-' and '_'.
pub fn check_name(name: &str, what: &str) -> Result<(), ConfigError> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && name != ORCHESTRATOR
        && name != "ca";
    if !ok {
        return Err(ConfigError::Name { what: what.to_string(), name: name.to_string() });
    }
    Ok(())
}

/// File name of the token shared by `a` and `b`.
pub fn pair_token(dir: &Path, a: &str, b: &str) -> PathBuf {
    let (x, y) = if a <= b { (a, b) } else { (b, a) };
    dir.join("tokens").join(format!("{x}-{y}.token"))
}

/// File name of the token the orchestrator presents to `node`.
pub fn orchestrator_token(dir: &Path, node: &str) -> PathBuf {
    dir.join("tokens").join(format!("{ORCHESTRATOR}-{node}.token"))
}

/// A token file's secret (trimmed); refused when shorter than the minimum length.
pub(crate) fn read_token(path: &Path) -> Result<String, ConfigError> {
    let t =
        std::fs::read_to_string(path).map_err(|source| ConfigError::TokenRead { path: path.to_path_buf(), source })?;
    let t = t.trim().to_string();
    if t.len() < crate::auth::MIN_TOKEN_LEN {
        return Err(ConfigError::TokenShort { path: path.to_path_buf() });
    }
    Ok(t)
}

impl PartyConfig {
    /// Structural checks that need no files: names, addresses, security mode.
    pub fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        let f = path.display();
        check_name(&self.name, &format!("{f}: name"))?;
        if let Some(ops) = &self.ops_listen
            && *ops == self.listen
        {
            return Err(setting(path, Some("ops_listen"), SettingProblem::SameAsListen { ops: ops.to_string() }));
        }
        for p in &self.peers {
            check_name(&p.name, &format!("{f}: peers.name"))?;
            if p.name == self.name {
                return Err(setting(path, Some("peers.name"), SettingProblem::SelfPeer { name: p.name.clone() }));
            }
            let scheme_ok =
                if self.insecure { p.address.starts_with("http://") } else { p.address.starts_with("https://") };
            if !scheme_ok {
                return Err(setting(
                    path,
                    Some("peers.address"),
                    SettingProblem::PeerScheme {
                        name: p.name.clone(),
                        address: p.address.clone(),
                        scheme: if self.insecure { "http:// (insecure = true)" } else { "https:// (TLS)" },
                    },
                ));
            }
        }
        let mut names: Vec<&str> = self.peers.iter().map(|p| p.name.as_str()).collect();
        names.sort();
        if names.windows(2).any(|w| w[0] == w[1]) {
            return Err(rule(path, "peers.name", "a peer is listed twice"));
        }
        let pv = &self.privacy;
        for (key, v) in [
            ("privacy.epsilon", Some(pv.epsilon)),
            ("privacy.delta", Some(pv.delta)),
            ("privacy.budget_epsilon", pv.budget_epsilon),
        ] {
            if let Some(v) = v
                && !(v.is_finite() && v > 0.0)
            {
                return Err(value(path, key, v, "be a positive number"));
            }
        }
        if pv.delta >= 1.0 {
            return Err(value(path, "privacy.delta", pv.delta, "be below 1"));
        }
        let [lo, hi] = pv.label_range;
        if !(lo.is_finite() && hi.is_finite() && lo < hi) {
            return Err(setting(path, Some("privacy.label_range"), SettingProblem::Range { lo, hi }));
        }
        if !self.data.y_scale.is_finite() || self.data.y_scale <= 0.0 || !self.data.y_mean.is_finite() {
            return Err(rule(path, "data.y_scale", "data.y_scale must be positive and data.y_mean finite"));
        }
        match (&self.security, self.insecure) {
            (Some(_), true) => {
                return Err(rule(path, "security", "set either [security] or insecure = true, not both"));
            }
            (None, false) => {
                return Err(rule(
                    path,
                    "security",
                    "no [security] section: add one (TLS + tokens; `generate_dev = true` makes throw-away secrets) or set insecure = true for a loopback-only development node",
                ));
            }
            (None, true) => {
                if !self.listen.is_loopback() {
                    return Err(setting(
                        path,
                        Some("insecure"),
                        SettingProblem::NotLoopback { listen: self.listen.to_string() },
                    ));
                }
            }
            (Some(_), false) => {}
        }
        Ok(())
    }

    /// Every principal this node's secrets folder must hold (itself, its peers, the orchestrator).
    pub fn principals(&self) -> Vec<String> {
        let mut v = vec![self.name.clone()];
        v.extend(self.peers.iter().map(|p| p.name.clone()));
        v.push(ORCHESTRATOR.into());
        v
    }

    pub fn state_dir(&self, path: &Path) -> PathBuf {
        match &self.state_dir {
            Some(d) => rel(path, d),
            None => rel(path, &Path::new("state").join(&self.name)),
        }
    }
}

#[cfg(test)]
mod readings_tests {
    use super::*;
    use dpcotrain_cotrain::readings::HybridForm;

    #[test]
    fn model_readings_parse_default_and_refuse_what_a_node_cannot_do() {
        let m: ModelConfig = toml::from_str("combiner = \"hybrid\"\n[readings]\nhybrid = \"yu\"\n").unwrap();
        assert_eq!(m.readings, Readings { hybrid: HybridForm::Yu, ..Readings::default() });
        let m: ModelConfig = toml::from_str("combiner = \"noisy\"\n").unwrap();
        assert!(m.readings.is_default());
        assert!(!toml::to_string(&m).unwrap().contains("readings"), "default readings are not written");
        let err = toml::from_str::<ModelConfig>("[readings]\nhybird = \"yu\"\n").unwrap_err().to_string();
        assert!(err.contains("hybird"), "{err}");
        // A node cannot evaluate the querier's θ: refused, naming the key.
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/two-party/party-a.toml");
        let mut cfg: PartyConfig = load(&path).unwrap();
        cfg.model.readings.blocky_theta = BlockyTheta::Querier;
        let err = party_from_config(&cfg, &path).unwrap_err().to_string();
        assert!(err.contains("model.readings.blocky_theta"), "{err}");
    }

    #[test]
    fn listen_addresses_are_typed_when_read() {
        let a: HostPort = "127.0.0.1:50051".parse().unwrap();
        assert_eq!((a.host.as_str(), a.port, a.is_loopback()), ("127.0.0.1", 50051, true));
        let v6: HostPort = "[::1]:9090".parse().unwrap();
        assert_eq!((v6.host.as_str(), v6.port, v6.is_loopback()), ("[::1]", 9090, true));
        assert!(!"0.0.0.0:1".parse::<HostPort>().unwrap().is_loopback());
        for bad in ["0.0.0.0", ":50051", "host:70000", "host:port", "127.0.0.1 50051", ""] {
            let e = bad.parse::<HostPort>().unwrap_err();
            assert!(e.contains("is not host:port"), "{bad}: {e}");
        }
        // Read and written as the same string; an error names the key.
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/two-party/party-a.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let cfg: PartyConfig = toml::from_str(&text).unwrap();
        assert_eq!(cfg.listen.to_string(), "127.0.0.1:50051");
        assert!(toml::to_string(&cfg).unwrap().contains("listen = \"127.0.0.1:50051\""));
        let e = toml::from_str::<PartyConfig>(&text.replace("\nlisten = ", "\nops_listen = \"x\"\nlisten = "))
            .unwrap_err()
            .to_string();
        assert!(e.contains("ops_listen = \"x\" is not host:port"), "{e}");
    }

    #[test]
    fn answer_extra_variance_reaches_the_model_and_bad_values_are_refused() {
        // D30: a node discounts answers by 30 × its own σ² unless its config says otherwise.
        let m: ModelConfig = toml::from_str("combiner = \"noisy\"\n").unwrap();
        assert_eq!(m.answer_extra_variance, AnswerDiscount::OwnNoise(30.0));
        assert!(!toml::to_string(&m).unwrap().contains("answer_extra_variance"), "the default is not written");
        let m: ModelConfig = toml::from_str("answer_extra_variance = 0.0\n").unwrap();
        assert_eq!(m.answer_extra_variance, AnswerDiscount::Fixed(0.0));
        assert!(toml::to_string(&m).unwrap().contains("answer_extra_variance = 0.0"), "a non-default is written");
        let m: ModelConfig = toml::from_str("answer_extra_variance = \"own:3\"\n").unwrap();
        assert_eq!(m.answer_extra_variance, AnswerDiscount::OwnNoise(3.0));
        assert!(toml::to_string(&m).unwrap().contains("answer_extra_variance = \"own:3\""));
        for text in [
            "answer_extra_variance = -1.0\n",
            "answer_extra_variance = \"own:-2\"\n",
            "answer_extra_variance = \"lots\"\n",
        ] {
            let e = toml::from_str::<ModelConfig>(text).unwrap_err().to_string();
            assert!(e.contains("own:K"), "{text}: {e}");
        }
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/two-party/party-a.toml");
        let mut cfg: PartyConfig = load(&path).unwrap();
        let party = party_from_config(&cfg, &path).unwrap();
        let own = party.model().private_noise_variance();
        assert!(own > 0.0 && own < 1.0, "{own}");
        assert_eq!(party.model().answer_extra_var(), 30.0 * own, "the default reaches the model as 30 σ²");
        cfg.model.answer_extra_variance = AnswerDiscount::Fixed(0.5);
        assert_eq!(party_from_config(&cfg, &path).unwrap().model().answer_extra_var(), 0.5);
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            cfg.model.answer_extra_variance = AnswerDiscount::Fixed(bad);
            let err = party_from_config(&cfg, &path).unwrap_err().to_string();
            assert!(err.contains("model.answer_extra_variance") && err.contains("party-a.toml"), "{err}");
        }
    }

    #[test]
    fn the_public_length_scale_unit_reaches_the_release_model_only() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/two-party/party-a.toml");
        let mut cfg: PartyConfig = load(&path).unwrap();
        assert_eq!(cfg.privacy.public_lengthscale_unit, LengthscaleUnit::Median, "D32: the default");
        assert!(!toml::to_string(&cfg).unwrap().contains("public_lengthscale_unit"), "the default is not written");
        let party = party_from_config(&cfg, &path).unwrap();
        let dp = party.dp();
        let ThetaPolicy::Public(t) = dp.theta else { panic!("public θ under batches: {:?}", dp.theta) };
        assert_eq!(t.unit, LengthscaleUnit::Median);
        let QueryPolicy::Public { theta: q, .. } = dp.queries else { panic!("public queries: {:?}", dp.queries) };
        assert_eq!(q.unit, LengthscaleUnit::Absolute, "queries keep the length-scale as given");
        cfg.privacy.public_lengthscale_unit = LengthscaleUnit::Absolute;
        let text = toml::to_string(&cfg).unwrap();
        assert!(text.contains("public_lengthscale_unit = \"absolute\""), "a non-default is written: {text}");
        let ThetaPolicy::Public(t) = party_from_config(&cfg, &path).unwrap().dp().theta else { panic!() };
        assert_eq!(t.unit, LengthscaleUnit::Absolute);
        let e = toml::from_str::<PrivacyConfig>("public_lengthscale_unit = \"metres\"\n").unwrap_err().to_string();
        assert!(e.contains("metres") && e.contains("median"), "{e}");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn privacy_settings_that_mode_off_ignores_are_named() {
        let off = "name = \"A\"\n[privacy]\nmode = \"off\"\nepsilon = 1.0\nshare_test_metrics = true\nlabel_range = [-3.0, 3.0]\n";
        assert_eq!(super::ignored_privacy_settings(off), vec!["privacy.epsilon", "privacy.label_range"]);
        assert!(super::ignored_privacy_settings(&off.replace("\"off\"", "\"calibrated\"")).is_empty());
        assert!(super::ignored_privacy_settings("[privacy]\nmode = \"off\"\n").is_empty());
    }

    #[test]
    fn cap_and_rank_are_read_as_their_rules_and_written_as_spelled() {
        use super::{CapRule, PrivacyConfig, RankRule, Spelled};
        let p: PrivacyConfig = toml::from_str("cap = \"auto=1,0.5\"\nrank = \"k=5\"\n").unwrap();
        assert_eq!(p.cap, Spelled(CapRule::Auto { etas: vec![1.0, 0.5] }));
        assert_eq!(p.rank, Some(Spelled(RankRule::Fixed { k: 5 })));
        let text = toml::to_string(&p).unwrap();
        assert!(text.contains("cap = \"auto=1,0.5\"") && text.contains("rank = \"k=5\""), "{text}");
        let again = toml::from_str::<PrivacyConfig>(&text).unwrap();
        assert_eq!((again.cap, again.rank), (p.cap, p.rank));
        // Absent: the automatic cap, and the rank chosen later from the policy.
        let d: PrivacyConfig = toml::from_str("").unwrap();
        assert_eq!((d.cap, d.rank), (Spelled(CapRule::auto()), None));
        for (text, key) in [("cap = \"eta=-1\"", "privacy.cap"), ("rank = \"k=0\"", "privacy.rank")] {
            let e = toml::from_str::<PrivacyConfig>(text).unwrap_err().to_string();
            assert!(e.contains(key) && e.contains("line 1"), "{e}");
        }
    }
}
