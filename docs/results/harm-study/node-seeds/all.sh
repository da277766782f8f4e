#!/bin/sh
# Every figure of docs/results.md's "The eighth pass" in one command (about 15 minutes on 2
# cores): run.sh under each FIT, the re-fit counterfactual, and the summaries, rewritten in
# place (compare with git diff), then the table of mean alone RMSE per FIT.
#   sh docs/results/harm-study/node-seeds/all.sh OUT_DIR
set -e
OUT=${1:?usage: all.sh OUT_DIR}
HERE=docs/results/harm-study/node-seeds
for FIT in best-of-4 fixed-4 fixed-8 fixed-16 fixed-32; do
  FIT=$FIT sh $HERE/run.sh $OUT/main
  python3 $HERE/summarise.py $OUT/main $FIT > $HERE/summary-$FIT.txt
done
FIT=fixed-4 EXTRA="--refit-theta own" sh $HERE/run.sh $OUT/refit-own
python3 $HERE/summarise.py $OUT/refit-own fixed-4 > $HERE/summary-fixed-4-refit-own.txt
python3 $HERE/alone.py $OUT/main
