#!/bin/sh
# Every figure of docs/results.md's "The eighth pass", "The ninth pass" and "The tenth pass" in one
# command (about 40 minutes on 2 cores): run.sh under each FIT, the re-fit counterfactual, the
# true-label floor (floor.sh), the per-answer value rule at four thresholds and with own θ, fewer
# queries, the narrower label range alone and with the value rule, and the summaries, rewritten in
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
FIT=fixed-4 sh $HERE/floor.sh $OUT/floor > $HERE/summary-floor-fixed-4.txt
for K in 0.03 0.1 0.2 0.3; do
  FIT=fixed-4 EXTRA="--answer-min-value $K" sh $HERE/run.sh $OUT/min-value-$K
  python3 $HERE/summarise.py $OUT/min-value-$K fixed-4 > $HERE/summary-fixed-4-min-value-$K.txt
done
FIT=fixed-4 EXTRA="--answer-min-value 0.1 --refit-theta own" sh $HERE/run.sh $OUT/min-value-0.1-own
python3 $HERE/summarise.py $OUT/min-value-0.1-own fixed-4 > $HERE/summary-fixed-4-min-value-0.1-refit-own.txt
for Q in 10 5; do
  FIT=fixed-4 EXTRA="--queries $Q" sh $HERE/run.sh $OUT/queries-$Q
  python3 $HERE/summarise.py $OUT/queries-$Q fixed-4 > $HERE/summary-fixed-4-queries-$Q.txt
done
FIT=fixed-4 EXTRA="--label-range=-2,2" sh $HERE/run.sh $OUT/label-range-2
python3 $HERE/summarise.py $OUT/label-range-2 fixed-4 > $HERE/summary-fixed-4-label-range-2.txt
for K in 0.2 0.25 0.3; do
  FIT=fixed-4 EXTRA="--label-range=-2,2 --answer-min-value $K" sh $HERE/run.sh $OUT/label-range-2-min-value-$K
  python3 $HERE/summarise.py $OUT/label-range-2-min-value-$K fixed-4 > $HERE/summary-fixed-4-label-range-2-min-value-$K.txt
done
FIT=fixed-4 EXTRA="--label-range=-1.5,1.5 --answer-min-value 0.3" sh $HERE/run.sh $OUT/label-range-1.5-min-value-0.3
python3 $HERE/summarise.py $OUT/label-range-1.5-min-value-0.3 fixed-4 > $HERE/summary-fixed-4-label-range-1.5-min-value-0.3.txt
python3 $HERE/alone.py $OUT/main
