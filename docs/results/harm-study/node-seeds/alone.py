"""Mean alone test RMSE per data set, n and FIT (docs/results.md, "The eighth pass"): python3 alone.py OUT_DIR [FIT ...]."""
import json, os, sys
from collections import defaultdict
out = sys.argv[1]
fits = sys.argv[2:] or ['best-of-4', 'fixed-4', 'fixed-8', 'fixed-16', 'fixed-32']
mean = {}
for fit in fits:
    al = defaultdict(list)
    for name in os.listdir(os.path.join(out, fit)):
        p = os.path.join(out, fit, name, 'runs.jsonl')
        if os.path.exists(p):
            for l in open(p):
                r = json.loads(l)
                if r['cell'] == 'alone' and not r.get('error'):
                    al[(name, r['nobs'])].append(r['rmse'])
    mean[fit] = {k: sum(v) / len(v) for k, v in al.items()}
print('| data, n | ' + ' | '.join(fits) + ' |')
print('|---|' + '---|' * len(fits))
for k in sorted(mean[fits[0]]):
    print(f'| {k[0]}, {k[1]} | ' + ' | '.join(f'{mean[f][k]:.4f}' for f in fits) + ' |')
