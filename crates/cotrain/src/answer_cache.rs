//! The answers a party keeps so that a retried request id gets the same bytes (no new noise, no
//! new charge), bounded per requester.
//!
//! Keys are (requester, request id): another requester reusing an id gets nothing of the first
//! requester's answer. Each requester keeps at most [`MAX_ANSWERS_PER_REQUESTER`] answers and at
//! most [`MAX_BYTES_PER_REQUESTER`] bytes of them (the newest answer is always kept), oldest
//! first out. A retry of an evicted id is a new request: it is answered and charged by the
//! release policy like any other, so eviction can never release anything uncharged — under
//! `batches` the means of indices released before come back as first released (post-processing,
//! no charge), under `release-once` they are read off the frozen release, and under `per-query`
//! a new release is charged to the requester's ledger.

use crate::answer::{Answer, PredictRequest, Uncertainty};
use std::collections::{BTreeMap, HashMap, VecDeque};

/// Answers kept per requester.
pub const MAX_ANSWERS_PER_REQUESTER: usize = 256;
/// Bytes of answers (f64 payloads) kept per requester; the newest answer is kept whatever its size.
pub const MAX_BYTES_PER_REQUESTER: usize = 8 << 20;

/// The separator of requester and request id in a cache key (not a printable character).
const SEP: char = '\u{1f}';

/// The cache key of a request.
pub fn key(requester: &str, request_id: &str) -> String {
    format!("{requester}{SEP}{request_id}")
}

/// Approximate bytes of an answer's numeric payload.
pub fn answer_bytes(a: &Answer) -> usize {
    let vecs = a.indices.len()
        + a.mean.len()
        + a.var.as_ref().map_or(0, Vec::len)
        + a.noise_var.as_ref().map_or(0, Vec::len)
        + a.answered.len();
    let mats = a.cov.as_ref().map_or(0, |m| m.len()) + a.prior_cov.as_ref().map_or(0, |m| m.len());
    8 * (vecs + mats) + a.responder.len() + 64
}

/// Whether `a` answers exactly `req` (same indices, uncertainty and prior request): a retried id
/// must ask the same thing.
pub(crate) fn answers_request(a: &Answer, req: &PredictRequest) -> bool {
    a.indices == req.indices
        && a.var.is_some() == (req.uncertainty == Uncertainty::Marginal)
        && a.cov.is_some() == (req.uncertainty == Uncertainty::Full)
        && a.prior_cov.is_some() == req.want_prior
}

#[derive(Debug, Clone, Default)]
pub(crate) struct AnswerCache {
    answers: HashMap<String, Answer>,
    /// Every key, oldest first (the saved order).
    order: VecDeque<String>,
    /// Per requester: (answers kept, their bytes).
    per_requester: HashMap<String, (usize, usize)>,
}

fn requester_of(key: &str) -> &str {
    key.split(SEP).next().unwrap_or_default()
}

impl AnswerCache {
    pub fn get(&self, key: &str) -> Option<&Answer> {
        self.answers.get(key)
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.answers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.answers.is_empty()
    }

    fn remove(&mut self, key: &str) {
        if let Some(a) = self.answers.remove(key) {
            self.order.retain(|k| k != key);
            let slot = self.per_requester.entry(requester_of(key).to_string()).or_default();
            slot.0 = slot.0.saturating_sub(1);
            slot.1 = slot.1.saturating_sub(answer_bytes(&a));
        }
    }

    /// Keep `answer` under `key` (made by [`key`]); evict the requester's oldest answers beyond
    /// the bounds.
    pub fn insert(&mut self, key: String, answer: Answer) {
        self.remove(&key);
        let requester = requester_of(&key).to_string();
        let slot = self.per_requester.entry(requester.clone()).or_default();
        slot.0 += 1;
        slot.1 += answer_bytes(&answer);
        self.answers.insert(key.clone(), answer);
        self.order.push_back(key.clone());
        loop {
            let (count, bytes) = self.per_requester[&requester];
            if count <= 1 || (count <= MAX_ANSWERS_PER_REQUESTER && bytes <= MAX_BYTES_PER_REQUESTER) {
                break;
            }
            let Some(oldest) = self.order.iter().find(|k| requester_of(k) == requester && **k != key).cloned() else {
                break;
            };
            self.remove(&oldest);
        }
    }

    /// The cached answers by key, and every key oldest first, for the saved state.
    pub fn export(&self) -> (BTreeMap<String, Answer>, Vec<String>) {
        let answers = self.answers.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        (answers, self.order.iter().cloned().collect())
    }

    /// Rebuild from a saved state: `order` first (oldest first), then any key it does not list
    /// (states saved before the order was kept), in key order. The bounds apply as on insert.
    pub fn import(answers: &BTreeMap<String, Answer>, order: &[String]) -> Self {
        let mut c = AnswerCache::default();
        for k in order {
            if let Some(a) = answers.get(k) {
                c.insert(k.clone(), a.clone());
            }
        }
        let listed: std::collections::HashSet<&String> = order.iter().collect();
        for (k, a) in answers {
            if !listed.contains(k) {
                c.insert(k.clone(), a.clone());
            }
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nalgebra::DMatrix;

    fn answer(indices: Vec<usize>, cov: usize) -> Answer {
        Answer {
            responder: "A".into(),
            mean: vec![0.0; indices.len()],
            var: (cov == 0).then(|| vec![0.1; indices.len()]),
            answered: indices.clone(),
            indices,
            cov: (cov > 0).then(|| DMatrix::zeros(cov, cov)),
            prior_cov: None,
            model_version: 1,
            charge: None,
            budget_rho_left: None,
            noise_var: None,
            likelihood: None,
            receipt: None,
        }
    }

    #[test]
    fn bounded_per_requester_oldest_out() {
        let mut c = AnswerCache::default();
        for i in 0..MAX_ANSWERS_PER_REQUESTER + 10 {
            c.insert(key("B", &format!("r{i}")), answer(vec![i % 7], 0));
        }
        c.insert(key("C", "r0"), answer(vec![1], 0));
        assert_eq!(c.len(), MAX_ANSWERS_PER_REQUESTER + 1);
        assert!(c.get(&key("B", "r0")).is_none() && c.get(&key("B", "r9")).is_none());
        assert!(c.get(&key("B", "r10")).is_some());
        assert!(c.get(&key("C", "r0")).is_some(), "another requester's answers are not evicted");
        // Bytes: a 550×550 covariance is 2.4 MB; three fit under 8 MiB, a fourth evicts the first.
        let mut c = AnswerCache::default();
        for i in 0..4 {
            c.insert(key("B", &format!("big{i}")), answer(vec![i], 550));
        }
        assert!(c.get(&key("B", "big0")).is_none());
        assert!((1..4).all(|i| c.get(&key("B", &format!("big{i}"))).is_some()));
        // The newest answer is kept even when it alone exceeds the byte bound.
        c.insert(key("B", "huge"), answer(vec![9], 1100));
        assert_eq!(c.len(), 1);
        assert!(c.get(&key("B", "huge")).is_some());
    }

    #[test]
    fn export_import_keeps_order_and_bounds() {
        let mut c = AnswerCache::default();
        for i in 0..5 {
            c.insert(key("B", &format!("r{i}")), answer(vec![i], 0));
        }
        c.insert(key("C", "x"), answer(vec![1], 0));
        let (answers, order) = c.export();
        let back = AnswerCache::import(&answers, &order);
        assert_eq!(back.export(), (answers.clone(), order.clone()));
        // A state saved without the order still imports every answer.
        let back = AnswerCache::import(&answers, &[]);
        assert_eq!(back.len(), 6);
    }

    #[test]
    fn a_retry_must_ask_the_same_thing() {
        let a = answer(vec![3, 4], 0);
        let req = |indices: Vec<usize>, uncertainty, want_prior| PredictRequest {
            request_id: "r".into(),
            requester: "B".into(),
            indices,
            uncertainty,
            want_prior,
            witness: None,
        };
        assert!(answers_request(&a, &req(vec![3, 4], Uncertainty::Marginal, false)));
        assert!(!answers_request(&a, &req(vec![4, 3], Uncertainty::Marginal, false)));
        assert!(!answers_request(&a, &req(vec![3, 4], Uncertainty::Full, false)));
        assert!(!answers_request(&a, &req(vec![3, 4], Uncertainty::Marginal, true)));
        assert!(!answers_request(&a, &req(vec![3, 4], Uncertainty::None, false)));
    }
}
