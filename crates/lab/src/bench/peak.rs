//! The machine's fused multiply-add peak: independent FMA chains held in registers on every
//! core, nothing loaded or stored. No f64 product can run faster on this machine, so a bound
//! computed from it (a step's flops at this rate) is the hardware's, not a library's: the best
//! GEMM measured is a share of it, and a ratio to another library above "their time ÷ our flops
//! at this rate" is impossible here whatever the code.

use std::time::Instant;

/// Independent accumulators per core: at least an FMA's latency times the FMA pipes of current
/// x86 cores (4 cycles × 2), so that the chains, not their latency, fill the pipes.
const CHAINS: usize = 12;
/// Iterations per timed run (12 FMAs each): 0.03–0.1 s on a current core.
const ITERS: usize = 20_000_000;

/// The peak measured: its rate on all cores and on one, and the instructions that reached it.
#[derive(Debug, Clone, Copy)]
pub struct FmaPeak {
    /// GFLOP/s on every core at once (an FMA counts as two flops).
    pub gflops: f64,
    /// GFLOP/s on one core.
    pub one_core_gflops: f64,
    /// The widest FMA the CPU has: "avx512f" (8 lanes) or "avx2+fma" (4 lanes).
    pub isa: &'static str,
    /// The threads of the all-core measurement: one per logical CPU (`available_parallelism`).
    pub threads: usize,
}

/// `fn $name(iters) -> f64`: the chains on one register type (`$lanes` f64 each) with the
/// target features `$features`; returns the sum of every lane, so the work cannot be dropped.
macro_rules! chains {
    ($name:ident, $features:literal, $lanes:literal, $set1:ident, $fmadd:ident, $storeu:ident) => {
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $features)]
        fn $name(iters: usize) -> f64 {
            use std::arch::x86_64::*;
            let mut acc = [$set1(1.0); CHAINS];
            let (b, c) = ($set1(0.999_999), $set1(1e-7));
            for _ in 0..iters {
                for v in &mut acc {
                    *v = $fmadd(*v, b, c);
                }
            }
            let mut lanes = [0.0; $lanes];
            acc.iter()
                .map(|v| {
                    // SAFETY: `lanes` holds the f64 of one register.
                    unsafe { $storeu(lanes.as_mut_ptr(), *v) };
                    lanes.iter().sum::<f64>()
                })
                .sum()
        }
    };
}
chains!(chains_avx512, "avx512f", 8, _mm512_set1_pd, _mm512_fmadd_pd, _mm512_storeu_pd);
chains!(chains_avx2, "avx2,fma", 4, _mm256_set1_pd, _mm256_fmadd_pd, _mm256_storeu_pd);

/// An FMA path: its name, its f64 lanes, and one run of `iters` iterations of the chains.
type Path = (&'static str, usize, fn(usize) -> f64);

/// The widest FMA path this CPU runs.
fn widest() -> Option<Path> {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F, the only feature the function is compiled for.
            return Some(("avx512f", 8, |n| unsafe { chains_avx512(n) }));
        }
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has AVX2 and FMA, the features the function is compiled for.
            return Some(("avx2+fma", 4, |n| unsafe { chains_avx2(n) }));
        }
    }
    None
}

/// Best of `reps` runs of `threads` threads started together: GFLOP/s of all of them.
fn rate(threads: usize, lanes: usize, run: fn(usize) -> f64, reps: usize) -> f64 {
    let flops = (threads * ITERS * CHAINS * lanes * 2) as f64;
    let mut best = 0.0_f64;
    for _ in 0..reps.max(1) {
        let barrier = std::sync::Barrier::new(threads);
        let t = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    barrier.wait();
                    std::hint::black_box(run(std::hint::black_box(ITERS)))
                });
            }
        });
        best = best.max(flops / t.elapsed().as_secs_f64() / 1e9);
    }
    best
}

/// The FMA peak of this machine (one thread per logical CPU, and one thread), or `None` on a
/// CPU without a vector FMA this measurement knows (it covers x86-64's AVX2+FMA and AVX-512F).
/// Anything else running lowers it: the caller warns when it reads below a GEMM.
pub fn measure(reps: usize) -> Option<FmaPeak> {
    let (isa, lanes, run) = widest()?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    Some(FmaPeak { gflops: rate(threads, lanes, run, reps), one_core_gflops: rate(1, lanes, run, reps), isa, threads })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chains compute what they claim: twelve FMA recurrences v ← 0.999999·v + 1e-7 from
    /// v = 1, so that the timed loop is real arithmetic the compiler cannot drop or fold.
    #[test]
    fn the_chains_compute_the_recurrence() {
        let Some((_, lanes, run)) = widest() else { return };
        let iters = 1000;
        let mut v = 1.0_f64;
        for _ in 0..iters {
            v = v.mul_add(0.999_999, 1e-7);
        }
        let want = v * (CHAINS * lanes) as f64;
        let got = run(iters);
        assert!((got - want).abs() <= 1e-12 * want, "{got} vs {want}");
    }
}
