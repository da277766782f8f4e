"""The public-mean counterfactual from floor.sh's traces run with --trace-oracle public-mean (docs/results.md,
"The eleventh pass"): python3 public_mean.py DIR (one NAME.jsonl per view split).

Each run is re-read with every answer's mean set to the public mean of y (0), its variance kept: the same
pseudo-rows with nothing from the peer. Per view split and n, over splits and node seeds: the mean gain over
alone (alone RMSE minus) of the co-trained model and of the re-read, without DP and at eps = 1, and the party-runs
each hurts (test RMSE above alone by >= 1% and two paired SE, as floor.py counts them)."""
import json, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'node-seeds'))
from hurt import rmse, hurt_points as hurt
from collections import defaultdict
d = sys.argv[1]

cells = defaultdict(lambda: defaultdict(lambda: [0.0, 0.0, 0, 0, 0]))  # (name, nobs) -> cell -> gain co, gain mean, hurt co, hurt mean, runs
for name in sorted(f for f in os.listdir(d) if f.endswith('.jsonl')):
    for line in open(os.path.join(d, name)):
        r = json.loads(line)
        if 'error' in r:
            continue
        cell = 'no DP' if r['epsilon'] is None else 'eps = 1'
        for p in r['parties']:
            t = p['test']
            alone = [(x[1] - x[0]) ** 2 for x in t]
            co = [(x[3] - x[0]) ** 2 for x in t]
            pm = [(x[6] - x[0]) ** 2 for x in t]
            k = cells[(name[:-6], r['nobs'])][cell]
            k[0] += rmse(alone) - rmse(co); k[1] += rmse(alone) - rmse(pm)
            k[2] += hurt(alone, co); k[3] += hurt(alone, pm); k[4] += 1
print(f"{'view split':14} {'n':>4} {'cell':>8} {'runs':>5} {'gain co-trained':>15} {'gain public mean':>16} {'hurt co':>7} {'hurt mean':>9}")
for (name, nobs), cs in sorted(cells.items()):
    for cell in ('no DP', 'eps = 1'):
        g = cs[cell]
        print(f'{name:14} {nobs:>4} {cell:>8} {g[4]:>5} {g[0] / g[4]:>+15.4f} {g[1] / g[4]:>+16.4f} {g[2]:>7} {g[3]:>9}')
