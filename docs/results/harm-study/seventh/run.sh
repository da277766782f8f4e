#!/bin/sh
# The harm study's seventh pass (docs/results.md): the functional reading of a release against the
# point-by-point likelihood reading, and the true-label floor of the hurt test at 40 seeds, on the
# three masked real data sets (CCPP, Bikeshare, Wage), n = 100 and 400, ε = 1.
#   sh docs/results/harm-study/seventh/run.sh        (about 8 minutes on 2 cores)
# DPCOTRAIN_LAB overrides the lab binary (../masked.sh says which commands exit non-zero, as expected).
. "$(cd "$(dirname "$0")" && pwd)/../masked.sh"
# The default (likelihood reading, answers discounted by 30σ̂², D30) is ../sixth/default.jsonl.
run functionals --answers functionals
run functionals-reported --answers functionals --answer-noise reported
run likelihood-reported --answer-noise reported
for a in likelihood functionals; do
  frontier --data ccpp-masked --nobs 100 --seeds 20 --epsilons 1 --mechanisms finite+cap \
    --thetas public --json --answers $a --rank full > "$here/ccpp100-$a-rankfull.jsonl" 2>/dev/null || true
done
# Two nearly identical views (simulated, r = 0.99): is it the views' difference?
for a in likelihood functionals; do
  frontier --data sim-masked --r 0.99 --nobs 100,400 --seeds 20 --epsilons 1 --mechanisms finite+cap \
    --thetas public --json --answers $a > "$here/sim099-$a.jsonl" 2>/dev/null || true
done
# The true labels of the asked entities, fitted as the party's own rows: the hurt test's floor.
tmp=$(mktemp -d)
frontier --data $data --nobs 100,400 --seeds 40 --epsilons 1 --mechanisms finite+cap \
  --thetas public --trace "$tmp/trace.jsonl" --trace-oracle answer-error > /dev/null 2>&1 || true
python3 "$here/../oracles.py" "$tmp/trace.jsonl" | sed "s|$tmp/trace.jsonl|TRACE (seeds 0–39)|" > "$here/labels40.txt"
rm -rf "$tmp"
# D32: the release's length-scale in the median unit (ℓ = √(2D)).
(LENGTHSCALE=median; run median)
# Around it: the public noise variance 0.3 and 0.03, and 1.5 × √(2D).
(LENGTHSCALE=median; run median-noise0.3 --release-theta 1,1,0.3)
(LENGTHSCALE=median; run median-noise0.03 --release-theta 1,1,0.03)
(LENGTHSCALE=median; run median-x1.5 --release-theta 1,1.5,0.1)
for l in 2 3 5; do run abs-l$l --release-theta 1,$l,0.1; done
# ℓ = √D, per data set (CCPP's views have two covariates, Bikeshare's and Wage's three).
(frontier --data ccpp-masked --nobs 100,400 --seeds 20 --epsilons 1 --mechanisms finite+cap --thetas public \
   --release-theta 1,1.4142,0.1 --json 2>/dev/null || true
 frontier --data bikeshare-masked,wage-masked --nobs 100,400 --seeds 20 --epsilons 1 --mechanisms finite+cap \
   --thetas public --release-theta 1,1.7321,0.1 --json 2>/dev/null || true) > "$here/abs-sqrtd.jsonl"
(LENGTHSCALE=median; frontier --data $data --nobs 100,400 --seeds 40 --epsilons 1 --mechanisms finite+cap \
  --thetas public --json > "$here/seeds40-median.jsonl" 2>/dev/null || true)
for r in 0.9 0.99; do
  for u in absolute median; do
    (LENGTHSCALE=$u; frontier --data sim-masked,sim-unmasked --r $r --nobs 100,400 --seeds 20 --epsilons 1 \
      --mechanisms finite+cap --thetas public --json > "$here/sim$r-$u.jsonl" 2>/dev/null || true)
  done
done
root=$here/../../../..
for set in unseen unseen400; do
  out=$(mktemp -d)
  (cd "$root" && BIN=$bin LENGTHSCALE=median VS=own:30 sh docs/results/harm-study/$set/run.sh "$out" > /dev/null 2>&1 || true)
  cp "$out/cells-own-30.jsonl" "$here/$set-median.jsonl"
  rm -rf "$out"
done
python3 "$here/table.py"
