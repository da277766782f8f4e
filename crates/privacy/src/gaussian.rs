//! The standard normal CDF Φ and the exact privacy curve of a Gaussian mechanism.

/// Φ(x) = ½ erfc(−x/√2), accurate in both tails (libm's erfc is a port of musl/FreeBSD).
pub fn phi(x: f64) -> f64 {
    0.5 * libm::erfc(-x / std::f64::consts::SQRT_2)
}

/// δ(ε) of a μ-GDP mechanism (Dong, Roth & Su 2019; Balle & Wang 2018 Thm 8 with μ = Δ/σ):
/// δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2).
pub(crate) fn gdp_delta(mu: f64, epsilon: f64) -> f64 {
    if mu <= 0.0 {
        return 0.0;
    }
    let a = phi(-epsilon / mu + mu / 2.0);
    let b = phi(-epsilon / mu - mu / 2.0);
    // e^ε·Φ(·) can overflow to inf·0 for huge ε; then δ is Φ(…) ≈ 0 anyway.
    let eb = if b == 0.0 { 0.0 } else { (epsilon + b.ln()).exp() };
    (a - eb).max(0.0)
}

/// The smallest ε with δ(ε) ≤ δ for a μ-GDP mechanism (bisection; returns the upper end, so
/// the reported ε is never optimistic by more than 1e-12 relative).
pub fn gdp_epsilon(mu: f64, delta: f64) -> f64 {
    if mu <= 0.0 || gdp_delta(mu, 0.0) <= delta {
        return 0.0;
    }
    let mut hi = 1.0;
    while gdp_delta(mu, hi) > delta {
        hi *= 2.0;
        if hi > 1e6 {
            return f64::INFINITY;
        }
    }
    let mut lo = 0.0;
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if gdp_delta(mu, mid) > delta {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi - lo <= 1e-13 * hi {
            break;
        }
    }
    hi
}

/// The largest μ whose GDP curve satisfies (ε, δ) (bisection; returns the lower end).
pub fn gdp_mu_for(epsilon: f64, delta: f64) -> f64 {
    let mut lo = 0.0;
    let mut hi = 1.0;
    while gdp_delta(hi, epsilon) <= delta {
        hi *= 2.0;
        if hi > 1e6 {
            return f64::INFINITY;
        }
    }
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if gdp_delta(mid, epsilon) <= delta {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi - lo <= 1e-14 * hi {
            break;
        }
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phi_values() {
        assert!((phi(0.0) - 0.5).abs() < 1e-16);
        assert!((phi(1.0) - 0.8413447460685429).abs() < 1e-15);
        assert!((phi(-5.0) - 2.866515718791939e-7).abs() < 1e-20);
        assert!((phi(-30.0) - 4.906713927148187e-198).abs() < 1e-210);
    }

    #[test]
    fn exact_gdp_epsilon_matches_the_notes_table() {
        // Reference values, δ = 1e-5: (k, z) → exact GDP ε (Dong, Roth & Su 2019).
        for (k, z, eps) in [
            (1.0, 1.0, 4.3772),
            (1.0, 4.0, 0.9263),
            (10.0, 4.0, 3.3414),
            (10.0, 10.0, 1.1994),
            (100.0, 10.0, 4.3772),
            (100.0, 30.0, 1.2711),
        ] {
            let mu = f64::sqrt(k) / z;
            let e = gdp_epsilon(mu, 1e-5);
            assert!((e - eps).abs() < 6e-5, "k={k} z={z}: {e} vs {eps}");
        }
    }

    #[test]
    fn mu_for_inverts_epsilon() {
        for (eps, delta) in [(1.0, 1e-5), (0.1, 1e-6), (8.0, 1e-3)] {
            let mu = gdp_mu_for(eps, delta);
            assert!(gdp_delta(mu, eps) <= delta);
            assert!((gdp_epsilon(mu, delta) - eps).abs() < 1e-9 * eps.max(1.0));
        }
    }
}
