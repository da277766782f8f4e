"""Summarise the harm study's cells (docs/results.md, "Does co-training ever hurt a party?"):
    python3 docs/results/harm-study/summarise.py [config …]
"""
import json,sys,glob,os
names=sys.argv[1:] or ['base','refit-own','noise-own','noise-resp','own-own','posterior']
rows={}
for n in names:
    f=os.path.join(os.path.dirname(os.path.abspath(__file__)), f'{n}.jsonl')
    if not os.path.exists(f): continue
    for l in open(f):
        c=json.loads(l); rows[(c['data'],c['nobs'],n)]=c
keys=sorted(set((d,k) for d,k,_ in rows))
print(f"{'data':22} {'n':>4} {'config':11} {'mean':>6} {'alone':>6} {'noDP':>6} {'h':>3} {'DP':>6} {'rec':>6} {'h':>3}")
tot={}
for d,k in keys:
    for n in names:
        c=rows.get((d,k,n))
        if not c: continue
        r=c['recovered']; r='–' if r is None or r!=r else f"{100*r:.0f}%"
        print(f"{d:22} {k:>4} {n:11} {c['mean_baseline']:6.3f} {c['alone']:6.3f} {c['no_dp']:6.3f} {c['hurt_no_dp']:>3} {c['dp']:6.3f} {r:>6} {c['hurt']:>3}")
        t=tot.setdefault(n,[0,0,0,0,0]); t[0]+=c['hurt_no_dp']; t[1]+=c['hurt']; t[2]+=c['runs']; t[3]+=c['alone']-c['no_dp']; t[4]+=c['alone']-c['dp']
    print()
for n,t in tot.items(): print(f"{n:11} hurt noDP {t[0]}/{t[2]}  hurt DP {t[1]}/{t[2]}  sum gain noDP {t[3]:+.3f}  DP {t[4]:+.3f}")
# Per party: the no-DP gain ± its SE and the share recovered ± its SE (cells written from
# 2026-11-27 on carry share_se; earlier ones print the share alone).
print()
for d,k in keys:
    for n in names:
        c=rows.get((d,k,n))
        if not c or 'per_party' not in c: continue
        def one(p):
            g=f"{p['party']} gain {p['gain']:+.4f} ± {p['gain_se']:.4f}"
            if p['share'] is None: return g+" (no gain to recover)"
            se=p.get('share_se')
            return g+f" share {100*p['share']:.0f}%"+(f" ± {100*se:.0f}" if se is not None else "")
        print(f"{d:22} {k:>4} {n:11} "+"; ".join(one(p) for p in c['per_party']))
