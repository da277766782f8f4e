"""Issue 56's "done when", checked from run.sh's and floor.sh's folders:
    python3 verdict.py RUN_DIR FIT FLOOR_DIR [REFERENCE_DIR]
RUN_DIR/FIT/NAME/runs.jsonl (one NAME per view split, "DATA-vK") from node-seeds/run.sh; FLOOR_DIR/floor-FIT/
NAME.jsonl from node-seeds/floor.sh (the same splits and node seeds, the pool's true labels given to the lab).

Per node seed: party-runs hurt without DP and at eps = 1 (test RMSE above alone by >= 1% and two paired SE,
as the frontier counts them) beside the true-label floor (runs hurt by adding the true labels of the asked
entities, floor.py). Per data set (its view splits and parties together) and n: the no-DP gain over alone
per party-run, its mean and SE over the runs, and, where the mean is beyond 2 SE, the share of it kept at
eps = 1 per node seed (sum of DP gains / sum of no-DP gains). Per party, the same share (detail, not the
criterion). Then each criterion with PASS or FAIL.

The no-DP gain a share is taken of is RUN_DIR's own unless REFERENCE_DIR (another run.sh folder of the same
splits, e.g. the product's defaults) is given: a rule that also removes the gain without DP must be judged
against the gain co-training gives without it, not against what the rule left."""
import json, math, os, re, subprocess, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'node-seeds'))
from hurt import hurt
from collections import defaultdict
run_dir, fit, floor_dir = sys.argv[1], sys.argv[2], sys.argv[3]
ref_dir = sys.argv[4] if len(sys.argv) > 4 else run_dir

def load(d):
    by = defaultdict(dict)  # (name, nobs, seed, node, party) -> cell -> row
    for name in sorted(os.listdir(os.path.join(d, fit))):
        p = os.path.join(d, fit, name, 'runs.jsonl')
        if os.path.exists(p):
            for line in open(p):
                r = json.loads(line)
                if not r.get('error'):
                    by[(name, r['nobs'], r['seed'], r.get('node_seed', 0), r['party'])][r['cell']] = r
    return {k: c for k, c in by.items() if all(x in c for x in ('alone', 'no-dp', 'dp'))}

runs, ref = load(run_dir), load(ref_dir)
nodes = sorted({k[3] for k in runs})
counts = defaultdict(lambda: [0, 0, 0])  # node -> runs, hurt no DP, hurt eps=1
for (name, nobs, seed, node, party), c in runs.items():
    a = c['alone']['rmse']
    t = counts[node]
    t[0] += 1
    t[1] += hurt(a, c['no-dp']['rmse'], c['no-dp'].get('se_vs_alone'))
    t[2] += hurt(a, c['dp']['rmse'], c['dp'].get('se_vs_alone'))
out = subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), '..', 'node-seeds', 'floor.py'),
                      os.path.join(floor_dir, f'floor-{fit}')], capture_output=True, text=True, check=True).stdout
floor = {int(m.group(1)): int(m.group(2)) for m in re.finditer(r'node seed (\d+): .* (\d+) by the true labels', out)}
ok = True
print(f'== {fit}: {len(runs)} party-runs over node seeds {nodes}' + (f'; no-DP gains of {os.path.basename(ref_dir.rstrip("/"))}' if ref_dir != run_dir else ''))
print(f"{'node':>4} {'runs':>5} {'hurt noDP':>9} {'hurt eps=1':>10} {'floor':>5}  none hurt without DP; eps=1 within the floor and 2%")
for node in nodes:
    n, h0, h1 = counts[node]
    f = floor.get(node)
    good = f is not None and h1 <= f and h1 <= 0.02 * n and h0 == 0
    ok &= good
    print(f'{node:>4} {n:>5} {h0:>9} {h1:>10} {f if f is not None else "?":>5}  {"PASS" if good else "FAIL"}')
print('no-DP gain per party-run (mean ± SE over runs) and the share kept at eps = 1 per node seed')
groups = defaultdict(list)  # (data set, nobs) -> (node, name, party, gain no DP, gain dp, split)
missing = 0
for (name, nobs, seed, node, party), c in runs.items():
    a = c['alone']['rmse']
    r = ref.get((name, nobs, seed, node, party))
    if r is None:
        missing += 1
        continue
    assert abs(r['alone']['rmse'] - a) <= 1e-3 * a, f'{name} {nobs} {seed} {node} {party}: alone differs from the reference'
    groups[(name.rsplit('-v', 1)[0], nobs)].append((node, name, party, r['alone']['rmse'] - r['no-dp']['rmse'], a - c['dp']['rmse'], seed))
for (data, nobs), v in sorted(groups.items()):
    per_run = defaultdict(list)  # (view split, party, split) -> no-DP gain per node seed, averaged below
    for x in v:
        per_run[(x[1], x[2], x[5])].append(x[3])
    g = [sum(u) / len(u) for u in per_run.values()]
    m = sum(g) / len(g)
    se = math.sqrt(sum((x - m) ** 2 for x in g) / (len(g) - 1) / len(g))
    need = 0.5 if nobs <= 100 else 0.8
    shares = []
    for node in nodes:
        w = [x for x in v if x[0] == node]
        shares.append(sum(x[4] for x in w) / sum(x[3] for x in w) if sum(x[3] for x in w) > 0 else float('nan'))
    beyond = m > 2 * se
    good = (not beyond) or all(s >= need for s in shares)
    ok &= good
    verdict = ('PASS' if good else 'FAIL') if beyond else 'no gain beyond 2 SE'
    print(f'{data:10} {nobs:>4} gain {m:+.4f} ± {se:.4f}  kept ' + ' '.join(f'{100 * s:.0f}%' for s in shares)
          + f'  (need {100 * need:.0f}%) {verdict}')
    for name in sorted({x[1] for x in v}):
        for party in sorted({x[2] for x in v if x[1] == name}):
            w0 = [x for x in v if x[1] == name and x[2] == party]
            g0 = sum(x[3] for x in w0 if x[0] == nodes[0]) / sum(1 for x in w0 if x[0] == nodes[0])
            ks = []
            for node in nodes:
                w = [x for x in w0 if x[0] == node]
                s0, s1 = sum(x[3] for x in w), sum(x[4] for x in w)
                ks.append(f'{100 * s1 / s0:.0f}%' if s0 > 0 else '–')
            print(f'    {name} {party}: gain {g0:+.4f}, kept {" ".join(ks)}')
if missing:
    ok = False
    print(f'{missing} party-runs have no reference run: FAIL')
print('all criteria:', 'PASS' if ok else 'FAIL')
