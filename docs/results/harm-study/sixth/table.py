"""Print the sixth pass's tables from the cells beside this file (docs/results.md)."""
import json, os
here = os.path.dirname(os.path.abspath(__file__))
def load(name):
    return [json.loads(l) for l in open(os.path.join(here, name + '.jsonl'))]
def shares(c):
    return '; '.join('–' if p['share'] is None else f"{100*p['share']:.0f}% ± {100*p['share_se']:.0f}"
                     for p in c['per_party'])
names = ['default', 'queries10', 'queries15', 'queries50', 'queries100', 'range2', 'range1.5',
         'rank-full', 'rank-k3', 'rank-k10']
print('| setting | hurt, no DP | hurt, ε = 1 | Σ gain, no DP | Σ gain, ε = 1 | CCPP 100 | CCPP 400 | Bikeshare 100 | Bikeshare 400 | Wage 100 | Wage 400 |')
print('|---|---|---|---|---|---|---|---|---|---|---|')
for n in names:
    cs = {(c['data'], c['nobs']): c for c in load(n)}
    runs = sum(c['runs'] for c in cs.values())
    row = [n, f"{sum(c['hurt_no_dp'] for c in cs.values())}/{runs}", f"{sum(c['hurt'] for c in cs.values())}/{runs}",
           f"{sum(c['alone']-c['no_dp'] for c in cs.values()):+.3f}", f"{sum(c['alone']-c['dp'] for c in cs.values()):+.3f}"]
    for d in ['ccpp masked', 'bikeshare masked', 'wage masked']:
        for k in [100, 400]:
            row.append(shares(cs[(d, k)]))
    print('| ' + ' | '.join(row) + ' |')
print()
print('| data (n = 100) | ε | alone | no DP | DP | hurt | share per party |')
print('|---|---|---|---|---|---|---|')
for c in load('epsilons'):
    print(f"| {c['data']} | {c['epsilon']:g} | {c['alone']:.4f} | {c['no_dp']:.4f} | {c['dp']:.4f} | {c['hurt']}/{c['runs']} | {shares(c)} |")
