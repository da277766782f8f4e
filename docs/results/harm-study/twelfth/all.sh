#!/bin/sh
# Every figure of docs/results.md's "The twelfth pass" in one command (about 50 minutes on 2 cores): on the two
# data sets of prep.py (never used before this pass) and again on the eleventh pass's, 4 view splits each, masked,
# n_obs 100 and 400, 10 splits x 5 node seeds, fixed-4 starts, eps = 1, --unseen-covariates free (the default then, D39): the true-label floor (whose traces record
# each party's hyperparameters before and after the re-fit: moves.py), the product's defaults, and the re-fit rules
# of the pass (--refit-theta augmented-no-shorter, augmented-tested, augmented-amplitude, augmented-within-own,
# augmented-hold-constant; --unseen-covariates median), each with summarise.py's table and verdict.py's check;
# which covariates are constant on each party's rows (constant.py) and, run by run, the hyperparameters of the
# parties that have one (theta.py). Each file is rewritten in place (compare with git diff). Run from the repository root with the lab binary built (cargo build --release -p dpcotrain-lab):
#   sh docs/results/harm-study/twelfth/all.sh OUT_DIR
set -e
OUT=${1:?usage: all.sh OUT_DIR}
unset THETAS EXTRA UNSEEN
HERE=docs/results/harm-study/twelfth
NS=docs/results/harm-study/node-seeds
VERDICT=docs/results/harm-study/eleventh/verdict.py
for set in twelfth eleventh; do
  . docs/results/harm-study/$set/specs.sh
  O=$OUT/$set
  FIT=fixed-4 sh $NS/floor.sh $O/floor > $HERE/summary-$set-floor.txt
  python3 $HERE/moves.py $O/floor/floor-fixed-4 > $HERE/moves-$set.txt
  # Under --unseen-covariates median the alone fit differs: its floor is measured with it.
  FIT=fixed-4 UNSEEN=median sh $NS/floor.sh $O/floor-unseen-median > $HERE/summary-$set-floor-unseen-median.txt
  for c in "default" "no-shorter --refit-theta augmented-no-shorter" "tested --refit-theta augmented-tested" \
           "amplitude --refit-theta augmented-amplitude" "within-own --refit-theta augmented-within-own" \
           "hold-constant --refit-theta augmented-hold-constant" "unseen-median"; do
    set -- $c; name=$1; shift
    # node-seeds/run.sh holds --unseen-covariates at free (this pass's default) unless UNSEEN says otherwise.
    UNSEEN=free; [ $name = unseen-median ] && UNSEEN=median
    FIT=fixed-4 UNSEEN=$UNSEEN EXTRA="$*" sh $NS/run.sh $O/$name
    python3 $NS/summarise.py $O/$name fixed-4 > $HERE/summary-$set-$name.txt
    # The share is of the defaults' no-DP gain; under --unseen-covariates median the alone fit itself changes, so its
    # verdict takes its own no-DP gain (verdict.py refuses a reference with another alone).
    REF=$O/default; FLOOR=$O/floor
    if [ $name = unseen-median ]; then REF=$O/$name; FLOOR=$O/floor-unseen-median; fi
    python3 $VERDICT $O/$name fixed-4 $FLOOR $REF > $HERE/verdict-$set-$name.txt
  done
  python3 $HERE/constant.py $O/default/views > $HERE/constant-$set.txt
done
for n in 100 400; do
  python3 $HERE/theta.py $OUT/twelfth/floor/floor-fixed-4/slid-v2.jsonl A $n > $HERE/theta-slid-v2-$n-A.txt
  python3 $HERE/theta.py $OUT/eleventh/floor/floor-fixed-4/star-v3.jsonl A $n > $HERE/theta-star-v3-$n-A.txt
done
