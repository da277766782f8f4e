"""The sixth pass's oracle (docs/results.md): decline a party's DP answers wherever its *test*
RMSE alone is below T × the mean baseline — which no party can compute — read from the per-run
rows of seeds40-runs.jsonl (`experiment frontier … --seeds 40 --out DIR`, DIR/runs.jsonl).
    python3 docs/results/harm-study/sixth/oracle_decline.py
"""
import collections, json, os
here = os.path.dirname(os.path.abspath(__file__))
runs = collections.defaultdict(dict)
for line in open(os.path.join(here, 'seeds40-runs.jsonl')):
    r = json.loads(line)
    runs[(r['data'], r['nobs'], r['seed'], r['party'])][r['cell']] = r

def hurt(alone, after, se):
    return after - alone > 0.01 * alone and se is not None and after - alone > 2 * se

for t in [0, 0.3, 0.4, 0.5]:
    n_hurt = n = 0
    cells = collections.defaultdict(list)
    for (data, nobs, _, party), c in runs.items():
        if 'dp' not in c or 'no-dp' not in c:
            continue
        alone, no_dp, dp = c['alone']['rmse'], c['no-dp']['rmse'], c['dp']['rmse']
        decline = alone < t * c['alone']['mean_baseline']
        n_hurt += (not decline) and hurt(alone, dp, c['dp']['se_vs_alone'])
        n += 1
        cells[(data, nobs, party)].append((alone - no_dp, alone - (alone if decline else dp)))
    shares = [f"{d.split()[0]} {k} {p}: {100 * sum(r for _, r in v) / sum(g for g, _ in v):.0f}%"
              for (d, k, p), v in sorted(cells.items())]
    print(f"T = {t}: hurt at ε = 1 {n_hurt}/{n}; " + '; '.join(shares))
