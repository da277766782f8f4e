#!/bin/sh
# The harm study's sixth pass (docs/results.md): counterfactuals on the release at ε = 1 on the
# three masked real data sets (CCPP, Bikeshare, Wage), n = 100 and 400, 20 seeds, and an ε sweep
# at n = 100. Writes one cell file per setting beside this script and prints the tables.
#   sh docs/results/harm-study/sixth/run.sh        (about 12 minutes on 2 cores)
# DPCOTRAIN overrides the binary (default: target/release/dpcotrain).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin=${DPCOTRAIN:-$here/../../../../target/release/dpcotrain}
data=ccpp-masked,bikeshare-masked,wage-masked
run() {
  name=$1; shift
  "$bin" experiment frontier --data $data --nobs 100,400 --seeds 20 --epsilons 1 \
    --mechanisms finite+cap --thetas public --json "$@" > "$here/$name.jsonl" 2> "$here/$name.err" || true
  rm -f "$here/$name.err"
}
run default
for q in 10 15 50 100; do run queries$q --queries $q; done
run range2 --label-range=-2,2
run range1.5 --label-range=-1.5,1.5
run rank-full --rank full
run rank-k3 --rank k=3
run rank-k10 --rank k=10
"$bin" experiment frontier --data $data --nobs 100 --seeds 20 --epsilons 1,2,4,8,16,1000 \
  --mechanisms finite+cap --thetas public --json > "$here/epsilons.jsonl" 2>/dev/null
python3 "$here/table.py"
