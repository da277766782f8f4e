#!/bin/sh
# Issue 56: the frontier on two data sets no co-training experiment here had used (prep.py),
# masked, n_obs 100 and 400, 10 splits x 5 node seeds, eps = 1, the product's defaults otherwise;
# two view splits per data set (contiguous halves; alternating columns), fixed before any run.
# FIT picks how each party's private-only fit starts: best-of-4 (restarts drawn from the node's
# seed, the default before D38, and this script's when FIT is unset, so the eighth pass's figures
# reprint) or fixed-4 (restarts from one fixed stream, the product's default since). Run from the repository root
# with the lab binary built (cargo build --release -p dpcotrain-lab):
#   FIT=fixed-4 sh docs/results/harm-study/node-seeds/run.sh OUT_DIR
# EXTRA adds frontier flags (e.g. EXTRA="--refit-theta own": the counterfactual of the pass); THETAS=select
# puts the release θ to the DP vote (default public). UNSEEN sets --unseen-covariates: free (fitted, the default
# before D39, so the earlier passes' figures reprint; the thirteenth pass sets it) or drop (today's default).
# then python3 docs/results/harm-study/node-seeds/summarise.py OUT_DIR. About 2 minutes on 2 cores.
set -e
BIN=${BIN:-target/release/dpcotrain-lab}
OUT=${1:?usage: run.sh OUT_DIR}
FIT=${FIT:-best-of-4}
D=docs/results/harm-study/node-seeds/data
SPECS=${SPECS:-"$D/vietnam.csv age,educyr,hhsize,sex lnrlfood,lnmed,farm,urban;$D/vietnam.csv age,hhsize,lnrlfood,farm educyr,sex,lnmed,urban;$D/diamonds.csv carat,depth,table,x ywidth,z,cut,color,clarity;$D/diamonds.csv carat,table,ywidth,cut,clarity depth,x,z,color"}
# One view split per line of SPECS ("DATA A_COLS B_COLS", separated by ";"), numbered from 1.
echo "$SPECS" | tr ';' '\n' | nl -ba -w1 -s' ' | while read -r i data a b; do
  name=$(basename $data .csv)-v$i
  d=$OUT/views/$name
  sh docs/results/harm-study/unseen/views.sh $data $a $b masked $d $name
  mkdir -p $OUT/$FIT
  $BIN experiment frontier --data views --views $d/party-a.toml,$d/party-b.toml --nobs 100,400 --seeds 10 \
    --node-seeds 5 --fit-starts $FIT --unseen-covariates ${UNSEEN:-free} --epsilons 1 --mechanisms finite+cap --thetas ${THETAS:-public} $EXTRA \
    --out $OUT/$FIT/$name > /dev/null 2>$OUT/$FIT/$name.log || { cat $OUT/$FIT/$name.log; exit 1; }
done
