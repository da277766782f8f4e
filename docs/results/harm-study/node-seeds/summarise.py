"""Issue 56 figures from run.sh's folders: python3 summarise.py OUT_DIR [FIT ...] (default: every FIT folder).

Per FIT (how the private-only fit starts) and data set: how much each party's alone test RMSE moves
between node seeds on the same split (the largest relative spread, and how many party-splits move
by more than 0.1% and 1%); then per node seed the party-runs hurt without DP and at eps = 1
(after above alone by at least 1% and two paired SE, as the frontier counts them) beside the
mean baseline, and the share of the no-DP gain kept at eps = 1 per party (mean over splits)."""
import json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hurt import hurt
from collections import defaultdict
out = sys.argv[1]
fits = sys.argv[2:] or sorted(f for f in os.listdir(out) if os.path.isdir(os.path.join(out, f)) and f != 'views')

for fit in fits:
    rows = []
    for name in sorted(os.listdir(os.path.join(out, fit))):
        p = os.path.join(out, fit, name, 'runs.jsonl')
        if os.path.exists(p):
            # Every folder's rows say data "views": the folder names the data set and view split.
            rows += [dict(json.loads(l), data=name) for l in open(p)]
    by = defaultdict(dict)  # (data, nobs, seed, node, party) -> cell -> row
    for r in rows:
        if r.get('error'):
            continue
        by[(r['data'], r['nobs'], r['seed'], r.get('node_seed', 0), r['party'])][r['cell']] = r
    print(f'== {fit}: {len(by)} party-runs')
    spread = defaultdict(list)  # (data, nobs, seed, party) -> alone rmse per node seed
    for (data, nobs, seed, node, party), c in by.items():
        if 'alone' in c:
            spread[(data, nobs, seed, party)].append(c['alone']['rmse'])
    rel = {k: (max(v) - min(v)) / min(v) for k, v in spread.items() if len(v) > 1}
    worst = max(rel.items(), key=lambda kv: kv[1]) if rel else None
    print(f'alone across node seeds: {len(rel)} party-splits; > 0.1%: {sum(v > 1e-3 for v in rel.values())}; '
          f'> 1%: {sum(v > 1e-2 for v in rel.values())}; largest {100 * worst[1]:.2f}% {worst[0]}' if worst else 'no spread')
    print(f"{'data':14} {'n':>4} {'node':>4} {'mean':>6} {'alone':>6} {'no DP':>6} {'eps=1':>6} {'hurt noDP':>9} {'hurt eps=1':>10}  share kept per party")
    groups = defaultdict(list)
    for (data, nobs, seed, node, party), c in by.items():
        if all(k in c for k in ('alone', 'no-dp', 'dp')):
            groups[(data, nobs, node)].append((party, c))
    totals = defaultdict(lambda: [0, 0, 0])
    for (data, nobs, node), v in sorted(groups.items()):
        n = len(v)
        m = lambda f: sum(f(c) for _, c in v) / n
        h0 = sum(hurt(c['alone']['rmse'], c['no-dp']['rmse'], c['no-dp'].get('se_vs_alone')) for _, c in v)
        h1 = sum(hurt(c['alone']['rmse'], c['dp']['rmse'], c['dp'].get('se_vs_alone')) for _, c in v)
        t = totals[node]; t[0] += n; t[1] += h0; t[2] += h1
        shares = []
        for party in sorted({p for p, _ in v}):
            cs = [c for p, c in v if p == party]
            g0 = sum(c['alone']['rmse'] - c['no-dp']['rmse'] for c in cs) / len(cs)
            g1 = sum(c['alone']['rmse'] - c['dp']['rmse'] for c in cs) / len(cs)
            shares.append(f'{party} {100 * g1 / g0:.0f}% (gain {g0:+.4f})' if g0 > 0 else f'{party} – (gain {g0:+.4f})')
        print(f"{data:14} {nobs:>4} {node:>4} {m(lambda c: c['alone'].get('mean_baseline') or float('nan')):6.3f} "
              f"{m(lambda c: c['alone']['rmse']):6.3f} {m(lambda c: c['no-dp']['rmse']):6.3f} {m(lambda c: c['dp']['rmse']):6.3f} "
              f"{h0:>9} {h1:>10}  {'; '.join(shares)}")
    for node, (n, h0, h1) in sorted(totals.items()):
        print(f'node seed {node}: {n} party-runs, hurt {h0} without DP, {h1} at eps = 1')
