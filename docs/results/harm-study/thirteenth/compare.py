"""Per party, beside the predict-the-mean baseline: mean test RMSE over splits x node seeds alone, without DP
and at eps = 1, under each rule of the pass (issue 56, the thirteenth pass); the last row averages the
rows above (each party-split weighted alike).
    python3 compare.py OUT_SET fixed-4 free drop     (OUT_SET/<rule>/fixed-4/<split>/runs.jsonl)"""
import json, os, sys
from collections import defaultdict
out, fit, rules = sys.argv[1], sys.argv[2], sys.argv[3:]
cells = defaultdict(list)  # (split, n, party, rule, cell) -> rmses
splits = set()
for rule in rules:
    d = os.path.join(out, rule, fit)
    for split in sorted(os.listdir(d)):
        f = os.path.join(d, split, 'runs.jsonl')
        if not os.path.isfile(f):
            continue
        splits.add(split)
        for line in open(f):
            r = json.loads(line)
            if r.get('error') is not None or r['rmse'] is None:
                continue
            cells[(split, r['nobs'], r['party'], rule, r['cell'])].append(r['rmse'])
            if r['cell'] == 'alone' and r.get('mean_baseline') is not None:
                cells[(split, r['nobs'], r['party'], rule, 'mean')].append(r['mean_baseline'])
mean = lambda v: sum(v) / len(v) if v else float('nan')
head = f"{'split':14} {'n':>4} party {'mean':>6}" + ''.join(f" | {r:>6} alone  no-DP  eps=1" for r in rules)
print(head)
for split in sorted(splits):
    for n in (100, 400):
        for party in ('A', 'B'):
            m = mean(cells[(split, n, party, rules[0], 'mean')])
            row = f'{split:14} {n:>4} {party:>5} {m:6.3f}'
            for rule in rules:
                row += ' | ' + ' ' * 6 + ''.join(f' {mean(cells[(split, n, party, rule, c)]):6.3f}' for c in ('alone', 'no-dp', 'dp'))
            print(row)
print(f"{'all':14} {'':>4} {'':>5} {mean([v for k, vs in cells.items() if k[3] == rules[0] and k[4] == 'mean' for v in vs]):6.3f}"
      + ''.join(' | ' + ' ' * 6 + ''.join(
          f" {mean([mean(vs) for k, vs in cells.items() if k[3] == rule and k[4] == c]):6.3f}" for c in ('alone', 'no-dp', 'dp'))
          for rule in rules))
