#!/bin/sh
# Every figure of docs/results.md's "The eleventh pass" in one command (about 45 minutes on 2 cores):
# on the two data sets of prep.py (never used before this pass), 4 view splits (specs.sh), masked, n_obs 100 and 400,
# 10 splits x 5 node seeds, fixed-4 starts, eps = 1: the product's defaults of the time (--unseen-covariates free since D39), the narrower label range, the tenth
# pass's candidate (label range +-2 with the value rule K = 0.3), the value rule weighed on the undiscounted variance
# (K = 0.3 and 0.1), the release model's noise variance 1, the θ vote, the true-label floor, on star five counterfactuals (own theta; the decline rule; the answer check; tempering; the posterior reading), the private
# fit under four start rules (D38), where the harm is (splits.py, where.py), the fitted noise (noise.sh) and the
# public-mean counterfactual;
# each summary and verdict rewritten in place (compare with git diff). Run from the repository root with the lab
# binary built (cargo build --release -p dpcotrain-lab):
#   sh docs/results/harm-study/eleventh/all.sh OUT_DIR
set -e
OUT=${1:?usage: all.sh OUT_DIR}
unset THETAS EXTRA UNSEEN  # the runs below set what they need (UNSEEN: free in node-seeds/run.sh, the default then)
HERE=docs/results/harm-study/eleventh
NS=docs/results/harm-study/node-seeds
. $HERE/specs.sh
run() {  # run NAME EXTRA: the four view splits under EXTRA, then summarise.py's table and verdict.py's check
  FIT=fixed-4 EXTRA="$2" sh $NS/run.sh $OUT/$1
  python3 $NS/summarise.py $OUT/$1 fixed-4 > $HERE/summary-$1.txt
  python3 $HERE/verdict.py $OUT/$1 fixed-4 $OUT/floor $OUT/default > $HERE/verdict-$1.txt
}
FIT=fixed-4 sh $NS/floor.sh $OUT/floor > $HERE/summary-floor.txt
run default ""  # first: every verdict takes its no-DP gains from it
run label-range-2 "--label-range=-2,2"
run label-range-2-min-value-0.3 "--label-range=-2,2 --answer-min-value 0.3"
for K in 0.3 0.1; do
  run label-range-2-min-value-$K-undiscounted "--label-range=-2,2 --answer-min-value $K --answer-min-value-basis undiscounted"
done
run release-theta-noise-1 "--release-theta 1,1,1"
THETAS=select; export THETAS; run theta-vote ""; unset THETAS
D=$HERE/data
SPECS="$D/star.csv treadssk,small,aide,totexpk girl,freelunk,white;$D/star.csv treadssk,aide,girl,white small,totexpk,freelunk"
for c in "refit-own --refit-theta own" "decline-1 --decline-ratio 1" "check-2 --answer-check 2" "temper-3 --answer-temper 3" "answers-posterior --answers posterior"; do  # the view splits are numbered star-v1, v2 here (v3, v4 above)
  set -- $c; name=star-$1; shift
  FIT=fixed-4 EXTRA="$*" sh $NS/run.sh $OUT/$name
  python3 $NS/summarise.py $OUT/$name fixed-4 > $HERE/summary-$name.txt
done
# The private fit's starts (D38): the alone spread between node seeds and the mean alone RMSE under
# best-of-4 (the default before D38), fixed-4 (the default since: the "default" run above), fixed-8 and fixed-16.
. $HERE/specs.sh
for F in best-of-4 fixed-8 fixed-16; do
  FIT=$F sh $NS/run.sh $OUT/fits
  python3 $NS/summarise.py $OUT/fits $F > $HERE/summary-fits-$F.txt
done
ln -sfn ../default/fixed-4 $OUT/fits/fixed-4
python3 $NS/alone.py $OUT/fits best-of-4 fixed-4 fixed-8 fixed-16 > $HERE/alone.txt
# Star's first split at n = 100, party A, split by split; each party's fitted noise variance.
python3 $HERE/splits.py $OUT/default/fixed-4/star-v3 100 A > $HERE/splits-star-v3-100-A.txt
python3 $HERE/splits.py $OUT/default/fixed-4/star-v3 100 B > $HERE/splits-star-v3-100-B.txt
python3 $HERE/where.py $OUT/floor/floor-fixed-4/star-v3.jsonl 100 A 0 6 8 > $HERE/where-star-v3-100-A.txt
sh $HERE/noise.sh $OUT/noise > $HERE/noise.txt
# The public-mean counterfactual: every answer's mean set to the public mean of y (floor.sh's traces with
# --trace-oracle public-mean; the view splits are numbered star-v1, v2, schooling-v3, v4 here).
D=$HERE/data
SPECS="$D/star.csv treadssk,small,aide,totexpk girl,freelunk,white;$D/star.csv treadssk,aide,girl,white small,totexpk,freelunk;$D/schooling.csv ed76,exp76,kww,black south76,smsa76,momed,daded;$D/schooling.csv ed76,kww,south76,momed exp76,black,smsa76,daded"
FIT=fixed-4 EXTRA="--trace-oracle public-mean" sh $NS/floor.sh $OUT/public-mean > /dev/null
python3 $HERE/public_mean.py $OUT/public-mean/floor-fixed-4 > $HERE/public-mean.txt
