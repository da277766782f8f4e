#!/bin/sh
# The harm study on data no co-training experiment had used (docs/results.md, "The fourth pass"):
# UCI airfoil and concrete, two view splits each (contiguous halves; alternating columns), masked
# and unmasked, n_obs 100 and 250, 20 seeds, ε = 1, the protocol and an extra answer variance of
# 3 and 10 (VS="own:10 own:30" for the extra variance in units of the querier's own fitted noise
# variance, D30; VS="own:30+decline:0.4" adds the sixth pass's --decline-ratio 0.4). Run from the repository root with the lab binary built (cargo build --release -p dpcotrain-lab); about 4 minutes on 2 cores.
#   sh docs/results/harm-study/unseen/run.sh [OUT_DIR]   (default: a temporary directory)
# SPECS ("DATA A_COLS B_COLS" separated by ";"; DATA a UCI name or a CSV path) and NOBS change the
# data and the labelled rows (docs/results/harm-study/unseen400/run.sh); LENGTHSCALE=median
# runs the release with today's length-scale (D32; the cells here were measured with absolute), and
# UNSEEN=drop today's treatment of a covariate constant on a party's rows (D39; measured with free).
set -e
BIN=${BIN:-target/release/dpcotrain-lab}
OUT=${1:-$(mktemp -d)}
HERE=docs/results/harm-study/unseen
SPECS=${SPECS:-"airfoil x1,x2,x3 x4,x5;airfoil x1,x5 x2,x3,x4;concrete x1,x2,x3,x4 x5,x6,x7,x8;concrete x1,x3,x5,x7 x2,x4,x6,x8"}
NOBS=${NOBS:-100,250}
i=0
IFS_SAVED=$IFS
IFS=';'
for spec in $SPECS; do
  IFS=$IFS_SAVED
  i=$((i+1))
  for m in masked unmasked; do
    set -- $spec
    name=$(basename $1 .csv)
    d=$OUT/$name-v$i-$m
    sh $HERE/views.sh $1 $2 $3 $m $d $name-two-party
    for V in ${VS:-reported 3 10}; do
      # V = NOISE or NOISE+decline:R (the sixth pass's switch, --decline-ratio R).
      noise=${V%%+decline:*}
      extra=""
      case $V in *+decline:*) extra="--decline-ratio ${V##*+decline:}" ;; esac
      $BIN experiment frontier --data views --views $d/party-a.toml,$d/party-b.toml --nobs $NOBS --seeds 20 \
        --epsilons 1 --mechanisms finite+cap --thetas public --json --answer-noise $noise $extra \
        --release-lengthscale ${LENGTHSCALE:-absolute} --unseen-covariates ${UNSEEN:-free} 2>/dev/null \
        | sed "s/\"data\":\"views\"/\"data\":\"$name-v$i-$m\"/" >> $OUT/cells-$(echo $V | tr : -).jsonl
    done
  done
done
python3 $HERE/summarise.py $OUT ${VS:-reported 3 10}
