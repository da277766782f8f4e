"""Issue 56, the twelfth pass: how the re-fit after the answers moves a querier's length-scales, and whether the
party-runs it hurt are those whose length-scales moved. Reads floor.sh's traces (`experiment frontier --trace`,
which records each party's hyperparameters before and after: the kernel's log-parameters, signal variance
first, then log sigma^2).
    python3 docs/results/harm-study/twelfth/moves.py TRACE_DIR [TRACE_DIR ...]
A length-scale "moved" when its log changed by more than 1 (a factor e) in either direction; the last column counts
the moves by covariate (its position in the party's view, from 0)."""
import glob, json, math, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', 'node-seeds'))
from hurt import hurt_points

MOVE = 1.0
print(f"{'data':<14}{'n':>5} {'cell':>6} {'party':>5} {'runs':>5} {'hurt':>5} {'hurt, a length-scale moved':>27} {'not hurt, moved':>16}  moved up / down  by covariate")
for d in sys.argv[1:]:
    for f in sorted(glob.glob(os.path.join(d, '*.jsonl'))):
        name = os.path.basename(f)[:-6]
        cells = {}
        for line in open(f):
            r = json.loads(line)
            if 'error' in r:
                continue
            cell = 'no DP' if r['epsilon'] is None else 'eps=1'
            for p in r['parties']:
                t = p['test']
                a = [(x[0] - x[1]) ** 2 for x in t]
                b = [(x[0] - x[3]) ** 2 for x in t]
                # Length-scales: every kernel parameter but the first (signal variance); sigma^2 is last.
                before, after = p['theta_before'][1:-1], p['theta_after'][1:-1]
                up = any(y - x > MOVE for x, y in zip(before, after))
                down = any(x - y > MOVE for x, y in zip(before, after))
                c = cells.setdefault((r['nobs'], cell, p['party']), [0, 0, 0, 0, 0, 0, {}])
                for j, (x, y) in enumerate(zip(before, after)):
                    if abs(y - x) > MOVE:
                        c[6][j] = c[6].get(j, 0) + 1
                h = hurt_points(a, b)
                c[0] += 1
                c[1] += h
                c[2] += h and (up or down)
                c[3] += (not h) and (up or down)
                c[4] += up
                c[5] += down
        for (n, cell, party), c in sorted(cells.items()):
            by = ', '.join(f'{j}: {k}' for j, k in sorted(c[6].items())) or '-'
            print(f"{name:<14}{n:>5} {cell:>6} {party:>5} {c[0]:>5} {c[1]:>5} {c[2]:>27} {c[3]:>16}  {c[4]:>5} / {c[5]:<5}  {by}")
