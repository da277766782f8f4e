"""Summarise the unseen-data cells: python3 summarise.py DIR [V ...] (cells-V.jsonl, a ":" in V spelled "-"; default V: reported 3 10)."""
import json, sys, os
d = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
cells = {}
vs = sys.argv[2:] or ['reported', '3', '10']
for v in vs:
    for l in open(os.path.join(d, f"cells-{v.replace(':', '-')}.jsonl")):
        c = json.loads(l); cells[(c['data'], c['nobs'], v)] = c
print(f"{'data':24} {'n':>4} {'mean':>6} {'alone':>6} | " + ' | '.join(f'answers {v}: noDP (hurt) ε=1 (hurt)' for v in vs))
for dk, n in sorted(set((a, b) for a, b, _ in cells)):
    c = cells[(dk, n, vs[0])]
    row = [f"{cells[(dk, n, v)]['no_dp']:.3f} ({cells[(dk, n, v)]['hurt_no_dp']:>2}) {cells[(dk, n, v)]['dp']:.3f} ({cells[(dk, n, v)]['hurt']:>2})" for v in vs]
    print(f"{dk:24} {n:>4} {c['mean_baseline']:6.3f} {c['alone']:6.3f} | " + ' | '.join(row))
for v in vs:
    cs = [c for (a, b, w), c in cells.items() if w == v]
    runs = sum(c['runs'] for c in cs)
    g0 = sum((c['alone'] - c['no_dp']) * c['runs'] for c in cs) / runs
    g1 = sum((c['alone'] - c['dp']) * c['runs'] for c in cs) / runs
    print(f"answers {v:>8}: {runs} party-runs, hurt {sum(c['hurt_no_dp'] for c in cs)} without DP and {sum(c['hurt'] for c in cs)} at ε = 1; mean gain {g0:+.4f} and {g1:+.4f}")
