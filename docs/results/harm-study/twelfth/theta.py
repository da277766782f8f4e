"""Issue 56, the twelfth pass: one party's hyperparameters before and after the re-fit, run by run, from a floor.sh
trace (`experiment frontier --trace`): split, node seed, cell (no DP or eps = 1), test RMSE alone and after and their
difference, then log theta before | after (the kernel's log-parameters, signal variance first, then one length-scale
per covariate of the party's view in order, then log sigma^2; a length-scale at its upper bound, ln 1000 = 6.91, reads
the covariate as irrelevant). Without DP the run does not depend on the node seed, so only node seed 0 is printed.
    python3 docs/results/harm-study/twelfth/theta.py TRACE.jsonl PARTY N_OBS"""
import json, math, sys

f, party, nobs = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = []
for line in open(f):
    r = json.loads(line)
    if 'error' in r or r['nobs'] != nobs:
        continue
    dp = r['epsilon'] is not None
    if not dp and r['node_seed'] != 0:
        continue
    for p in r['parties']:
        if p['party'] != party:
            continue
        t = p['test']
        a = math.sqrt(sum((x[0] - x[1]) ** 2 for x in t) / len(t))
        b = math.sqrt(sum((x[0] - x[3]) ** 2 for x in t) / len(t))
        rows.append((r['seed'], dp, r['node_seed'], a, b, p['theta_before'], p['theta_after']))
print('split node cell   alone    after   change | log theta before | after')
for seed, dp, node, a, b, tb, ta in sorted(rows):
    fmt = lambda v: ' '.join(f'{x:6.2f}' for x in v)
    print(f"{seed:>5} {node if dp else '-':>4} {'eps=1' if dp else 'no DP':>5} {a:.4f} {b:.4f} {b - a:+.4f} | {fmt(tb)} | {fmt(ta)}")
