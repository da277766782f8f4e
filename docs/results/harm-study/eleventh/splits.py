"""Per split, one data set's party at one n: alone, the change without DP and at eps = 1 per node seed (* = hurt,
as the frontier counts it): python3 splits.py RUN_DIR/FIT/NAME N PARTY  (docs/results.md, "The eleventh pass")."""
import json, sys
from collections import defaultdict
d, nobs, party = sys.argv[1], int(sys.argv[2]), sys.argv[3]
t = defaultdict(dict)
for line in open(f'{d}/runs.jsonl'):
    r = json.loads(line)
    if r['nobs'] == nobs and r['party'] == party and not r.get('error'):
        t[(r['seed'], r.get('node_seed', 0))][r['cell']] = r
seeds, nodes = sorted({k[0] for k in t}), sorted({k[1] for k in t})
print(f'split alone   no DP   eps = 1 at node seeds {nodes}')
for s in seeds:
    a = t[(s, nodes[0])]['alone']['rmse']
    cells = []
    for k in nodes:
        c = t[(s, k)]['dp']
        hurt = c['rmse'] > a * 1.01 and c['rmse'] - a > 2 * c['se_vs_alone']
        cells.append(f"{c['rmse'] - a:+.4f}{'*' if hurt else ' '}")
    print(f"{s:>5} {a:.4f} {t[(s, nodes[0])]['no-dp']['rmse'] - a:+.4f}  " + ' '.join(cells))
alone = [t[(s, nodes[0])]['alone']['rmse'] for s in seeds]
print(f'mean alone {sum(alone) / len(alone):.4f}')
