//! The privacy boundary, checked by the compiler: what a crate holding a [`crate::Party`] (the
//! node, the CLI, a report) can and cannot reach. Each `compile_fail` example below is a doc
//! test that passes only if it does not compile, and names the error it fails with (rustdoc
//! checks that code on nightly toolchains only). On stable, the control example first — the
//! same types, paths and signatures, used the allowed way — is what shows each snippet fails
//! for its forbidden item and not for a typo.
//!
//! Through a party, an outside crate reads label-free facts and asks for the designated
//! outputs (a release, the operator's own predictions):
//! ```
//! fn outside(p: &mut dpcotrain_cotrain::Party, s: &dpcotrain_cotrain::PartyState) {
//!     let view = p.model();
//!     let _ = (view.version(), view.noise_variance(), view.asked(), view.blocks().len());
//!     let _ = (p.name(), p.n_labels(), p.pool_size(), p.turns().len(), p.constant_covariates());
//!     let _ = s.requesters.values().map(|r| r.ledger.as_ref().map(|l| l.rho_spent()));
//! }
//! ```
//!
//! The private rows are not reachable (`Party`'s data field is the crate's):
//! ```compile_fail,E0616
//! fn outside(p: &dpcotrain_cotrain::Party) {
//!     let _ = &p.data;
//! }
//! ```
//! nor through a lab accessor (there is none: the experiments keep their own copy of the data
//! they build parties from):
//! ```compile_fail,E0599
//! fn outside(p: &dpcotrain_cotrain::Party) {
//!     let _ = p.private_data();
//! }
//! ```
//! The model never leaves the party — not mutably:
//! ```compile_fail,E0599
//! fn outside(p: &mut dpcotrain_cotrain::Party) {
//!     let _ = p.model_mut();
//! }
//! ```
//! not as the copy a turn is staged on:
//! ```compile_fail,E0624
//! fn outside(p: &dpcotrain_cotrain::Party) {
//!     let _ = p.model_for_turn();
//! }
//! ```
//! not by staging or installing a turn outside the driver:
//! ```compile_fail,E0624
//! let _ = dpcotrain_cotrain::Party::stage;
//! ```
//! ```compile_fail,E0624
//! let _ = dpcotrain_cotrain::Party::commit_turn;
//! ```
//! and not through the label-free view:
//! ```compile_fail,E0616
//! fn outside(p: &dpcotrain_cotrain::Party) {
//!     let _ = p.model().0;
//! }
//! ```
//! A [`crate::CoModel`] (a model you build from your own data) keeps its rows and weights to
//! itself as well:
//! ```compile_fail,E0624
//! fn outside(m: &mut dpcotrain_cotrain::CoModel) {
//!     let _ = m.mean_weights();
//! }
//! ```
//! ```compile_fail,E0616
//! fn outside(m: &dpcotrain_cotrain::CoModel) {
//!     let _ = &m.blocks;
//! }
//! ```
//! The saved state carries the release noise (with a released mean it gives the private mean
//! back): the store serialises it whole, and no other crate can read it — the release-once
//! draw,
//! ```compile_fail,E0616
//! fn outside(s: &dpcotrain_cotrain::PartyState) {
//!     let _ = s.frozen.as_ref().map(|f| &f.noise);
//! }
//! ```
//! a per-query noise path,
//! ```compile_fail,E0616
//! fn outside(s: &dpcotrain_cotrain::PartyState) {
//!     let _ = s.requesters.values().map(|r| r.path.as_ref().map(|p| &p.path));
//! }
//! ```
//! or the released means kept beside them:
//! ```compile_fail,E0616
//! fn outside(s: &dpcotrain_cotrain::PartyState) {
//!     let _ = s.requesters.values().map(|r| &r.released);
//! }
//! ```
//! and a noise path does not unwrap into its saved parts:
//! ```compile_fail,E0277
//! fn outside(r: dpcotrain_cotrain::state::PathRecord) {
//!     let _: (u64, dpcotrain_privacy::noise::NoisePathState, f64) = r.into();
//! }
//! ```
//! Their `Debug` shows sizes, not values, as `Party`'s shows label-free facts. What the
//! compiler cannot stop: `PartyState` serialises whole, because the node's store writes it (a
//! 0600 file under the node's MAC key); a crate that serialises a party's state holds its
//! secrets, exactly as the state file does. The product's crates hand it only to the store.
