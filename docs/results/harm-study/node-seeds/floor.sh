#!/bin/sh
# Issue 56: the true-label floor on the eighth pass's data. For each view split, 10 splits x 5
# node seeds, n_obs 100 and 400, no DP and eps = 1: `experiment frontier --trace` with the pool's
# true labels (make.py's pool-labels.csv, given to the lab only), which refits each party's
# private-only model with the true labels of the pool entities it asked about (as if every answer
# were a real label). Then floor.py counts the party-runs that adding those labels hurt, beside
# those the answers hurt. Run from the repository root with the lab binary built (cargo build --release -p dpcotrain-lab):
#   FIT=fixed-4 sh docs/results/harm-study/node-seeds/floor.sh OUT_DIR
# About 6 minutes on 2 cores. UNSEEN sets --unseen-covariates as in run.sh (free unless set).
set -e
BIN=${BIN:-target/release/dpcotrain-lab}
OUT=${1:?usage: floor.sh OUT_DIR}
FIT=${FIT:-fixed-4}
D=docs/results/harm-study/node-seeds/data
SPECS=${SPECS:-"$D/vietnam.csv age,educyr,hhsize,sex lnrlfood,lnmed,farm,urban;$D/vietnam.csv age,hhsize,lnrlfood,farm educyr,sex,lnmed,urban;$D/diamonds.csv carat,depth,table,x ywidth,z,cut,color,clarity;$D/diamonds.csv carat,table,ywidth,cut,clarity depth,x,z,color"}
mkdir -p $OUT/floor-$FIT
echo "$SPECS" | tr ';' '\n' | nl -ba -w1 -s' ' | while read -r i data a b; do
  name=$(basename $data .csv)-v$i
  d=$OUT/views/$name
  sh docs/results/harm-study/unseen/views.sh $data $a $b masked $d $name
  $BIN experiment frontier --data views --views $d/party-a.toml,$d/party-b.toml --pool-labels $d/pool-labels.csv \
    --nobs 100,400 --seeds 10 --node-seeds 5 --fit-starts $FIT --unseen-covariates ${UNSEEN:-free} --epsilons 1 --mechanisms finite+cap --thetas public $EXTRA \
    --trace $OUT/floor-$FIT/$name.jsonl 2>$OUT/floor-$FIT/$name.log || { cat $OUT/floor-$FIT/$name.log; exit 1; }
done
python3 docs/results/harm-study/node-seeds/floor.py $OUT/floor-$FIT
