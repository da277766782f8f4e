//! The L-BFGS memory of curvature pairs (s, y) and the search direction it gives (module docs
//! of `optimize`, steps 1–2): the two-loop recursion over the free variables (Nocedal & Wright
//! 2006, Algorithm 7.4) with held variables moved straight to their bounds.

use super::*;

/// Search direction (module docs, steps 1–2). `γ` is the scale of the
/// steepest-descent step `−γg` that decides which variables are held: those
/// that such a step would push onto (or past) a bound they already press on.
pub(super) fn search_direction(memory: &Memory, x: &[f64], g: &[f64], lower: &[f64], upper: &[f64]) -> Vec<f64> {
    let gamma = memory.newest_gamma().unwrap_or_else(|| steepest_scale(x, g, lower, upper));
    let free: Vec<bool> = x
        .iter()
        .zip(g)
        .zip(lower.iter().zip(upper))
        .map(|((&xi, &gi), (&l, &u))| {
            let held = on_bound_outward(xi, gi, l, u)
                || (gi > 0.0 && xi - gamma * gi <= l)
                || (gi < 0.0 && xi - gamma * gi >= u);
            !held
        })
        .collect();
    let mut d = if memory.is_empty() {
        g.iter().zip(&free).map(|(&gi, &f)| if f { -gamma * gi } else { 0.0 }).collect()
    } else {
        memory.two_loop(g, &free, gamma)
    };
    for ((((di, &f), &xi), &gi), (&l, &u)) in d.iter_mut().zip(&free).zip(x).zip(g).zip(lower.iter().zip(upper)) {
        if !f {
            // Held: go straight to the bound the gradient pushes against (0 if already there).
            *di = if gi > 0.0 {
                l - xi
            } else if gi < 0.0 {
                u - xi
            } else {
                0.0
            };
        } else if (xi <= l && *di < 0.0) || (xi >= u && *di > 0.0) {
            // Free but on a bound and pointing out: projection would cancel it at once.
            *di = 0.0;
        }
    }
    d
}

/// Limited memory of curvature pairs `(s, y)`, oldest first.
pub(super) struct Memory {
    cap: usize,
    pairs: VecDeque<(Vec<f64>, Vec<f64>)>,
}

impl Memory {
    pub(super) fn new(cap: usize) -> Self {
        Self {
            cap,
            pairs: VecDeque::new(), // no pre-allocation: `cap` may be huge
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// `sᵀy / yᵀy` of the newest pair (positive by the storage test).
    pub(super) fn newest_gamma(&self) -> Option<f64> {
        self.pairs.back().map(|(s, y)| dot(s, y) / dot(y, y))
    }

    /// The stored pairs, oldest first.
    pub(super) fn into_pairs(self) -> Vec<(Vec<f64>, Vec<f64>)> {
        self.pairs.into()
    }

    pub(super) fn clear(&mut self) {
        self.pairs.clear();
    }

    /// Store `(s, y)` unless `sᵀy ≤ ε·yᵀy` (the pair would break positive definiteness).
    pub(super) fn push(&mut self, s: Vec<f64>, y: Vec<f64>) {
        if self.cap == 0 {
            return;
        }
        let sy = dot(&s, &y);
        let yy = dot(&y, &y);
        if !(sy > CURV_EPS * yy && yy > 0.0 && sy.is_finite() && yy.is_finite()) {
            return;
        }
        if self.pairs.len() == self.cap {
            self.pairs.pop_front();
        }
        self.pairs.push_back((s, y));
    }

    /// `−H g` with the two-loop recursion (Nocedal & Wright, Algorithm 7.4),
    /// restricted to the `free` variables. Pairs whose restricted curvature is
    /// not safely positive are skipped, and held components come out as zero.
    pub(super) fn two_loop(&self, g: &[f64], free: &[bool], gamma_full: f64) -> Vec<f64> {
        let k = self.pairs.len();
        let mut q: Vec<f64> = g.iter().zip(free).map(|(&gi, &f)| if f { gi } else { 0.0 }).collect();
        let mut alpha = vec![0.0; k];
        let mut rho = vec![0.0; k]; // 0 marks a skipped pair
        let mut gamma = None;
        for (j, (s, y)) in self.pairs.iter().enumerate().rev() {
            let sy = masked_dot(s, y, free);
            let yy = masked_dot(y, y, free);
            if !(sy > CURV_EPS * yy && yy > 0.0) {
                continue;
            }
            rho[j] = 1.0 / sy;
            gamma.get_or_insert(sy / yy);
            let a = rho[j] * masked_dot(s, &q, free);
            alpha[j] = a;
            for ((qi, yi), &f) in q.iter_mut().zip(y).zip(free) {
                if f {
                    *qi -= a * yi;
                }
            }
        }
        // Without a usable restricted pair, scale by the newest full pair.
        let gamma = gamma.unwrap_or(gamma_full);
        let mut r: Vec<f64> = q.iter().map(|qi| gamma * qi).collect();
        for (j, (s, y)) in self.pairs.iter().enumerate() {
            if rho[j] == 0.0 {
                continue;
            }
            let b = rho[j] * masked_dot(y, &r, free);
            let c = alpha[j] - b;
            for ((ri, si), &f) in r.iter_mut().zip(s).zip(free) {
                if f {
                    *ri += c * si;
                }
            }
        }
        r.iter_mut().for_each(|v| *v = -*v);
        r
    }
}
