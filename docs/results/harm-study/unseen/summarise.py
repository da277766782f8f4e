"""Summarise the unseen-data cells: python3 summarise.py DIR (cells-reported.jsonl, cells-3.jsonl, cells-10.jsonl)."""
import json, sys, os
d = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
cells = {}
for v in ['reported', '3', '10']:
    for l in open(os.path.join(d, f'cells-{v}.jsonl')):
        c = json.loads(l); cells[(c['data'], c['nobs'], v)] = c
print(f"{'data':24} {'n':>4} {'mean':>6} {'alone':>6} | answers as reported: noDP (hurt) ε=1 (hurt) | +3 | +10")
for dk, n in sorted(set((a, b) for a, b, _ in cells)):
    c = cells[(dk, n, 'reported')]
    row = [f"{cells[(dk, n, v)]['no_dp']:.3f} ({cells[(dk, n, v)]['hurt_no_dp']:>2}) {cells[(dk, n, v)]['dp']:.3f} ({cells[(dk, n, v)]['hurt']:>2})" for v in ['reported', '3', '10']]
    print(f"{dk:24} {n:>4} {c['mean_baseline']:6.3f} {c['alone']:6.3f} | " + ' | '.join(row))
for v in ['reported', '3', '10']:
    cs = [c for (a, b, w), c in cells.items() if w == v]
    runs = sum(c['runs'] for c in cs)
    g0 = sum((c['alone'] - c['no_dp']) * c['runs'] for c in cs) / runs
    g1 = sum((c['alone'] - c['dp']) * c['runs'] for c in cs) / runs
    print(f"answers {v:>8}: {runs} party-runs, hurt {sum(c['hurt_no_dp'] for c in cs)} without DP and {sum(c['hurt'] for c in cs)} at ε = 1; mean gain {g0:+.4f} and {g1:+.4f}")
