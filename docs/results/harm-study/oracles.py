"""The harm study's oracles (docs/results.md, "Does co-training ever hurt a party? The second pass").

    python3 docs/results/harm-study/oracles.py TRACE.jsonl [TRACE.jsonl …]

Each TRACE is what `dpcotrain-lab experiment frontier … --trace TRACE --trace-oracle O` wrote. For every
data set and n_obs, and for the no-DP and each DP cell, it prints how many party-runs are hurt
(worse than alone by > 1% and > 2 paired SE, as `frontier::hurt`) and the mean gain (alone −
after, RMSE) of: the protocol as run; the oracle fit given the true labels of the asked
entities; the re-read under the trace's oracle. Then the answers' calibration against the true
pool labels, hurt runs against the rest.
"""
import collections, json, math, statistics as st, sys


def rmse_change(pts, k):
    n = len(pts)
    ea = [(p[0] - p[1]) ** 2 for p in pts]
    eb = [(p[0] - p[k]) ** 2 for p in pts]
    ra, rb = math.sqrt(sum(ea) / n), math.sqrt(sum(eb) / n)
    d = [b - a for a, b in zip(ea, eb)]
    md = sum(d) / n
    # The paired SE of the RMSE change (delta method on the MSE change), as metrics::rmse_change_se.
    se = math.sqrt(sum((x - md) ** 2 for x in d) / (n - 1) / n) / (2 * ra)
    return ra, rb, se


def hurt(ra, rb, se):
    return rb - ra > 0.01 * ra and rb - ra > 2 * se


for path in sys.argv[1:]:
    traces = [json.loads(l) for l in open(path)]
    oracle = traces[0].get('oracle', '?')
    print(f'== {path} (re-read: {oracle})')
    for eps in sorted({t['epsilon'] for t in traces}, key=lambda e: -1 if e is None else e):
        cells = collections.defaultdict(lambda: [0, 0, 0, 0, 0.0, 0.0, 0.0])
        calib = {True: [], False: []}
        for t in traces:
            if t['epsilon'] != eps or 'parties' not in t:
                continue
            for p in t['parties']:
                ra, rb, se = rmse_change(p['test'], 3)
                _, ro, so = rmse_change(p['test'], 5)
                _, rr, sr = rmse_change(p['test'], 6)
                c = cells[(t['data'], t['nobs'])]
                h = hurt(ra, rb, se)
                c[0] += 1; c[1] += h; c[2] += hurt(ra, ro, so); c[3] += hurt(ra, rr, sr)
                c[4] += ra - rb; c[5] += ra - ro; c[6] += ra - rr
                a = p['answers']; s2 = p['noise_before']; q = len(a)
                err_a = st.mean((m - y) ** 2 for _, m, v, nv, om, osd, y in a)
                err_o = st.mean((om - y) ** 2 for _, m, v, nv, om, osd, y in a)
                var_a = st.mean(v for _, m, v, nv, om, osd, y in a)
                level = st.mean(m - y for _, m, v, nv, om, osd, y in a) / math.sqrt((var_a + s2) / q)
                calib[h].append(((err_a - s2) / var_a, err_a > err_o, abs(level)))
        print(f"ε = {'off' if eps is None else eps}")
        print(f"  {'data':24}{'n':>4}  hurt: run  labels  re-read   mean gain: run  labels  re-read")
        tot = [0] * 7
        for k, c in sorted(cells.items()):
            print(f"  {k[0]:24}{k[1]:4}  {c[1]:9} {c[2]:7} {c[3]:8}   {c[4]/c[0]:+14.4f} {c[5]/c[0]:+7.4f} {c[6]/c[0]:+8.4f}")
            tot = [x + y for x, y in zip(tot, c)]
        n = tot[0]
        print(f"  {'all':28}  {tot[1]:9} {tot[2]:7} {tot[3]:8}   {tot[4]/n:+14.4f} {tot[5]/n:+7.4f} {tot[6]/n:+8.4f}   ({n} party-runs)")
        for h in (True, False):
            L = calib[h]
            if L:
                print(f"  {'hurt' if h else 'not hurt':9} runs {len(L):3}: answers' (true sq. error − σ²)/reported var, median {st.median(x[0] for x in L):.2f};"
                      f" answers worse than own prediction at the asked points in {100*sum(x[1] for x in L)/len(L):.0f}%;"
                      f" |mean answer error|/its independent-reading sd, median {st.median(x[2] for x in L):.2f}")
    print()
