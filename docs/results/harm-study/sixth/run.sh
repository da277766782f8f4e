#!/bin/sh
# The harm study's sixth pass (docs/results.md): counterfactuals on the release at ε = 1 on the
# three masked real data sets (CCPP, Bikeshare, Wage), n = 100 and 400, 20 seeds, and an ε sweep
# at n = 100. Writes one cell file per setting beside this script and prints the tables.
#   sh docs/results/harm-study/sixth/run.sh        (about 27 minutes on 2 cores)
# DPCOTRAIN_LAB overrides the lab binary (../masked.sh says which commands exit non-zero, as expected).
. "$(cd "$(dirname "$0")" && pwd)/../masked.sh"
run default
for q in 10 15 50 100; do run queries$q --queries $q; done
run range2 --label-range=-2,2
run range1.5 --label-range=-1.5,1.5
run rank-full --rank full
run rank-k3 --rank k=3
run rank-k10 --rank k=10
frontier --data $data --nobs 100 --seeds 20 --epsilons 1,2,4,8,16,1000 \
  --mechanisms finite+cap --thetas public --json > "$here/epsilons.jsonl" 2>/dev/null || true
# Twenty fresh seeds (0..39), and CCPP masked n = 100 at 40 seeds under the harm study's switches.
frontier --data $data --nobs 100,400 --seeds 40 --epsilons 1 \
  --mechanisms finite+cap --thetas public --json > "$here/seeds40.jsonl" 2>/dev/null || true
for cfg in "base:" "temper3:--answer-temper 3" "own100:--answer-noise own:100" "check2:--answer-check 2" \
    "refitown:--refit-theta own" "loo:--guard loo" "huge:--answer-noise 1000000"; do
  name=${cfg%%:*}; args=${cfg#*:}
  frontier --data ccpp-masked --nobs 100 --seeds 40 --epsilons 1 \
    --mechanisms finite+cap --thetas public --json $args > "$here/ccpp40-$name.jsonl" 2>/dev/null || true
done
# The same 40 seeds' per-run rows (their order depends on the threads), for oracle_decline.py.
tmp=$(mktemp -d)
frontier --data $data --nobs 100,400 --seeds 40 --epsilons 1 \
  --mechanisms finite+cap --thetas public --out "$tmp" > /dev/null 2>&1 || true
cp "$tmp/runs.jsonl" "$here/seeds40-runs.jsonl"
rm -rf "$tmp"
# The decline switch (CoModel::decline_noise_ratio) at 40 seeds.
for r in 0.25 0.3 0.4 0.5; do
  frontier --data $data --nobs 100,400 --seeds 40 --epsilons 1 \
    --mechanisms finite+cap --thetas public --json --decline-ratio $r > "$here/decline-$r.jsonl" 2>/dev/null || true
done
python3 "$here/table.py"
python3 "$here/oracle_decline.py"
