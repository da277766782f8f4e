#!/bin/sh
# The harm study's seventh pass (docs/results.md): the functional reading of a release against the
# point-by-point likelihood reading, and the true-label floor of the hurt test at 40 seeds, on the
# three masked real data sets (CCPP, Bikeshare, Wage), n = 100 and 400, ε = 1.
#   sh docs/results/harm-study/seventh/run.sh        (about 8 minutes on 2 cores)
# DPCOTRAIN overrides the binary (../masked.sh says which commands exit non-zero, as expected).
. "$(cd "$(dirname "$0")" && pwd)/../masked.sh"
# The default (likelihood reading, answers discounted by 30σ̂², D30) is ../sixth/default.jsonl.
run functionals --answers functionals
run functionals-reported --answers functionals --answer-noise reported
run likelihood-reported --answer-noise reported
for a in likelihood functionals; do
  "$bin" experiment frontier --data ccpp-masked --nobs 100 --seeds 20 --epsilons 1 --mechanisms finite+cap \
    --thetas public --json --answers $a --rank full > "$here/ccpp100-$a-rankfull.jsonl" 2>/dev/null || true
done
# The true labels of the asked entities, fitted as the party's own rows: the hurt test's floor.
tmp=$(mktemp -d)
"$bin" experiment frontier --data $data --nobs 100,400 --seeds 40 --epsilons 1 --mechanisms finite+cap \
  --thetas public --trace "$tmp/trace.jsonl" --trace-oracle answer-error > /dev/null 2>&1 || true
python3 "$here/../oracles.py" "$tmp/trace.jsonl" | sed "s|$tmp/trace.jsonl|TRACE (seeds 0–39)|" > "$here/labels40.txt"
rm -rf "$tmp"
python3 "$here/table.py"
