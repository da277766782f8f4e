"""Print the sixth pass's tables from the cells beside this file (docs/results.md)."""
import os, sys
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(here))
from cells import load as _load, pct, setting_row, shares  # noqa: E402
def load(name):
    return _load(here, name)
names = ['default', 'queries10', 'queries15', 'queries50', 'queries100', 'range2', 'range1.5',
         'rank-full', 'rank-k3', 'rank-k10']
print('| setting | hurt, no DP | hurt, ε = 1 | Σ gain, no DP | Σ gain, ε = 1 | CCPP 100 | CCPP 400 | Bikeshare 100 | Bikeshare 400 | Wage 100 | Wage 400 |')
print('|---|---|---|---|---|---|---|---|---|---|---|')
for n in names:
    print(setting_row(n, load(n), ['ccpp masked', 'bikeshare masked', 'wage masked']))
print()
print('| data (n = 100) | ε | alone | no DP | DP | hurt | share per party |')
print('|---|---|---|---|---|---|---|')
for c in load('epsilons'):
    print(f"| {c['data']} | {c['epsilon']:g} | {c['alone']:.4f} | {c['no_dp']:.4f} | {c['dp']:.4f} | {c['hurt']}/{c['runs']} | {shares(c)} |")
print()
print('| data | n_obs | seeds | alone | no DP (hurt) | ε = 1 (hurt) | share per party |')
print('|---|---|---|---|---|---|---|')
for c in load('seeds40'):
    print(f"| {c['data']} | {c['nobs']} | 0–39 | {c['alone']:.3f} | {c['no_dp']:.3f} ({c['hurt_no_dp']}/{c['runs']}) | {c['dp']:.3f} ({c['hurt']}/{c['runs']}) | {shares(c)} |")
print()
print('| CCPP masked, n = 100, seeds 0–39 | no DP (hurt) | ε = 1 (hurt) | share per party |')
print('|---|---|---|---|')
for n in ['base', 'temper3', 'own100', 'check2', 'refitown', 'loo', 'huge']:
    c = load('ccpp40-' + n)[0]
    print(f"| {n} | {c['no_dp']:.3f} ({c['hurt_no_dp']}/{c['runs']}) | {c['dp']:.3f} ({c['hurt']}/{c['runs']}) | {shares(c)} |")
print()
print('| decline ratio R | hurt, ε = 1 | mean DP gain | CCPP 100 | CCPP 400 | Bikeshare 100 | Wage 100 |')
print('|---|---|---|---|---|---|---|')
for r in ['0.25', '0.3', '0.4', '0.5']:
    cs = {(c['data'], c['nobs']): c for c in load('decline-' + r)}
    runs = sum(c['runs'] for c in cs.values())
    gain = sum((c['alone'] - c['dp']) * c['runs'] for c in cs.values()) / runs
    cols = [shares(cs[k]) for k in [('ccpp masked', 100), ('ccpp masked', 400), ('bikeshare masked', 100), ('wage masked', 100)]]
    print(f"| {r} | {sum(c['hurt'] for c in cs.values())}/{runs} | {gain:+.4f} | " + ' | '.join(cols) + ' |')
