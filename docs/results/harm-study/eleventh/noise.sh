#!/bin/sh
# The fitted noise variance σ̂² (and signal variance) of each party's first 400 training rows, exact GP,
# se-ard, 4 starts (`dpcotrain gp fit --restarts 3`), on the eleventh pass's four view splits and the
# eighth pass's first diamonds split (docs/results.md, "The eleventh pass"). Run from the repository
# root with the binary built (cargo build --release):  sh docs/results/harm-study/eleventh/noise.sh TMP_DIR
set -e
T=${1:?usage: noise.sh TMP_DIR}
BIN=${BIN:-target/release/dpcotrain}
. docs/results/harm-study/eleventh/specs.sh
N=docs/results/harm-study/node-seeds/data
SPECS="$SPECS;$N/diamonds.csv carat,depth,table,x ywidth,z,cut,color,clarity"
echo "$SPECS" | tr ';' '\n' | nl -ba -w1 -s' ' | while read -r i data a b; do
  name=$(basename $data .csv)-v$i
  python3 docs/results/harm-study/unseen/make.py $data $a $b masked $T/$name > /dev/null
  for p in a b; do
    head -401 $T/$name/data/party-$p/train.csv > $T/train400.csv
    $BIN gp fit --train $T/train400.csv --restarts 3 --json | python3 -c "import json,sys; h=json.load(sys.stdin)['hyperparameters']; print('$name $p: noise %.3f signal %.3f' % (h['noise'], h['variance']))"
  done
done
