//! The projected line search along P(x + αd) (module docs of `optimize`, step 3): breakpoints
//! of the path, safeguarded cubic/quadratic interpolation, and the strong-Wolfe bracketing
//! (Moré & Thuente 1994; Nocedal & Wright 2006, Algorithms 3.5–3.6), with Hager & Zhang's
//! (2006) approximate Wolfe conditions for objectives whose values are noisier than their
//! gradients (module docs of `optimize`, step 4).

use super::*;

/// Step at which component `i` of the path `P(x + αd)` reaches its bound:
/// `+∞` if it does not move or moves toward an infinite bound. A held variable
/// with `dᵢ = boundᵢ − xᵢ` gets exactly 1, because numerator and denominator
/// are the same number.
fn breakpoint(xi: f64, di: f64, l: f64, u: f64) -> f64 {
    if di > 0.0 {
        (u - xi) / di
    } else if di < 0.0 {
        (l - xi) / di
    } else {
        f64::INFINITY
    }
}

/// Trial point `P(x + αd)`. A component whose breakpoint has been reached is
/// set exactly to its bound, so bounds are hit without rounding error.
fn trial_point(x: &[f64], d: &[f64], alpha: f64, lower: &[f64], upper: &[f64]) -> Vec<f64> {
    x.iter()
        .zip(d)
        .zip(lower.iter().zip(upper))
        .map(|((&xi, &di), (&l, &u))| {
            if di == 0.0 {
                xi
            } else if alpha >= breakpoint(xi, di, l, u) {
                if di > 0.0 { u } else { l }
            } else {
                clamp(xi + alpha * di, l, u)
            }
        })
        .collect()
}

/// Right derivative of `α ↦ f(P(x + αd))` at `alpha`, given the gradient there.
/// Components already clipped by the projection do not move and do not count.
fn path_derivative(g: &[f64], x: &[f64], d: &[f64], alpha: f64, lower: &[f64], upper: &[f64]) -> f64 {
    x.iter()
        .zip(d)
        .zip(g)
        .zip(lower.iter().zip(upper))
        .map(|(((&xi, &di), &gi), (&l, &u))| if di != 0.0 && alpha < breakpoint(xi, di, l, u) { gi * di } else { 0.0 })
        .sum()
}

/// First and last breakpoints of the path. Before the first, `P(x + αd) = x + αd`
/// is a straight line. After the last, the path is constant. Both are `+∞` if
/// no moving component has a finite bound in its direction.
fn path_breakpoints(x: &[f64], d: &[f64], lower: &[f64], upper: &[f64]) -> (f64, f64) {
    let mut first = f64::INFINITY;
    let mut last = 0.0f64;
    for ((&xi, &di), (&l, &u)) in x.iter().zip(d).zip(lower.iter().zip(upper)) {
        if di != 0.0 {
            let t = breakpoint(xi, di, l, u);
            first = first.min(t);
            last = last.max(t);
        }
    }
    (first, last)
}

/// Minimiser of the cubic through `(a, fa, ga)` and `(b, fb, gb)`
/// (Nocedal & Wright eq. 3.59). `None` if it does not exist or is not finite.
fn cubic_min(a: f64, fa: f64, ga: f64, b: f64, fb: f64, gb: f64) -> Option<f64> {
    if a == b {
        return None;
    }
    let d1 = ga + gb - 3.0 * (fa - fb) / (a - b);
    let disc = d1 * d1 - ga * gb;
    if disc.is_nan() || disc < 0.0 {
        return None;
    }
    let d2 = (b - a).signum() * disc.sqrt();
    let denom = gb - ga + 2.0 * d2;
    if denom == 0.0 {
        return None;
    }
    let t = b - (b - a) * (gb + d2 - d1) / denom;
    t.is_finite().then_some(t)
}

/// Minimiser of the quadratic through `(a, fa)` with slope `ga` at `a` and through `(b, fb)`.
fn quad_min(a: f64, fa: f64, ga: f64, b: f64, fb: f64) -> Option<f64> {
    let h = b - a;
    if h == 0.0 {
        return None;
    }
    let c = (fb - fa - ga * h) / (h * h);
    if c.is_nan() || c <= 0.0 {
        return None;
    }
    let t = a - ga / (2.0 * c);
    t.is_finite().then_some(t)
}

/// A point on the line-search path with its value and path derivative.
#[derive(Debug, Clone, Copy)]
struct LsPoint {
    alpha: f64,
    f: f64,
    dphi: f64,
}

/// The far end of the line-search bracket.
#[derive(Debug, Clone, Copy)]
enum Hi {
    Evaluated(LsPoint),
    /// Evaluation failed at this step length.
    Failed(f64),
}

impl Hi {
    fn alpha(&self) -> f64 {
        match *self {
            Hi::Evaluated(p) => p.alpha,
            Hi::Failed(a) => a,
        }
    }
}

/// An evaluated point accepted (or acceptable) by the line search.
pub(super) struct Accepted {
    pub(super) x: Vec<f64>,
    pub(super) f: f64,
    pub(super) g: Vec<f64>,
    /// Accepted by the approximate Wolfe conditions (f may not have decreased measurably).
    pub(super) approximate: bool,
}

/// Hager & Zhang's (2006) approximate Wolfe test on the straight part of the path:
/// `σφ'(0) ≤ φ'(α) ≤ (2δ − 1)φ'(0)` together with `φ(α) ≤ φ(0) + ε_k`, where
/// `ε_k = APPROX_EPS·|φ(0)|`. For a quadratic φ the derivative part is the Armijo condition
/// with `c₁ = δ` (φ(α) − φ(0) = α(φ'(0) + φ'(α))/2 ≤ δαφ'(0)), and unlike Armijo it does not
/// need f differences below f's own round-off; `ε_k` bounds the increase f may show by that
/// round-off.
fn approximate_wolfe(f0: f64, dphi0: f64, ft: f64, dphi: f64) -> bool {
    dphi0 < 0.0 && C2 * dphi0 <= dphi && dphi <= (2.0 * APPROX_DELTA - 1.0) * dphi0 && ft <= f0 + APPROX_EPS * f0.abs()
}

/// Next trial inside the bracket `[lo, hi]`: safeguarded cubic, then quadratic,
/// then bisection. The result is kept at least 10% of the width away from both ends.
fn interpolate(lo: LsPoint, hi: Hi) -> f64 {
    let ha = hi.alpha();
    let (a, b) = if lo.alpha < ha { (lo.alpha, ha) } else { (ha, lo.alpha) };
    let w = b - a;
    let inside = |t: &f64| *t > a && *t < b;
    let t = match hi {
        Hi::Evaluated(h) => cubic_min(lo.alpha, lo.f, lo.dphi, h.alpha, h.f, h.dphi)
            .filter(inside)
            .or_else(|| quad_min(lo.alpha, lo.f, lo.dphi, h.alpha, h.f).filter(inside))
            .unwrap_or(0.5 * (a + b)),
        Hi::Failed(_) => 0.5 * (a + b),
    };
    clamp(t, a + 0.1 * w, b - 0.1 * w)
}

/// Projected strong-Wolfe line search (module docs, step 4). Returns the
/// accepted point, or `None` if no point with sufficient decrease was found
/// and no trial met the approximate Wolfe conditions.
///
/// With `approximate` (the run has switched to approximate Wolfe, Hager & Zhang 2006),
/// a trial on the straight part of the path that meets [`approximate_wolfe`] is accepted
/// at once. Without it, the first such trial is only remembered, and returned (marked
/// `approximate`) if the search would otherwise fail: a search that succeeds is the
/// plain strong-Wolfe search, bit for bit.
#[allow(clippy::too_many_arguments)]
pub(super) fn line_search<F>(
    ev: &mut Evaluator<F>,
    x: &[f64],
    f0: f64,
    g0: &[f64],
    d: &[f64],
    lower: &[f64],
    upper: &[f64],
    max_evals: usize,
    approximate: bool,
) -> Option<Accepted>
where
    F: FnMut(&[f64]) -> EvalResult,
{
    let dphi0 = dot(g0, d);
    // Up to `alpha_bp` the path is straight and the strong-Wolfe logic applies.
    // From `alpha_bp` on it is bent: the first point with sufficient decrease is
    // accepted, and `alpha_bp` itself (a kink, where the minimum along the path
    // often lies) is tried before the search goes back into the straight part.
    let (alpha_bp, alpha_all) = path_breakpoints(x, d, lower, upper);
    let mut lo = LsPoint { alpha: 0.0, f: f0, dphi: dphi0 };
    let mut lo_state: Option<Accepted> = None;
    let mut hi: Option<Hi> = None;
    let mut fallback: Option<Accepted> = None;
    let mut alpha = alpha_all.min(1.0);
    if !(alpha > 0.0 && alpha.is_finite()) {
        return None;
    }

    let mut evals = 0usize;
    while evals < max_evals {
        let xt = trial_point(x, d, alpha, lower, upper);
        if xt == x || lo_state.as_ref().is_some_and(|s| s.x == xt) {
            // The bracket has shrunk below the resolution of x.
            break;
        }
        evals += 1; // overflowed trials count against the budget too, so the loop is bounded
        let outcome = if xt.iter().all(|v| v.is_finite()) {
            ev.eval(&xt)
        } else {
            Err(String::new()) // overflowed trial: "too far", never passed to f
        };
        match outcome {
            Err(_) => {
                if lo_state.is_some() {
                    break; // a sufficient-decrease point is known: take it
                }
                hi = Some(Hi::Failed(alpha));
            }
            Ok((ft, gt)) => {
                let dphi = path_derivative(&gt, x, d, alpha, lower, upper);
                let pred: f64 = g0.iter().zip(xt.iter().zip(x)).map(|(gi, (a, b))| gi * (a - b)).sum();
                let armijo = pred < 0.0 && ft <= f0 + C1 * pred;
                let point = LsPoint { alpha, f: ft, dphi };
                if (!armijo || ft >= lo.f)
                    && fallback.is_none()
                    && alpha <= alpha_bp
                    && approximate_wolfe(f0, dphi0, ft, dphi)
                {
                    let acc = Accepted { x: xt.clone(), f: ft, g: gt.clone(), approximate: true };
                    if approximate {
                        return Some(acc);
                    }
                    fallback = Some(acc);
                }
                if !armijo || ft >= lo.f {
                    hi = Some(Hi::Evaluated(point));
                } else {
                    if alpha >= alpha_bp || dphi.abs() <= C2 * dphi0.abs() {
                        return Some(Accepted { x: xt, f: ft, g: gt, approximate: false });
                    }
                    let prev = lo;
                    let passed_min = match hi {
                        None => dphi >= 0.0,
                        Some(h) => dphi * (h.alpha() - alpha) >= 0.0,
                    };
                    if passed_min {
                        hi = Some(Hi::Evaluated(prev));
                    }
                    lo = point;
                    lo_state = Some(Accepted { x: xt, f: ft, g: gt, approximate: false });
                    if hi.is_none() {
                        // Still descending steeply: extrapolate (Moré–Thuente bounds),
                        // stopping at the first kink (here alpha < alpha_bp).
                        let inc = alpha - prev.alpha;
                        let (tmin, tmax) = (alpha + 1.1 * inc, alpha + 4.0 * inc);
                        let t = cubic_min(prev.alpha, prev.f, prev.dphi, alpha, ft, dphi)
                            .filter(|t| *t > alpha)
                            .unwrap_or(tmax);
                        alpha = clamp(t, tmin, tmax).min(alpha_bp);
                        continue;
                    }
                }
            }
        }
        let Some(h) = hi else {
            break; // unreachable: every path that gets here has set `hi`
        };
        if lo_state.is_some() && (h.alpha() - lo.alpha).abs() <= XTOL * lo.alpha.max(h.alpha()) {
            break; // bracket already narrow: settle for the sufficient-decrease point
        }
        alpha = interpolate(lo, h);
        if alpha < alpha_bp && alpha_bp < h.alpha() {
            alpha = alpha_bp; // leaving the bent part: try the kink first
        }
    }
    lo_state.or(fallback)
}
