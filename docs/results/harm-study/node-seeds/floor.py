"""Issue 56's true-label floor from floor.sh's traces: python3 floor.py DIR (one NAME.jsonl per view split).

Per party-run (split, node seed, party) the trace holds, per test point, the label, the alone mean, the
co-trained mean and the mean of the private-only fit given the true labels of the pool entities the party
asked about. A run is hurt when its test RMSE is above alone by at least 1% and two paired SE (the delta
method, as the frontier and the node count them). Prints, per data set, n and node seed, the party-runs
hurt by the answers (no DP; eps = 1) and by the true labels, then the totals per node seed."""
import json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hurt import rmse, hurt_points as hurt
from collections import defaultdict
d = sys.argv[1]

cells = defaultdict(lambda: [0, 0, 0, 0])  # (data, nobs, node) -> runs, hurt no DP, hurt eps=1, hurt by labels
gains = defaultdict(lambda: [0.0, 0.0, 0.0, 0])  # (data, nobs) -> gain no DP, eps=1, labels, runs
errors = 0
for name in sorted(f for f in os.listdir(d) if f.endswith('.jsonl')):
    runs = defaultdict(dict)
    for line in open(os.path.join(d, name)):
        r = json.loads(line)
        if 'error' in r:
            errors += 1
            continue
        cell = 'no-dp' if r['epsilon'] is None else 'dp'
        for p in r['parties']:
            runs[(r['nobs'], r['seed'], r.get('node_seed', 0), p['party'])][cell] = p['test']
    data = name[:-len('.jsonl')]
    for (nobs, seed, node, party), c in runs.items():
        if 'no-dp' not in c or 'dp' not in c:
            continue
        t0, t1 = c['no-dp'], c['dp']
        alone = [(t[1] - t[0]) ** 2 for t in t0]
        k = cells[(data, nobs, node)]
        k[0] += 1
        k[1] += hurt(alone, [(t[3] - t[0]) ** 2 for t in t0])
        k[2] += hurt(alone, [(t[3] - t[0]) ** 2 for t in t1])
        labels = [(t[5] - t[0]) ** 2 for t in t0]
        k[3] += hurt(alone, labels)
        g = gains[(data, nobs)]
        g[0] += rmse(alone) - rmse([(t[3] - t[0]) ** 2 for t in t0])
        g[1] += rmse(alone) - rmse([(t[3] - t[0]) ** 2 for t in t1])
        g[2] += rmse(alone) - rmse(labels)
        g[3] += 1
print(f"{'data':12} {'n':>4} {'node':>4} {'runs':>4} {'hurt noDP':>9} {'hurt eps=1':>10} {'hurt labels':>11}")
totals = defaultdict(lambda: [0, 0, 0, 0])
for (data, nobs, node), k in sorted(cells.items()):
    print(f'{data:12} {nobs:>4} {node:>4} {k[0]:>4} {k[1]:>9} {k[2]:>10} {k[3]:>11}')
    t = totals[node]
    for i in range(4):
        t[i] += k[i]
print('mean gain per party-run (alone RMSE minus): no DP, eps = 1, true labels')
for (data, nobs), g in sorted(gains.items()):
    print(f'{data:12} {nobs:>4} {g[0] / g[3]:+.4f} {g[1] / g[3]:+.4f} {g[2] / g[3]:+.4f}')
for node, t in sorted(totals.items()):
    print(f'node seed {node}: {t[0]} party-runs, hurt {t[1]} without DP, {t[2]} at eps = 1, {t[3]} by the true labels')
if errors:
    print(f'{errors} traces failed (see the .jsonl)')
