#!/bin/sh
# Every figure of docs/results.md's "The thirteenth pass" in one command (about an hour on 2 cores): on the two
# data sets of prep.py (never used before this pass) and again on the twelfth and eleventh passes', 4 view splits
# each, masked, n_obs 100 and 400, 10 splits x 5 node seeds, fixed-4 starts, eps = 1, under
# --unseen-covariates free (fitted like any other; the default before this pass) and drop (held at the upper
# bound: the covariate dropped, the default since): the true-label floor, the frontier, summarise.py's table,
# verdict.py's check, compare.py's per-party RMSEs beside the predict-the-mean baseline, and which covariates
# are constant on each party's rows (../twelfth/constant.py). Each file is rewritten in place (compare with
# git diff). Run from the repository root with the lab binary built (cargo build --release -p dpcotrain-lab):
#   sh docs/results/harm-study/thirteenth/all.sh OUT_DIR
set -e
OUT=${1:?usage: all.sh OUT_DIR}
unset THETAS EXTRA UNSEEN
HERE=docs/results/harm-study/thirteenth
NS=docs/results/harm-study/node-seeds
VERDICT=docs/results/harm-study/eleventh/verdict.py
for set in thirteenth twelfth eleventh; do
  . docs/results/harm-study/$set/specs.sh
  O=$OUT/$set
  for rule in free drop; do
    # Each rule's own alone fit: its floor, and the share of its own no-DP gain.
    FIT=fixed-4 UNSEEN=$rule sh $NS/floor.sh $O/floor-$rule > $HERE/summary-$set-floor-$rule.txt
    FIT=fixed-4 UNSEEN=$rule sh $NS/run.sh $O/$rule
    python3 $NS/summarise.py $O/$rule fixed-4 > $HERE/summary-$set-$rule.txt
    python3 $VERDICT $O/$rule fixed-4 $O/floor-$rule $O/$rule > $HERE/verdict-$set-$rule.txt
    echo "$set $rule done $(date -u +%H:%M)" >&2
  done
  python3 $HERE/compare.py $O fixed-4 free drop > $HERE/compare-$set.txt
  python3 docs/results/harm-study/twelfth/constant.py $O/free/views > $HERE/constant-$set.txt
done
