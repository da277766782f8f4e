//! Numbers as people read them: one minus sign (U+2212 "−", never the ASCII hyphen) in every
//! figure a report, table or command prints, so that "−0.079" and "-0.011" never stand side by
//! side, and negative zero prints as "0".

/// `x` with `decimals` decimals and "−" for a negative value ("−0.079", "0.312"); a value that
/// rounds to zero prints without a sign; non-finite values print as "NaN", "∞" or "−∞".
pub fn minus(x: f64, decimals: usize) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "∞".into() } else { "−∞".into() };
    }
    let s = format!("{:.*}", decimals, x.abs());
    if x < 0.0 && s.chars().any(|c| c.is_ascii_digit() && c != '0') { format!("−{s}") } else { s }
}

/// Like [`minus`], with "+" in front of a positive value ("+0.003", "−0.021", "0.000"): for a
/// change, where the sign is the news.
pub fn signed(x: f64, decimals: usize) -> String {
    let s = minus(x, decimals);
    if x > 0.0 && s.chars().any(|c| c.is_ascii_digit() && c != '0') && x.is_finite() { format!("+{s}") } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_minus_sign() {
        assert_eq!(minus(-0.0789, 3), "−0.079");
        assert_eq!(minus(0.0789, 3), "0.079");
        assert_eq!(minus(-0.0004, 3), "0.000", "rounds to zero: no sign");
        assert_eq!(minus(-0.0, 2), "0.00");
        assert_eq!(minus(-1025.5, 0), "−1026");
        assert_eq!(minus(f64::NAN, 2), "NaN");
        assert_eq!(minus(f64::NEG_INFINITY, 2), "−∞");
        assert_eq!(signed(0.0031, 3), "+0.003");
        assert_eq!(signed(-0.0214, 3), "−0.021");
        assert_eq!(signed(0.0, 3), "0.000");
        assert_eq!(signed(0.00001, 3), "0.000");
        assert_eq!(signed(f64::INFINITY, 1), "∞");
        for x in [-12.345, -0.5, 0.25, 3.0] {
            assert!(!signed(x, 2).contains('-') && !minus(x, 2).contains('-'), "{x}");
        }
    }
}
