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
