//! Kernel expressions: `se-ard`, `arccos0+poly3`, `(se+linear)*matern32`.
//!
//! Grammar (whitespace ignored): `expr = term ('+' term)*`, `term = atom ('*' atom)*`,
//! `atom = name | '(' expr ')'`, with the names of [`BaseKernel`]. Sums and products of the
//! base kernels are the ones Hughes-Hallett (2022, §2.1.3) compares ("a broader prior, a harder
//! optimisation").

use super::{
    ArcCosine, ArcCosineOrder, Constant, Kernel, Linear, Matern, MaternNu, Polynomial, Product, SquaredExponential, Sum,
};
use std::fmt;

/// The kernels an expression may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BaseKernel {
    /// `se`: squared exponential with one length-scale.
    Se,
    /// `se-ard`: squared exponential with one length-scale per input.
    SeArd,
    /// `matern12` (alias `exponential`), `matern32`, `matern52`: ARD Matérn. Our `exponential`
    /// is s² e^{−r/ℓ}, GPflow's `Matern12`; GPflow's own `Exponential` is s² e^{−r/(2ℓ)}, the
    /// same kernel at twice the length-scale (compare fitted ℓ accordingly).
    Matern(MaternNu),
    /// `linear`: Σ_d σ_d² x_d x'_d.
    Linear,
    /// `constant`: σ².
    Constant,
    /// `arccos0`, `arccos1`: arc-cosine kernels (ARD weight variances).
    ArcCosine(ArcCosineOrder),
    /// `polyP`, P ≥ 1: polynomial of degree P (ARD weight variances), e.g. `poly3`.
    Polynomial(u32),
}

/// Names accepted for base kernels (for error messages and help).
pub const KERNEL_NAMES: &str =
    "se, se-ard, matern12 (exponential), matern32, matern52, linear, constant, arccos0, arccos1, polyP (P ≥ 1)";

impl BaseKernel {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "se" => BaseKernel::Se,
            "se-ard" => BaseKernel::SeArd,
            "matern12" | "exponential" => BaseKernel::Matern(MaternNu::Half),
            "matern32" => BaseKernel::Matern(MaternNu::ThreeHalves),
            "matern52" => BaseKernel::Matern(MaternNu::FiveHalves),
            "linear" => BaseKernel::Linear,
            "constant" => BaseKernel::Constant,
            "arccos0" => BaseKernel::ArcCosine(ArcCosineOrder::Zero),
            "arccos1" => BaseKernel::ArcCosine(ArcCosineOrder::One),
            other => {
                let p: u32 = other.strip_prefix("poly")?.parse().ok()?;
                if p == 0 {
                    return None;
                }
                BaseKernel::Polynomial(p)
            }
        })
    }
}

/// A parsed kernel expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelSpec {
    Base(BaseKernel),
    Sum(Vec<KernelSpec>),
    Product(Vec<KernelSpec>),
}

/// Why a kernel expression was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelSpecError {
    #[error("kernel expression {expr:?} is empty")]
    Empty { expr: String },
    #[error("kernel expression {expr:?}: unknown kernel {name:?} at character {at} (known: {KERNEL_NAMES})")]
    Unknown { expr: String, name: String, at: usize },
    #[error("kernel expression {expr:?}: expected {expected} at character {at}")]
    Syntax { expr: String, expected: &'static str, at: usize },
    #[error("kernel expression {expr:?}: {what}")]
    Initial { expr: String, what: String },
}

/// Initial hyperparameters for [`KernelSpec::build`] (natural scale).
#[derive(Debug, Clone, PartialEq)]
pub struct KernelInit {
    /// The prior variance the whole kernel should start at (e.g. the variance of y).
    pub variance: f64,
    /// One length-scale per input dimension (ARD kernels take all, `se` their mean, the
    /// dot-product kernels weight variances 1/(D ℓ_d²)).
    pub lengthscales: Vec<f64>,
}

impl std::str::FromStr for KernelSpec {
    type Err = KernelSpecError;
    fn from_str(s: &str) -> Result<Self, KernelSpecError> {
        let tokens = tokenize(s)?;
        if tokens.is_empty() {
            return Err(KernelSpecError::Empty { expr: s.into() });
        }
        let mut p = Parser { expr: s, tokens, pos: 0 };
        let spec = p.expr()?;
        match p.tokens.get(p.pos) {
            None => Ok(spec),
            Some(t) => Err(p.syntax("'+', '*' or the end", t.at)),
        }
    }
}

impl fmt::Display for KernelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let join = |f: &mut fmt::Formatter<'_>, parts: &[KernelSpec], op: &str| -> fmt::Result {
            for (i, part) in parts.iter().enumerate() {
                if i > 0 {
                    f.write_str(op)?;
                }
                match (op, part) {
                    ("*", KernelSpec::Sum(_)) => write!(f, "({part})")?,
                    _ => write!(f, "{part}")?,
                }
            }
            Ok(())
        };
        match self {
            KernelSpec::Base(b) => f.write_str(&match b {
                BaseKernel::Se => "se".to_string(),
                BaseKernel::SeArd => "se-ard".to_string(),
                BaseKernel::Matern(MaternNu::Half) => "matern12".to_string(),
                BaseKernel::Matern(MaternNu::ThreeHalves) => "matern32".to_string(),
                BaseKernel::Matern(MaternNu::FiveHalves) => "matern52".to_string(),
                BaseKernel::Linear => "linear".to_string(),
                BaseKernel::Constant => "constant".to_string(),
                BaseKernel::ArcCosine(ArcCosineOrder::Zero) => "arccos0".to_string(),
                BaseKernel::ArcCosine(ArcCosineOrder::One) => "arccos1".to_string(),
                BaseKernel::Polynomial(p) => format!("poly{p}"),
            }),
            KernelSpec::Sum(parts) => join(f, parts, "+"),
            KernelSpec::Product(parts) => join(f, parts, "*"),
        }
    }
}

impl KernelSpec {
    /// Whether the expression contains the isotropic `se` (which takes one length-scale).
    pub fn has_isotropic(&self) -> bool {
        match self {
            KernelSpec::Base(b) => *b == BaseKernel::Se,
            KernelSpec::Sum(p) | KernelSpec::Product(p) => p.iter().any(KernelSpec::has_isotropic),
        }
    }

    /// A single squared-exponential kernel (se or se-ard), the kernel multiscale inducing
    /// features are defined for.
    pub fn is_squared_exponential(&self) -> bool {
        matches!(self, KernelSpec::Base(BaseKernel::Se | BaseKernel::SeArd))
    }

    /// Build the kernel with its prior variance at `init.variance`: a sum splits it equally
    /// among its terms; in a product the first factor carries it and the others start at
    /// variance 1. Polynomial kernels have no variance of their own and start at offset 1.
    pub fn build(&self, init: &KernelInit) -> Result<Box<dyn Kernel>, KernelSpecError> {
        let bad = |what: String| KernelSpecError::Initial { expr: self.to_string(), what };
        if !(init.variance.is_finite() && init.variance > 0.0) {
            return Err(bad(format!("initial variance must be positive and finite, got {}", init.variance)));
        }
        if init.lengthscales.is_empty() {
            return Err(bad("needs at least one input dimension".into()));
        }
        if let Some(l) = init.lengthscales.iter().find(|l| !(l.is_finite() && **l > 0.0)) {
            return Err(bad(format!("initial length-scales must be positive and finite, got {l}")));
        }
        Ok(self.build_with(init.variance, &init.lengthscales))
    }

    fn build_with(&self, v: f64, ls: &[f64]) -> Box<dyn Kernel> {
        let d = ls.len() as f64;
        let weights = || ls.iter().map(|l| 1.0 / (d * l * l)).collect::<Vec<f64>>();
        match self {
            KernelSpec::Base(b) => match *b {
                BaseKernel::Se => Box::new(SquaredExponential::isotropic(v, ls.iter().sum::<f64>() / d)),
                BaseKernel::SeArd => Box::new(SquaredExponential::ard(v, ls.to_vec())),
                BaseKernel::Matern(nu) => Box::new(Matern::ard(nu, v, ls.to_vec())),
                BaseKernel::Linear => Box::new(Linear::ard(weights().into_iter().map(|w| w * v).collect())),
                BaseKernel::Constant => Box::new(Constant::new(v)),
                BaseKernel::ArcCosine(order) => Box::new(ArcCosine::ard(order, v, weights(), 1.0)),
                BaseKernel::Polynomial(p) => Box::new(Polynomial::ard(p, weights(), 1.0)),
            },
            KernelSpec::Sum(parts) => {
                let share = v / parts.len() as f64;
                let mut it = parts.iter().map(|p| p.build_with(share, ls));
                let first = it.next().expect("a sum has terms");
                it.fold(first, |acc, k| Box::new(Sum::new(acc, k)))
            }
            KernelSpec::Product(parts) => {
                let mut it = parts.iter().enumerate().map(|(i, p)| p.build_with(if i == 0 { v } else { 1.0 }, ls));
                let first = it.next().expect("a product has factors");
                it.fold(first, |acc, k| Box::new(Product::new(acc, k)))
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Name(String),
    Plus,
    Star,
    Open,
    Close,
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    /// 1-based character position.
    at: usize,
}

fn tokenize(s: &str) -> Result<Vec<Token>, KernelSpecError> {
    let mut out = Vec::new();
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let tok = match c {
            c if c.is_whitespace() => {
                i += 1;
                continue;
            }
            '+' => Tok::Plus,
            '*' => Tok::Star,
            '(' => Tok::Open,
            ')' => Tok::Close,
            c if c.is_ascii_alphanumeric() => {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '-') {
                    i += 1;
                }
                let name: String = chars[start..i].iter().collect::<String>().to_ascii_lowercase();
                out.push(Token { tok: Tok::Name(name), at: start + 1 });
                continue;
            }
            _ => {
                return Err(KernelSpecError::Syntax {
                    expr: s.into(),
                    expected: "a kernel name, '+', '*', '(' or ')'",
                    at: i + 1,
                });
            }
        };
        out.push(Token { tok, at: i + 1 });
        i += 1;
    }
    Ok(out)
}

struct Parser<'a> {
    expr: &'a str,
    tokens: Vec<Token>,
    pos: usize,
}

impl Parser<'_> {
    fn syntax(&self, expected: &'static str, at: usize) -> KernelSpecError {
        KernelSpecError::Syntax { expr: self.expr.into(), expected, at }
    }
    fn end(&self) -> usize {
        self.expr.chars().count() + 1
    }
    fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.pos).map(|t| &t.tok)
    }
    fn expr(&mut self) -> Result<KernelSpec, KernelSpecError> {
        self.joined(Tok::Plus, Self::term, KernelSpec::Sum)
    }
    fn term(&mut self) -> Result<KernelSpec, KernelSpecError> {
        self.joined(Tok::Star, Self::atom, KernelSpec::Product)
    }
    /// `item (sep item)*`: one item as itself, several wrapped by `wrap`.
    fn joined(
        &mut self,
        sep: Tok,
        item: fn(&mut Self) -> Result<KernelSpec, KernelSpecError>,
        wrap: fn(Vec<KernelSpec>) -> KernelSpec,
    ) -> Result<KernelSpec, KernelSpecError> {
        let mut items = vec![item(self)?];
        while self.peek() == Some(&sep) {
            self.pos += 1;
            items.push(item(self)?);
        }
        Ok(if items.len() == 1 { items.pop().expect("one item") } else { wrap(items) })
    }
    fn atom(&mut self) -> Result<KernelSpec, KernelSpecError> {
        let Some(t) = self.tokens.get(self.pos).cloned() else {
            return Err(self.syntax("a kernel name or '('", self.end()));
        };
        self.pos += 1;
        match t.tok {
            Tok::Name(name) => BaseKernel::parse(&name).map(KernelSpec::Base).ok_or(KernelSpecError::Unknown {
                expr: self.expr.into(),
                name,
                at: t.at,
            }),
            Tok::Open => {
                let inner = self.expr()?;
                match self.tokens.get(self.pos) {
                    Some(Token { tok: Tok::Close, .. }) => {
                        self.pos += 1;
                        Ok(inner)
                    }
                    Some(t) => Err(self.syntax("')'", t.at)),
                    None => Err(self.syntax("')'", self.end())),
                }
            }
            _ => Err(self.syntax("a kernel name or '('", t.at)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nalgebra::DMatrix;

    fn parse(s: &str) -> KernelSpec {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn expressions_parse_with_precedence_and_print_back() {
        use BaseKernel::*;
        assert_eq!(parse("se-ard"), KernelSpec::Base(SeArd));
        assert_eq!(parse("Exponential"), KernelSpec::Base(Matern(MaternNu::Half)));
        // `exponential` is GPflow's Matern12, s² e^{−r/ℓ}: GPflow's `Exponential`, s² e^{−r/(2ℓ)},
        // matches it at half our length-scale (the README says so).
        let k = parse("exponential").build(&KernelInit { variance: 1.5, lengthscales: vec![0.8] }).unwrap();
        let (a, b) = (DMatrix::from_row_slice(1, 1, &[0.3]), DMatrix::from_row_slice(1, 1, &[1.5]));
        let r = (1.5f64 - 0.3).abs();
        let ours = k.k(a.as_view(), b.as_view())[(0, 0)];
        assert!((ours - 1.5 * (-r / 0.8).exp()).abs() < 1e-14, "Matern12 at ℓ = 0.8: {ours}");
        assert!((ours - 1.5 * (-0.5 * r / 0.4).exp()).abs() < 1e-14, "GPflow Exponential at ℓ = 0.4");
        assert_eq!(
            parse("arccos0 + poly3"),
            KernelSpec::Sum(vec![KernelSpec::Base(ArcCosine(ArcCosineOrder::Zero)), KernelSpec::Base(Polynomial(3))])
        );
        // '*' binds tighter than '+'.
        let s = parse("se+linear*constant");
        assert_eq!(
            s,
            KernelSpec::Sum(vec![
                KernelSpec::Base(Se),
                KernelSpec::Product(vec![KernelSpec::Base(Linear), KernelSpec::Base(Constant)])
            ])
        );
        for e in ["se+linear*constant", "(se+linear)*matern32", "arccos1+poly3+se-ard", "poly12"] {
            assert_eq!(parse(e).to_string(), e);
            assert_eq!(parse(&parse(e).to_string()), parse(e));
        }
    }

    #[test]
    fn bad_expressions_say_where_and_why() {
        let err = |s: &str| s.parse::<KernelSpec>().unwrap_err().to_string();
        assert!(err("").contains("empty"));
        assert!(err("se+rbf").contains("unknown kernel \"rbf\" at character 4"), "{}", err("se+rbf"));
        assert!(err("poly0").contains("unknown kernel \"poly0\""));
        assert!(err("se+").contains("expected a kernel name or '(' at character 4"), "{}", err("se+"));
        assert!(err("(se+linear").contains("expected ')'"));
        assert!(err("se linear").contains("expected '+', '*' or the end at character 4"));
        assert!(err("se/linear").contains("character 3"));
        assert!(err("se)").contains("character 3"));
    }

    #[test]
    fn built_kernels_start_at_the_requested_variance() {
        let init = KernelInit { variance: 2.0, lengthscales: vec![1.0, 1.0] };
        let x = DMatrix::from_row_slice(3, 2, &[0.0, 0.0, 0.5, -0.2, 1.0, 1.0]);
        // At x = 0 the stationary terms carry the variance; a sum splits it.
        let k = parse("se-ard+matern52").build(&init).unwrap();
        assert!((k.diag(x.rows(0, 1))[0] - 2.0).abs() < 1e-12);
        assert_eq!(k.n_params(), 6);
        let k = parse("se*constant").build(&init).unwrap();
        assert!((k.diag(x.rows(0, 1))[0] - 2.0).abs() < 1e-12);
        // Arc-cosine order 0 has k(x, x) = s² everywhere.
        let k = parse("arccos0").build(&init).unwrap();
        assert!(k.diag(x.as_view()).iter().all(|v| (v - 2.0).abs() < 1e-12));
        assert_eq!(k.param_names(), ["variance", "weight_variance[0]", "weight_variance[1]", "bias_variance"]);
        // Polynomials start at offset 1: (Σ w x² + 1)^p with w = 1/(D ℓ²).
        let k = parse("poly3").build(&init).unwrap();
        assert!((k.diag(x.rows(2, 1))[0] - 8.0).abs() < 1e-12);
        assert!(parse("se").has_isotropic() && !parse("se-ard*linear").has_isotropic());
        assert!(parse("se").is_squared_exponential() && parse("(se-ard)").is_squared_exponential());
        assert!(!parse("se+se").is_squared_exponential() && !parse("matern52").is_squared_exponential());
        for bad in [
            KernelInit { variance: -1.0, lengthscales: vec![1.0] },
            KernelInit { variance: 1.0, lengthscales: vec![] },
            KernelInit { variance: 1.0, lengthscales: vec![f64::NAN] },
        ] {
            assert!(matches!(parse("se").build(&bad), Err(KernelSpecError::Initial { .. })));
        }
    }
}
