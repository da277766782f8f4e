//! The co-training layer's errors, typed by whose fault they are (this party's own, the
//! caller's request, a peer's) and by what a caller acts on: the setting and its bound, the data
//! file and column, the saved state's inconsistency, the peer's status code.

use serde::{Deserialize, Serialize};

/// Errors of the co-training layer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CotrainError {
    /// This party's own fault: a setting or data file it cannot use, a saved state it refuses,
    /// or an invariant of its code broken. Its operator's to fix, never the caller's (that is
    /// [`CotrainError::Request`]); a node maps it to gRPC `INTERNAL` by this type.
    #[error(transparent)]
    Own(#[from] OwnError),
    /// What a peer's request got wrong: the caller can fix it, and asking again unchanged will
    /// not help.
    #[error("invalid request: {0}")]
    Request(#[from] RequestError),
    #[error(transparent)]
    Gp(#[from] dpcotrain_gp::GpError),
    /// The requester's privacy budget would be exceeded: refused before anything was released
    /// (a node maps it to `RESOURCE_EXHAUSTED`). Every `PrivacyError::BudgetExceeded` arrives here.
    #[error(transparent)]
    Budget(dpcotrain_privacy::BudgetExceeded),
    /// Any other error of the privacy layer: this party's privacy parameters or numerics, its own.
    #[error(transparent)]
    Privacy(dpcotrain_privacy::PrivacyError),
    /// A peer refused the request for good, or answered what this party cannot use.
    #[error("peer {peer}: {fault}")]
    Peer { peer: String, fault: PeerFault },
    /// The request never reached an answer: the peer was unreachable, timed out, or refused
    /// the handshake (another federation, another pool). Unlike a refusal of the request
    /// itself (e.g. its budget), retrying later may succeed.
    #[error("peer {peer} not reached: {fault}")]
    Unreached { peer: String, fault: PeerFault },
    /// A querier turn in which at least one peer was not reached (or withheld its answer for a
    /// reason that is not final): nothing was recorded, so the same round can be run again.
    #[error("round {round}: {querier}'s turn did not happen (nothing recorded): {}", joined(.reasons))]
    TurnNotTaken { round: usize, querier: String, reasons: Vec<Refusal> },
}

impl CotrainError {
    /// The code a peer's refusal of this kind carries ([`RemoteCode`]): the same for an error
    /// raised in this process (an in-process peer) as for one that came back over the wire.
    pub fn code(&self) -> RemoteCode {
        match self {
            CotrainError::Budget(_) => RemoteCode::BudgetExhausted,
            CotrainError::Request(_) => RemoteCode::InvalidRequest,
            CotrainError::Own(_) | CotrainError::Privacy(_) | CotrainError::Gp(_) => RemoteCode::Internal,
            CotrainError::Peer { fault, .. } | CotrainError::Unreached { fault, .. } => fault.code(),
            CotrainError::TurnNotTaken { .. } => RemoteCode::TurnNotTaken,
        }
    }
}

/// What a refusal or a failed call says, by kind: a node's gRPC status code read into this
/// layer's terms (the federation maps one to the other), or a reason this party has itself.
/// Saved in the state's turn records, so every spelling stays readable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RemoteCode {
    /// Not asked: this party's budget at the peer is spent.
    NotAsked,
    /// The peer refused before releasing anything: the requester's budget would be exceeded.
    BudgetExhausted,
    /// The peer found the request invalid; asking again unchanged will not help.
    InvalidRequest,
    /// The peer's own fault (its settings, a failed save): the exchange is still owed.
    Internal,
    /// The peer's ledger is behind a receipt this party holds (its state was rolled back).
    DataLoss,
    /// The peer could not be reached or did not answer in time.
    Unavailable,
    /// The peer does not know this party (it restarted, or the handshake was not made).
    NotHandshaken,
    /// The peer did not accept this party's credentials.
    Unauthenticated,
    /// The peer answered, but with something this party cannot use.
    MalformedAnswer,
    /// A turn that did not happen because a peer was not reached.
    TurnNotTaken,
    /// Any other status a peer's node returned (its numeric gRPC code).
    Other(i32),
    /// A refusal saved by an earlier version, as text only.
    Recorded,
}

impl std::fmt::Display for RemoteCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RemoteCode::NotAsked => f.write_str("not asked"),
            RemoteCode::BudgetExhausted => f.write_str("budget exhausted"),
            RemoteCode::InvalidRequest => f.write_str("invalid request"),
            RemoteCode::Internal => f.write_str("internal"),
            RemoteCode::DataLoss => f.write_str("data loss"),
            RemoteCode::Unavailable => f.write_str("unavailable"),
            RemoteCode::NotHandshaken => f.write_str("not handshaken"),
            RemoteCode::Unauthenticated => f.write_str("unauthenticated"),
            RemoteCode::MalformedAnswer => f.write_str("malformed answer"),
            RemoteCode::TurnNotTaken => f.write_str("turn not taken"),
            RemoteCode::Other(c) => write!(f, "status {c}"),
            RemoteCode::Recorded => f.write_str("recorded"),
        }
    }
}

/// What went wrong with a peer: the status its node returned, a failed handshake, or an answer
/// this party cannot use.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PeerFault {
    /// The peer's node ended the call with a status: its code, and its message verbatim (the
    /// peer's own words, shown to an operator, never parsed).
    #[error("{code}: {message}")]
    Status { code: RemoteCode, message: String },
    /// The peer's node refused the handshake, for the reason it gave.
    #[error("refused the handshake: {reason}")]
    HandshakeRefused { reason: String },
    /// The node at `address` is another party than the one configured there.
    #[error("the node at {address} is party {party:?}, not {expected:?}")]
    WrongParty { address: String, party: String, expected: String },
    /// The peer's address or TLS settings cannot make a channel: `what` failed ("bad address",
    /// "TLS settings"), `detail` is the transport library's account.
    #[error("{what} {address:?}: {detail}")]
    Channel { what: &'static str, address: String, detail: String },
    /// The peer's answer could not be decoded (`detail` names the field).
    #[error("malformed answer: {detail}")]
    Undecodable { detail: String },
    /// The answer is signed by another party than the one asked.
    #[error("answer signed by {responder:?}")]
    SignedBy { responder: String },
    /// The answer decoded, but does not fit the question or the reading.
    #[error(transparent)]
    Answer(#[from] AnswerFault),
}

impl PeerFault {
    /// [`CotrainError::code`] of an error carrying this fault.
    pub fn code(&self) -> RemoteCode {
        match self {
            PeerFault::Status { code, .. } => *code,
            PeerFault::HandshakeRefused { .. } | PeerFault::WrongParty { .. } | PeerFault::Channel { .. } => {
                RemoteCode::Unavailable
            }
            PeerFault::Undecodable { .. } | PeerFault::SignedBy { .. } | PeerFault::Answer(_) => {
                RemoteCode::MalformedAnswer
            }
        }
    }
}

/// How an answer fails to fit the question or the reading it is folded in by.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AnswerFault {
    #[error("answer means malformed")]
    Means,
    #[error("index {index} outside the pool")]
    OutsidePool { index: usize },
    #[error("answer variances do not match its indices")]
    VarianceCount,
    #[error("noise variance {value} is invalid")]
    NoiseVariance { value: f64 },
    #[error("variance {value} is invalid")]
    Variance { value: f64 },
    #[error("prior variance {value} is invalid")]
    PriorVariance { value: f64 },
    /// A matrix (`what`) that does not cover the answered indices.
    #[error("{what} does not cover the answered indices")]
    NotCovering { what: &'static str },
    #[error("the likelihood reading needs the prior covariance and the DP noise variance of every answer")]
    LikelihoodNeedsPriorAndNoise,
    #[error("the likelihood reading needs the prior covariance")]
    NoPrior,
    #[error("the likelihood reading needs the DP noise variance")]
    NoNoiseVariance,
    #[error("full uncertainty mode but no covariance was sent")]
    NoCovariance,
    /// The `combiner` needs the responder's prior covariance, which was not sent.
    #[error("the {combiner} combiner needs the responder's prior covariance")]
    CombinerNeedsPrior { combiner: &'static str },
    #[error("the release likelihood covers indices outside this answer or released before")]
    LikelihoodOutside,
    #[error("the release likelihood names an index it did not answer")]
    LikelihoodUnanswered,
    #[error("the functional reading needs the release likelihood of every answered index")]
    FunctionalNeedsLikelihood,
    /// The release likelihood's matrices are not a valid release (the privacy layer's check).
    #[error("release likelihood: {0}")]
    Release(Box<dpcotrain_privacy::PrivacyError>),
}

/// The ways a [`answer::PredictRequest`] can be wrong, checked before anything is computed or
/// released. A node maps them to gRPC `INVALID_ARGUMENT` by type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("this request id was already used for a different request (indices, uncertainty or prior); use a new id")]
    ReusedId,
    #[error("a party does not answer its own requests")]
    OwnRequest,
    #[error("request has no indices")]
    NoIndices,
    #[error("index {index} is outside the pool (size {pool})")]
    OutsidePool { index: usize, pool: usize },
    #[error("index {0} is requested twice")]
    Repeated(usize),
}

/// What is wrong on this party's own side (see [`CotrainError::Own`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OwnError {
    /// A numeric setting outside its domain: `key` was `value` and must `bound`.
    #[error("invalid setting or data: {key} must {bound}, got {value}")]
    Setting { key: &'static str, value: f64, bound: &'static str },
    /// A spelling (of a combiner, a policy, a reading …) that names nothing.
    #[error("invalid setting or data: {0}")]
    Spelling(#[from] crate::named::UnknownName),
    /// Settings that cannot go together (each variant names them).
    #[error("invalid setting or data: {0}")]
    Conflict(#[from] Conflict),
    /// Data this party cannot use (each variant names the data set, party or column).
    #[error("invalid setting or data: {0}")]
    Data(Box<DataError>),
    /// A quantity of this party's own model that came out non-finite (`what` names it).
    #[error("invalid setting or data: {what} are not finite")]
    NonFinite { what: &'static str },
    /// Re-fitting the augmented model failed from each of its `starts` starting points.
    #[error("invalid setting or data: re-fitting the augmented model failed from every start ({starts})")]
    RefitFailed { starts: usize },
    /// The model moved on (version `base` → `now`) while a turn was re-fitted away from it: the
    /// staged turn is stale and was not committed.
    #[error(
        "invalid setting or data: the model changed (version {base} → {now}) while a turn was re-fitted away from it"
    )]
    ModelChanged { base: u64, now: u64 },
    /// A saved state this party refuses to restore (another party's, edited, or inconsistent).
    #[error("saved state refused: saved state of party {party:?}: {refusal}")]
    State { party: String, refusal: Box<StateRefusal> },
    /// A step the code never reaches while its invariants hold: a bug, reported instead of a
    /// panic. Nothing was released.
    #[error("internal: {0}")]
    Invariant(#[from] Invariant),
    /// A party's lock was poisoned by a panic while it was held.
    #[error("party state unavailable (a worker panicked while holding it)")]
    Poisoned,
}

/// The invariants of the release path and the model that a step relies on ([`OwnError::Invariant`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Invariant {
    #[error("no release model was built for this privacy mode")]
    NoReleaseModel,
    #[error("release-once: no frozen release")]
    NoFrozenRelease,
    #[error("a calibrated DP mode gave no noise scale; nothing was released")]
    NoNoiseScale,
    #[error("θ selection was not made before the release model was built")]
    ThetaNotSelected,
    #[error("the thesis mode has no finite release")]
    ThesisHasNoFiniteRelease,
    #[error("finite release requested under the function-space form")]
    FiniteUnderFunctionSpace,
    #[error("mean weights of a sparse model live on Z; use label_influence")]
    SparseMeanWeights,
    #[error("turn {0} is not recorded")]
    TurnNotRecorded(usize),
}

impl CotrainError {
    /// [`OwnError::Setting`].
    pub fn setting(key: &'static str, value: f64, bound: &'static str) -> Self {
        CotrainError::Own(OwnError::Setting { key, value, bound })
    }

    /// [`OwnError::State`].
    pub fn state(party: &str, refusal: StateRefusal) -> Self {
        CotrainError::Own(OwnError::State { party: party.to_string(), refusal: Box::new(refusal) })
    }
}

impl From<Conflict> for CotrainError {
    fn from(e: Conflict) -> Self {
        CotrainError::Own(OwnError::Conflict(e))
    }
}

impl From<DataError> for CotrainError {
    fn from(e: DataError) -> Self {
        CotrainError::Own(OwnError::Data(Box::new(e)))
    }
}

/// Settings that cannot go together. Each names the settings (config keys where there are
/// ones) and says what to use instead.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Conflict {
    #[error(
        "the answer guard reads the private labels to choose the model, and policy per-query releases that model: use policy batches or release-once, or guard off"
    )]
    GuardUnderPerQuery,
    #[error("θ selection is a calibrated mechanism; the thesis reproduction mode uses the fitted θ")]
    ThetaSelectionUnderThesis,
    /// The θ vote (GDP `mu`) and one release at `epsilon` need more than each requester's budget.
    #[error(
        "θ selection (GDP μ = {mu:.4}) and one release at ε = {epsilon} need a budget of ε = {need_epsilon:.4} per requester (δ = {delta:e}), but budget_epsilon is {budget_epsilon}: raise budget_epsilon or lower the θ vote's ε"
    )]
    ThetaVoteOverBudget { mu: f64, epsilon: f64, need_epsilon: f64, delta: f64, budget_epsilon: f64 },
    #[error(
        "the finite release is of the label-free private-only posterior: use policy release-once or batches, not per-query"
    )]
    FiniteReleasePerQuery,
    #[error(
        "per-query answers come from the co-trained model with its fitted θ: public or selected θ needs policy release-once or batches"
    )]
    PublicThetaPerQuery,
    #[error("policy batches releases at the requested points: it needs the finite release form")]
    BatchesNeedFinite,
    #[error("the thesis reproduction mode has its own noise scale; it cannot be combined with the finite release")]
    ThesisWithFinite,
    /// `combiner` + `uncertainty` ignore the answers' variance, so calibrated DP noise would
    /// enter as if it were data (`why` says how).
    #[error(
        "{combiner} + {uncertainty} under calibrated DP: {why}, so the DP noise would enter as if it were data (test RMSE can grow several-fold); use combiner noisy with uncertainty marginal (the default) or full, or DP off / thesis mode to study this combination"
    )]
    IgnoresAnswerNoise { combiner: &'static str, uncertainty: &'static str, why: &'static str },
    #[error(
        "readings.thesis_noise = fresh-per-query applies to the thesis DP mode only; calibrated DP draws and charges its own noise (use per-requester-path)"
    )]
    FreshNoiseUnderCalibrated,
    #[error(
        "readings.answer_source = private under calibrated per-query DP: the sensitivity is computed for the co-trained model; use policy release-once or batches, which release the private-only posterior"
    )]
    PrivateSourceUnderPerQuery,
    /// readings.answer_source / shared_variance act on per-query answers; the policy is `policy`.
    #[error(
        "readings.answer_source / readings.shared_variance act on per-query answers, but the release policy is {policy}"
    )]
    ReadingsNeedPerQuery { policy: &'static str },
    /// readings.blocky_theta = querier with views of `first` and `other` columns.
    #[error(
        "readings.blocky_theta = querier evaluates the responder's kernel with the querier's θ, which needs views of equal dimension; these views have {first} and {other} columns (use responder)"
    )]
    QuerierThetaDims { first: usize, other: usize },
    /// readings.blocky_theta = querier met a responder whose kernel has `kernel` parameters where
    /// the requester's θ has `theta`.
    #[error(
        "readings.blocky_theta = querier: {requester}'s θ has {theta} parameters but {responder}'s kernel has {kernel} (views of different dimension)"
    )]
    QuerierThetaParams { requester: String, responder: String, theta: usize, kernel: usize },
    /// The `reading` of answers with a combiner other than noisy + marginal.
    #[error(
        "the {reading} reading of answers is defined for the noisy combiner with marginal uncertainty, not {combiner} + {uncertainty}"
    )]
    ReadingNeedsNoisyMarginal { reading: &'static str, combiner: &'static str, uncertainty: &'static str },
    #[error("the likelihood reading of answers needs marginal uncertainty")]
    LikelihoodNeedsMarginal,
    /// The functional reading folds the querier's discount into each message, so there is no
    /// undiscounted variance for the value rule to weigh.
    #[error(
        "the value rule's undiscounted basis needs a point reading of answers (likelihood or posterior), not functionals"
    )]
    UndiscountedNeedsPointAnswers,
    /// The `combiner` works with the full private covariance block, which a sparse model lacks.
    #[error(
        "the {combiner} combiner needs the exact GP path (it works with the full private covariance block); with a sparse (VFE) local model use the noisy combiner"
    )]
    CombinerNeedsExact { combiner: &'static str },
    #[error(
        "full uncertainty and the functional reading need a dense noise block, which the sparse (VFE) local model does not support; use marginal uncertainty and the likelihood reading"
    )]
    DenseNoiseUnderSparse,
    #[error("the leave-one-out answer guard needs the exact local model (not VFE); set guard = \"off\"")]
    GuardNeedsExact,
    /// The leave-one-out guard with a `combiner` other than noisy.
    #[error("the leave-one-out answer guard is defined for the noisy combiner, not {combiner}")]
    GuardNeedsNoisy { combiner: &'static str },
    #[error("the functional reading needs a dense noise block, which the sparse (VFE) local model does not support")]
    FunctionalUnderSparse,
    #[error("readings.answer_source = private needs the exact local model (not VFE)")]
    PrivateSourceNeedsExact,
    #[error("the answer reading is set before the first turn")]
    ReadingAfterFirstTurn,
    /// The frontier's `views` data set without the user's views, or views without it.
    #[error("frontier: the views data set and the user's views go together")]
    ViewsWithoutViewData,
}

/// Data this party cannot use.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DataError {
    /// A scenario, oracle or view list with nothing in it (`what`).
    #[error("at least one {what} is needed")]
    NoneGiven { what: &'static str },
    /// Party `party`'s data disagree with themselves or with the other parties (`what`).
    #[error("party {party}: {what}")]
    Inconsistent { party: String, what: &'static str },
    #[error("parties disagree on the test set")]
    TestSetsDiffer,
    #[error("private data: need ≥ 1 row and one label per row")]
    NoPrivateRows,
    #[error("pool view and private view have different columns")]
    PoolColumns,
    /// `data` has no column `column`.
    #[error("the {data} data have no {column} column")]
    MissingColumn { data: String, column: String },
    /// In view `view`: `column` is not a covariate of `data` (`known` lists those).
    #[error("{view}: unknown {data} column {column:?} (covariates are {known})")]
    UnknownColumn { view: String, data: &'static str, column: String, known: String },
    #[error("{view}: column {column:?} is listed twice")]
    RepeatedColumn { view: String, column: String },
    #[error("{view}: {column} is the response, not a covariate")]
    ResponseAsCovariate { view: String, column: String },
    #[error("{view} has no columns")]
    EmptyView { view: String },
    #[error("views overlap: column {column:?} is in both")]
    ViewsOverlap { column: String },
    #[error("standardising needs at least 2 rows")]
    TooFewToStandardise,
    #[error("cannot standardise a constant column")]
    ConstantColumn,
    /// The split asks for `need` rows (`what`) where the data have `have`.
    #[error("{what}: need {need} rows, the data have {have}")]
    TooFewRows { what: &'static str, need: usize, have: usize },
    /// Party `party` needs `need` labelled rows; its masking cluster has `have` outside the test
    /// set and pool.
    #[error(
        "party P{party} needs {need} labelled rows but its k-means cluster has only {have} rows outside the test set and pool"
    )]
    ClusterTooSmall { party: usize, need: usize, have: usize },
    #[error("k-means masking produced an empty cluster")]
    EmptyCluster,
    /// Rejection sampling for party `party` accepted `accepted` of `needed` rows in `draws` draws.
    #[error(
        "rejection sampling for party P{party} accepted only {accepted} of {needed} masked rows in {draws} draws (r = {r})"
    )]
    RejectionSampling { party: usize, accepted: usize, needed: usize, draws: usize, r: f64 },
    /// A table file this party cannot read (the table's own error names file, line and column).
    #[error(transparent)]
    Table(dpcotrain_gp::SourceError),
}

impl From<crate::table::TableError> for DataError {
    /// Shared as the numerical core shares a source's error ([`dpcotrain_gp::SourceError`]: it
    /// holds an `io::Error`, which is not `Clone`); `downcast_ref` gives the `TableError` back.
    fn from(e: crate::table::TableError) -> Self {
        DataError::Table(dpcotrain_gp::SourceError::new(e))
    }
}

/// Why a saved state is refused (see [`OwnError::State`]): each names the saved value and the
/// one this node recomputed or expected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StateRefusal {
    #[error("format {saved} is not {expected}")]
    Format { saved: u32, expected: u32 },
    #[error("belongs to another party (this node is {node:?})")]
    OtherParty { node: String },
    #[error("can only restore into a fresh party")]
    NotFresh,
    /// The privacy settings changed between save and restore (`what` changed).
    #[error("{what} changed")]
    PolicyChanged { what: &'static str },
    #[error("the saved θ selection is not of this party's grid: privacy settings changed")]
    ThetaGrid,
    #[error(
        "the saved θ vote was released with noise sd {saved_sigma} (sensitivity {saved_sensitivity}, {saved_groups} groups), but this node's settings give {sigma} ({sensitivity}, {groups} groups): privacy settings or data changed"
    )]
    ThetaVote {
        saved_sigma: f64,
        saved_sensitivity: f64,
        saved_groups: usize,
        sigma: f64,
        sensitivity: f64,
        groups: usize,
    },
    #[error(
        "replaying round {round} gives objective {replayed:?}, the saved run had {saved:?}: data or configuration changed (a state saved before 2026-12-07 was fitted with [model.readings] fit_starts = \"best-of-4\", the default then, and one saved before D39 whose labelled rows hold a covariate at one value with unseen_covariates = \"free\": set the old default to resume that state; docs/decisions.md D38, D39)"
    )]
    Replay { round: usize, replayed: Option<f64>, saved: Option<f64> },
    #[error("replay reached model version {replayed}, saved {saved}")]
    Version { replayed: u64, saved: u64 },
    #[error(
        "release-once σ {saved_sigma} / Δ {saved_sensitivity} recomputed as {sigma} / {sensitivity}: data or privacy settings changed"
    )]
    ReleaseOnce { saved_sigma: f64, saved_sensitivity: f64, sigma: f64, sensitivity: f64 },
    #[error("released index {index} outside the pool (size {pool})")]
    ReleasedOutsidePool { index: usize, pool: usize },
    #[error("requester {requester:?}: a saved batch does not match its released means")]
    Batch { requester: String },
    /// The ledger of `requester` disagrees with what was released.
    #[error("saved ledger of requester {requester:?}: {mismatch}")]
    Ledger { requester: String, mismatch: LedgerMismatch },
    /// A state delta that does not fit the state it is applied to.
    #[error("state delta replaces turns from {from} but the state has {turns}")]
    Delta { from: usize, turns: usize },
}

/// How a saved ledger disagrees with the releases it should account for.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LedgerMismatch {
    #[error(
        "the θ vote's charge records σ = {sigma}, Δ = {sensitivity} but the vote was made with σ = {vote_sigma}, Δ = {vote_sensitivity}"
    )]
    ThetaVote { sigma: f64, sensitivity: f64, vote_sigma: f64, vote_sensitivity: f64 },
    #[error("the θ vote has no charge {id:?} in the ledger")]
    NoThetaVote { id: &'static str },
    #[error("release {id:?} records ρ = {rho} but its Δ = {sensitivity} and σ = {sigma} give {expected}")]
    Rho { id: String, rho: f64, sensitivity: f64, sigma: f64, expected: f64 },
    #[error(
        "release {id:?} records σ = {sigma}, Δ = {sensitivity} but batch {batch} was released with σ = {batch_sigma}, Δ = {batch_sensitivity}"
    )]
    Batch { id: String, batch: usize, sigma: f64, sensitivity: f64, batch_sigma: f64, batch_sensitivity: f64 },
    #[error("batch {batch} ({indices} indices released) has no charge {id:?} in the ledger")]
    NoBatchCharge { id: String, batch: usize, indices: usize },
    #[error("{released} means were released but the ledger records no release")]
    NoRelease { released: usize },
}

impl From<dpcotrain_privacy::PrivacyError> for CotrainError {
    fn from(e: dpcotrain_privacy::PrivacyError) -> Self {
        match e {
            dpcotrain_privacy::PrivacyError::BudgetExceeded(b) => CotrainError::Budget(b),
            e => CotrainError::Privacy(e),
        }
    }
}

impl From<Invariant> for CotrainError {
    fn from(e: Invariant) -> Self {
        CotrainError::Own(OwnError::Invariant(e))
    }
}

impl From<dpcotrain_gp::LinalgError> for CotrainError {
    fn from(e: dpcotrain_gp::LinalgError) -> Self {
        CotrainError::Gp(e.into())
    }
}

/// A peer that gave no answer in a turn, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Refusal {
    pub peer: String,
    pub code: RemoteCode,
    /// For a reader: the error's message, or why the peer was not asked.
    pub message: String,
}

impl Refusal {
    /// `peer`'s call ended in `e`: its code comes from the error's type ([`CotrainError::code`]).
    pub fn of(peer: &str, e: &CotrainError) -> Self {
        Refusal { peer: peer.to_string(), code: e.code(), message: e.to_string() }
    }

    /// `peer` was not asked: the ρ it has left for this party (`left`) is below one release's
    /// `cost`.
    pub fn not_asked(peer: &str, left: f64, cost: f64) -> Self {
        Refusal {
            peer: peer.to_string(),
            code: RemoteCode::NotAsked,
            message: format!(
                "not asked: {peer}'s budget for this party is spent (ρ left {left:.3e} < {cost:.3e} per release)"
            ),
        }
    }

    /// Whether the peer was deliberately not asked (its budget for this party is spent).
    pub fn not_asked_for_budget(&self) -> bool {
        self.code == RemoteCode::NotAsked
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// The messages of `reasons`, joined for one line.
pub(crate) fn joined(reasons: &[Refusal]) -> String {
    reasons.iter().map(|r| r.message.as_str()).collect::<Vec<_>>().join("; ")
}

/// Reads both spellings a saved state may hold: `{peer, code, message}`, and the `[peer, text]`
/// pairs of earlier versions, whose code is read from the one prefix they gave a meaning to
/// ("not asked:") and is otherwise [`RemoteCode::Recorded`].
impl<'de> Deserialize<'de> for Refusal {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Saved {
            Typed { peer: String, code: RemoteCode, message: String },
            Text(String, String),
        }
        Ok(match Saved::deserialize(d)? {
            Saved::Typed { peer, code, message } => Refusal { peer, code, message },
            Saved::Text(peer, message) => {
                let code = if message.starts_with("not asked:") { RemoteCode::NotAsked } else { RemoteCode::Recorded };
                Refusal { peer, code, message }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_carries_the_code_of_its_error_and_reads_the_old_pairs() {
        let budget =
            dpcotrain_privacy::BudgetExceeded { cost: 1.0, remaining: 0.0, budget: 1.0, epsilon: 1.0, delta: 1e-5 };
        let r = Refusal::of("B", &CotrainError::Budget(budget));
        assert_eq!(r.code, RemoteCode::BudgetExhausted);
        let remote = CotrainError::Peer {
            peer: "B".into(),
            fault: PeerFault::Status {
                code: RemoteCode::InvalidRequest,
                message: "index 9 is outside the pool".into(),
            },
        };
        assert_eq!(Refusal::of("B", &remote).code, RemoteCode::InvalidRequest);
        let skipped = Refusal::not_asked("B", 0.1, 0.2);
        assert!(skipped.not_asked_for_budget() && !r.not_asked_for_budget());
        // The typed form round-trips; an earlier version's pair is read with its code.
        let json = serde_json::to_string(&vec![r.clone(), skipped.clone()]).unwrap();
        assert_eq!(serde_json::from_str::<Vec<Refusal>>(&json).unwrap(), vec![r, skipped.clone()]);
        let old = format!(r#"[["B", {:?}], ["C", "peer C: Internal: disk full"]]"#, skipped.message);
        let read: Vec<Refusal> = serde_json::from_str(&old).unwrap();
        assert_eq!(read[0], skipped);
        assert_eq!((read[1].code, read[1].message.as_str()), (RemoteCode::Recorded, "peer C: Internal: disk full"));
    }
}
