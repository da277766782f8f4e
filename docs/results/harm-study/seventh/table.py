"""Print the seventh pass's table from the cells beside this file (docs/results.md)."""
import os, sys
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(here))
from cells import load as _load, pct, setting_row, shares  # noqa: E402
def load(name):
    return _load(here, name)
rows = [('likelihood (the default)', '../sixth/default.jsonl'), ('functionals', 'functionals.jsonl'),
        ('likelihood, no discount', 'likelihood-reported.jsonl'), ('functionals, no discount', 'functionals-reported.jsonl')]
print('| reading | hurt, no DP | hurt, ε = 1 | Σ gain, no DP | Σ gain, ε = 1 | CCPP 100 | CCPP 400 | Bikeshare 100 | Bikeshare 400 |')
print('|---|---|---|---|---|---|---|---|---|')
for name, path in rows:
    print(setting_row(name, load(path), ['ccpp masked', 'bikeshare masked']))
print()
print('| CCPP masked, n = 100, full rank | no DP (hurt) | ε = 1 (hurt) | share per party |')
print('|---|---|---|---|')
for a in ['likelihood', 'functionals']:
    c = load(f'ccpp100-{a}-rankfull.jsonl')[0]
    print(f"| {a} | {c['no_dp']:.4f} ({c['hurt_no_dp']}/{c['runs']}) | {c['dp']:.4f} ({c['hurt']}/{c['runs']}) | {shares(c)} |")
print()
print('| simulated, masked, r = 0.99 | n_obs | no DP (hurt) | ε = 1 (hurt) | share per party |')
print('|---|---|---|---|---|')
for a in ['likelihood', 'functionals']:
    for c in load(f'sim099-{a}.jsonl'):
        print(f"| {a} | {c['nobs']} | {c['no_dp']:.4f} ({c['hurt_no_dp']}/{c['runs']}) | {c['dp']:.4f} ({c['hurt']}/{c['runs']}) | {shares(c)} |")
print()
print('D32, masked real data, 20 seeds (the share columns at n = 100 and 400):')
print('| release length-scale | hurt, no DP | hurt, ε = 1 | Σ gain, no DP | Σ gain, ε = 1 | CCPP 100 | CCPP 400 | Bikeshare 100 | Bikeshare 400 | Wage 100 | Wage 400 |')
print('|---|---|---|---|---|---|---|---|---|---|---|')
real = ['ccpp masked', 'bikeshare masked', 'wage masked']
for name, path in [('ℓ = 1 (absolute, before D32)', '../sixth/default.jsonl'), ('ℓ = 2', 'abs-l2.jsonl'),
                   ('ℓ = 3', 'abs-l3.jsonl'), ('ℓ = 5', 'abs-l5.jsonl'), ('ℓ = √D', 'abs-sqrtd.jsonl'), ('**ℓ = √(2D) (median unit, D32)**', 'median.jsonl'),
                   ('√(2D), s₀² = 0.3', 'median-noise0.3.jsonl'), ('√(2D), s₀² = 0.03', 'median-noise0.03.jsonl'),
                   ('1.5 × √(2D)', 'median-x1.5.jsonl')]:
    print(setting_row(name, load(path), real))
print()
print('Seeds 0–39:')
print('| release length-scale | hurt, no DP | hurt, ε = 1 | Σ gain, no DP | Σ gain, ε = 1 | CCPP 100 | CCPP 400 | Bikeshare 100 | Bikeshare 400 | Wage 100 | Wage 400 |')
print('|---|---|---|---|---|---|---|---|---|---|---|')
for name, path in [('ℓ = 1 (absolute)', '../sixth/seeds40.jsonl'), ('ℓ = √(2D) (median)', 'seeds40-median.jsonl')]:
    print(setting_row(name, load(path), real))
print()
def totals(cells):
    runs = sum(c['runs'] for c in cells)
    return (f"{sum(c['hurt_no_dp'] for c in cells)}/{runs}", f"{sum(c['hurt'] for c in cells)}/{runs}",
            f"{sum(c['alone'] - c['no_dp'] for c in cells):+.3f}", f"{sum(c['alone'] - c['dp'] for c in cells):+.3f}")
print('Held out (the fourth and fifth passes\' data, answers discounted by own:30, 20 seeds):')
print('| data | release length-scale | hurt, no DP | hurt, ε = 1 | Σ gain, no DP | Σ gain, ε = 1 |')
print('|---|---|---|---|---|---|')
for data, base in [('airfoil, concrete (n = 100, 250)', 'unseen'), ('Computers, BudgetFood (n = 100, 400)', 'unseen400')]:
    for name, path in [('ℓ = 1 (absolute)', f'../{base}/cells-own-30.jsonl'), ('ℓ = √(2D) (median)', f'{base}-median.jsonl')]:
        print(f"| {data} | {name} | " + ' | '.join(totals(load(path))) + ' |')
print()
print('One-dimensional simulated views (masked and unmasked, n = 100 and 400, 20 seeds):')
print('| r | release length-scale | hurt, no DP | hurt, ε = 1 | Σ gain, no DP | Σ gain, ε = 1 |')
print('|---|---|---|---|---|---|')
for r in ['0.9', '0.99']:
    for u in ['absolute', 'median']:
        print(f"| {r} | {u} | " + ' | '.join(totals(load(f'sim{r}-{u}.jsonl'))) + ' |')
