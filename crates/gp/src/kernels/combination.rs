//! Sums and products of two kernels.

use super::tiling::{check_grad_shape, update_columns};
use super::{Bounds, Kernel, KernelGrad};
use nalgebra::{DMatrix, DMatrixView, DVector, DVectorView};

/// The two factors / terms of a combination; parameters are a's followed by b's.
#[derive(Debug, Clone)]
struct Pair {
    a: Box<dyn Kernel>,
    b: Box<dyn Kernel>,
}

impl Pair {
    fn new(op: &str, a: Box<dyn Kernel>, b: Box<dyn Kernel>) -> Self {
        if let (Some(da), Some(db)) = (a.input_dim(), b.input_dim()) {
            assert_eq!(da, db, "kernel {op}({},{}): input dimensions {da} and {db} differ", a.name(), b.name());
        }
        Self { a, b }
    }
    fn name(&self, op: &str) -> String {
        format!("{op}({},{})", self.a.name(), self.b.name())
    }
    fn n_params(&self) -> usize {
        self.a.n_params() + self.b.n_params()
    }
    fn params(&self) -> Vec<f64> {
        [self.a.params(), self.b.params()].concat()
    }
    fn set_params(&mut self, p: &[f64]) {
        assert_eq!(p.len(), self.n_params(), "kernel combination: wrong number of parameters");
        let (pa, pb) = p.split_at(self.a.n_params());
        self.a.set_params(pa);
        self.b.set_params(pb);
    }
    /// `"<child>.<param>"`, with `#1` / `#2` after the child names when they are equal.
    fn param_names(&self) -> Vec<String> {
        let (na, nb) = (self.a.name(), self.b.name());
        let (na, nb) = if na == nb { (format!("{na}#1"), format!("{nb}#2")) } else { (na, nb) };
        let a = self.a.param_names().into_iter().map(|p| format!("{na}.{p}"));
        let b = self.b.param_names().into_iter().map(|p| format!("{nb}.{p}"));
        a.chain(b).collect()
    }
    fn bounds(&self) -> Vec<Bounds> {
        [self.a.bounds(), self.b.bounds()].concat()
    }
    fn set_bounds(&mut self, bounds: &[Bounds]) {
        assert_eq!(bounds.len(), self.n_params(), "kernel combination: wrong number of bounds");
        let (ba, bb) = bounds.split_at(self.a.n_params());
        self.a.set_bounds(ba);
        self.b.set_bounds(bb);
    }
    fn input_dim(&self) -> Option<usize> {
        self.a.input_dim().or(self.b.input_dim())
    }
    /// Concatenates the parameter gradients and adds the input gradients.
    fn merge(ga: KernelGrad, gb: KernelGrad) -> KernelGrad {
        let x1 = match (ga.x1, gb.x1) {
            (Some(xa), Some(xb)) => Some(xa + xb),
            (xa, xb) => xa.or(xb),
        };
        KernelGrad { params: [ga.params, gb.params].concat(), x1 }
    }
}

/// M ← M∘A for a (possibly strided) view A of the same shape.
fn hadamard_assign(m: &mut DMatrix<f64>, a: &DMatrixView<'_, f64>) {
    let n1 = m.nrows();
    update_columns(m, |j0, block| {
        for (j, col) in (j0..).zip(block.chunks_exact_mut(n1)) {
            col.iter_mut().zip(a.column(j).iter()).for_each(|(o, &v)| *o *= v);
        }
    })
}

/// Sum of two kernels
///
/// k(x, x') = k_a(x, x') + k_b(x, x').
///
/// Name `"sum(<a>,<b>)"`; parameters are a's followed by b's, named `"<a>.<param>"`, …
#[derive(Debug, Clone)]
pub struct Sum(Pair);

impl Sum {
    /// Panics if both kernels fix different input dimensions.
    pub fn new(a: Box<dyn Kernel>, b: Box<dyn Kernel>) -> Self {
        Self(Pair::new("sum", a, b))
    }
    /// The two terms.
    pub fn parts(&self) -> (&dyn Kernel, &dyn Kernel) {
        (&*self.0.a, &*self.0.b)
    }
}

/// Product of two kernels
///
/// k(x, x') = k_a(x, x') · k_b(x, x').
///
/// Name `"product(<a>,<b>)"`; parameters are a's followed by b's, named `"<a>.<param>"`, …
#[derive(Debug, Clone)]
pub struct Product(Pair);

impl Product {
    /// Panics if both kernels fix different input dimensions.
    pub fn new(a: Box<dyn Kernel>, b: Box<dyn Kernel>) -> Self {
        Self(Pair::new("product", a, b))
    }
    /// The two factors.
    pub fn parts(&self) -> (&dyn Kernel, &dyn Kernel) {
        (&*self.0.a, &*self.0.b)
    }
}

/// Implements the parameter bookkeeping of the trait by delegation to `Pair`.
macro_rules! delegate_params {
    ($op:literal) => {
        fn name(&self) -> String {
            self.0.name($op)
        }
        fn n_params(&self) -> usize {
            self.0.n_params()
        }
        fn params(&self) -> Vec<f64> {
            self.0.params()
        }
        fn set_params(&mut self, p: &[f64]) {
            self.0.set_params(p)
        }
        fn param_names(&self) -> Vec<String> {
            self.0.param_names()
        }
        fn bounds(&self) -> Vec<Bounds> {
            self.0.bounds()
        }
        fn set_bounds(&mut self, b: &[Bounds]) {
            self.0.set_bounds(b)
        }
        fn input_dim(&self) -> Option<usize> {
            self.0.input_dim()
        }
        fn clone_box(&self) -> Box<dyn Kernel> {
            Box::new(self.clone())
        }
    };
}

impl Kernel for Sum {
    delegate_params!("sum");

    fn k(&self, x1: DMatrixView<'_, f64>, x2: DMatrixView<'_, f64>) -> DMatrix<f64> {
        self.0.a.k(x1, x2) + self.0.b.k(x1, x2)
    }
    fn diag(&self, x: DMatrixView<'_, f64>) -> DVector<f64> {
        self.0.a.diag(x) + self.0.b.diag(x)
    }
    fn vjp(
        &self,
        x1: DMatrixView<'_, f64>,
        x2: DMatrixView<'_, f64>,
        g: DMatrixView<'_, f64>,
        want_x1: bool,
    ) -> KernelGrad {
        let ga = self.0.a.vjp(x1, x2, g, want_x1);
        Pair::merge(ga, self.0.b.vjp(x1, x2, g, want_x1))
    }
    fn diag_vjp(&self, x: DMatrixView<'_, f64>, g: DVectorView<'_, f64>) -> Vec<f64> {
        [self.0.a.diag_vjp(x, g), self.0.b.diag_vjp(x, g)].concat()
    }
}

impl Kernel for Product {
    delegate_params!("product");

    fn k(&self, x1: DMatrixView<'_, f64>, x2: DMatrixView<'_, f64>) -> DMatrix<f64> {
        let mut k = self.0.a.k(x1, x2);
        hadamard_assign(&mut k, &self.0.b.k(x1, x2).as_view());
        k
    }
    fn diag(&self, x: DMatrixView<'_, f64>) -> DVector<f64> {
        self.0.a.diag(x).component_mul(&self.0.b.diag(x))
    }
    /// ⟨G, K_a∘K_b⟩: a receives G∘K_b and b receives G∘K_a.
    fn vjp(
        &self,
        x1: DMatrixView<'_, f64>,
        x2: DMatrixView<'_, f64>,
        g: DMatrixView<'_, f64>,
        want_x1: bool,
    ) -> KernelGrad {
        check_grad_shape(&self.name(), &g, x1.nrows(), x2.nrows());
        let (mut ka, mut kb) = (self.0.a.k(x1, x2), self.0.b.k(x1, x2));
        hadamard_assign(&mut kb, &g);
        let ga = self.0.a.vjp(x1, x2, kb.as_view(), want_x1);
        drop(kb);
        hadamard_assign(&mut ka, &g);
        let gb = self.0.b.vjp(x1, x2, ka.as_view(), want_x1);
        Pair::merge(ga, gb)
    }
    fn diag_vjp(&self, x: DMatrixView<'_, f64>, g: DVectorView<'_, f64>) -> Vec<f64> {
        let (da, db) = (self.0.a.diag(x), self.0.b.diag(x));
        let pa = self.0.a.diag_vjp(x, g.component_mul(&db).as_view());
        [pa, self.0.b.diag_vjp(x, g.component_mul(&da).as_view())].concat()
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::super::{Constant, Linear, Matern, MaternNu, SquaredExponential};
    use super::*;
    use nalgebra::dmatrix;

    fn sum() -> Sum {
        let se = SquaredExponential::ard(1.2, vec![0.7, 1.1, 1.9]);
        Sum::new(Box::new(se), Box::new(Linear::isotropic(0.4)))
    }

    fn product() -> Product {
        let m = Matern::ard(MaternNu::FiveHalves, 0.9, vec![0.8, 1.3, 0.6]);
        Product::new(Box::new(m), Box::new(Constant::new(2.5)))
    }

    #[test]
    fn sum_gradients_and_properties() {
        check_all(&sum(), 3, 60);
    }

    #[test]
    fn product_gradients_and_properties() {
        check_all(&product(), 3, 61);
        // A product whose factors both depend on the parameters and the inputs.
        let p = Product::new(Box::new(SquaredExponential::isotropic(1.1, 0.9)), Box::new(Linear::isotropic(0.7)));
        check_all(&p, 3, 62);
    }

    #[test]
    fn combination_hand_values() {
        let (x, y) = (dmatrix![1.0, 2.0, 3.0], dmatrix![0.0, 0.0, 3.5]);
        let k = Sum::new(Box::new(SquaredExponential::ard(1.5, vec![1.0, 2.0, 0.5])), Box::new(Linear::isotropic(2.0)));
        // 1.5 e^{-1.5} + 2 (1·0 + 2·0 + 3·3.5)
        assert_close(k.k(x.as_view(), y.as_view())[(0, 0)], 0.33469524022264474 + 21.0, 0.0, "sum");
        let k = Product::new(
            Box::new(Matern::ard(MaternNu::FiveHalves, 1.0, vec![1.0, 2.0])),
            Box::new(Constant::new(3.0)),
        );
        let (x, y) = (dmatrix![0.0, 0.0], dmatrix![0.6, 1.6]);
        assert_close(k.k(x.as_view(), y.as_view())[(0, 0)], 3.0 * 0.5239941088318203, 0.0, "product");
    }

    #[test]
    fn combination_metadata() {
        let s = sum();
        assert_eq!((s.name(), s.n_params(), s.input_dim()), ("sum(se-ard,linear)".into(), 5, Some(3)));
        assert_eq!(s.param_names()[0], "se-ard.variance");
        assert_eq!(s.param_names()[4], "linear.variance");
        let p = product();
        assert_eq!(p.name(), "product(matern52-ard,constant)");
        let twin = Sum::new(Box::new(Constant::new(1.0)), Box::new(Constant::new(2.0)));
        assert_eq!(twin.param_names(), ["constant#1.variance", "constant#2.variance"]);
        let mut s = s;
        let mut b = s.bounds();
        b[4] = Bounds::new(-3.0, 3.0);
        s.set_bounds(&b);
        assert_eq!(s.parts().1.bounds(), vec![Bounds::new(-3.0, 3.0)]);
        assert_eq!(s.parts().0.bounds().len(), 4);
    }

    #[test]
    #[should_panic(expected = "input dimensions 3 and 2 differ")]
    fn combination_rejects_mismatched_dimensions() {
        let a = Box::new(SquaredExponential::ard(1.0, vec![1.0; 3]));
        Sum::new(a, Box::new(Linear::ard(vec![1.0; 2])));
    }

    #[test]
    fn combination_parallel_is_deterministic_and_exact() {
        let se = |a: &[f64], b: &[f64]| {
            let ls = [0.7, 1.1, 1.9];
            1.2 * (-0.5 * (0..3).map(|d| ((a[d] - b[d]) / ls[d]).powi(2)).sum::<f64>()).exp()
        };
        check_parallel(&sum(), 3, move |a, b| se(a, b) + 0.4 * (0..3).map(|d| a[d] * b[d]).sum::<f64>());
        let m52 = |a: &[f64], b: &[f64]| {
            let ls = [0.8, 1.3, 0.6];
            let r2: f64 = (0..3).map(|d| ((a[d] - b[d]) / ls[d]).powi(2)).sum();
            let r = r2.sqrt();
            0.9 * (1.0 + 5f64.sqrt() * r + 5.0 * r2 / 3.0) * (-(5f64.sqrt()) * r).exp()
        };
        check_parallel(&product(), 3, move |a, b| 2.5 * m52(a, b));
    }
}
