#!/usr/bin/env python3
"""Counterfactuals for the Table C.1 small-n bias (issue 16; docs/results.md, "Table C.1").

An independent numpy re-implementation of the private-only fit of Thomas 2017 §4.3.1 (one
1-D exponentiated-quadratic GP per party, ML-II hyperparameters, test RMSE against y on 500
unmasked test points; data of §4.3.1.1 / docs/decisions.md D1-D2) in which each ambiguous
choice is a switch. For every variant it prints the mean of (ours - thesis) over the Table C.1
cells (Thomas 2017 App. C) for n_obs 25 and 50 and the sign test of those differences.

It shares no code or random numbers with the Rust binary; its baseline (D17: L-BFGS on log θ,
start s² = Var(y), ℓ = 1, σ² = 0.1·Var(y), bounds as D17, best of 4 starts) lands where
`dpcotrain-lab experiment simulated --rounds 1` does (+0.016 to +0.02 unmasked).

    python3 c1_counterfactuals.py [--seeds 40] [--variants base,gpy,...] > out.md
"""
import argparse, math, sys
import numpy as np
from scipy.optimize import minimize
from scipy.linalg import cho_solve
from scipy.stats import binomtest
from scipy.special import expit

def draw(rng, r, ci, n):
    y = rng.standard_normal(n); s = math.sqrt(1-r*r)
    x1 = r*y + s*rng.standard_normal(n)
    x2 = r*y + s*rng.standard_normal(n) if ci else x1.copy()
    return y, x1, x2

def nlml(params, x, y, mean_kind, ret_grad=True):
    # params: log s2, log l, log sn2, [c or (c,b)]
    s2, l, sn2 = np.exp(params[:3])
    m = np.zeros_like(y); 
    if mean_kind == 'const': m = params[3]*np.ones_like(y)
    if mean_kind == 'linear': m = params[3] + params[4]*x
    d2 = (x[:,None]-x[None,:])**2
    E = np.exp(-0.5*d2/l**2); K = s2*E; n=len(y)
    A = K + (sn2+1e-10)*np.eye(n)
    try: L = np.linalg.cholesky(A)
    except np.linalg.LinAlgError: return (1e10, np.zeros_like(params)) if ret_grad else 1e10
    rres = y-m
    a = cho_solve((L,True), rres)
    val = 0.5*rres@a + np.log(np.diag(L)).sum() + 0.5*n*math.log(2*math.pi)
    if not ret_grad: return val
    Ai = cho_solve((L,True), np.eye(n)); W = np.outer(a,a) - Ai
    g = np.zeros_like(params)
    g[0] = -0.5*np.sum(W*K)            # d/dlog s2
    g[1] = -0.5*np.sum(W*(K*d2/l**2))  # d/dlog l
    g[2] = -0.5*np.trace(W)*sn2
    if mean_kind == 'const': g[3] = -np.sum(a)
    if mean_kind == 'linear': g[3] = -np.sum(a); g[4] = -a@x
    return val, g

def softplus(z): return np.logaddexp(0, z)
def inv_softplus(v): return np.log(np.expm1(v))

def fit(x, y, cfg, rng):
    mean_kind = cfg.get('mean','zero')
    nm = {'zero':0,'const':1,'linear':2}[mean_kind]
    lo = cfg.get('bounds', [(1e-4,1e2),(1e-3,1e3),(1e-6,10)])
    vy = np.var(y)
    if cfg.get('start','d17') == 'gpy':
        starts = [np.array([1.0,1.0,1.0])]
    else:
        starts = [np.array([vy, 1.0, 0.1*vy])]
    for _ in range(cfg.get('restarts',3)):
        starts.append(np.exp(np.log(starts[0]) + rng.normal(0, 1.0, 3)))
    best=None
    for st in starts:
        st = np.clip(st, [b[0] for b in lo], [b[1] for b in lo])
        if cfg.get('transform','log') == 'log':
            z0 = np.concatenate([np.log(st), np.zeros(nm)])
            bnds = [(math.log(a),math.log(b)) for a,b in lo] + [(None,None)]*nm if cfg.get('use_bounds',True) else None
            def f(z):
                v,g = nlml(z,x,y,mean_kind)
                return v,g
            res = minimize(f, z0, jac=True, method='L-BFGS-B', bounds=bnds, options=dict(maxiter=cfg.get('maxiter',1000)))
            z = res.x; val = res.fun
        else:  # GPy: softplus transform, unbounded
            z0 = np.concatenate([inv_softplus(st), np.zeros(nm)])
            def f(u):
                th = softplus(u[:3]) + 1e-12
                z = np.concatenate([np.log(th), u[3:]])
                v,g = nlml(z,x,y,mean_kind)
                # chain: d/du = d/dlogth * dlogth/du = g * sigmoid(u)/th
                sig = expit(u[:3])
                gg = g.copy(); gg[:3] = g[:3]*sig/th
                return v, gg
            res = minimize(f, z0, jac=True, method='L-BFGS-B', options=dict(maxiter=cfg.get('maxiter',1000)))
            u=res.x; z = np.concatenate([np.log(softplus(u[:3])+1e-12), u[3:]]); val=res.fun
        if best is None or val < best[0]: best=(val,z)
    return best[1]

def predict(z, x, y, xs, mean_kind):
    s2,l,sn2 = np.exp(z[:3])
    mfun = (lambda t: 0*t) if mean_kind=='zero' else ((lambda t: z[3]+0*t) if mean_kind=='const' else (lambda t: z[3]+z[4]*t))
    K = s2*np.exp(-0.5*(x[:,None]-x[None,:])**2/l**2) + (sn2+1e-10)*np.eye(len(x))
    Ks = s2*np.exp(-0.5*(xs[:,None]-x[None,:])**2/l**2)
    return mfun(xs) + Ks@np.linalg.solve(K, y-mfun(x))

def run(cfg, seeds, cells):
    out=[]
    for (ci,r,n) in cells:
        for seed in seeds:
            rng = np.random.default_rng([seed, int(r*100), n, ci])
            def drawm(party):
                if not cfg.get('masked'): return draw(rng, r, ci, n)
                Y=[];X1=[];X2=[]
                while len(Y)<n:
                    y,x1,x2 = draw(rng, r, ci, 1)
                    if (party==0 and x1[0]>0) or (party==1 and x2[0]<0): Y.append(y[0]);X1.append(x1[0]);X2.append(x2[0])
                return np.array(Y),np.array(X1),np.array(X2)
            tr = [drawm(p) for p in (0,1)]
            yt,xt1,xt2 = draw(rng, r, ci, cfg.get('ntest',500))
            preds=[]; zs=[]
            for party in (0,1):
                y = tr[party][0]; x = tr[party][1+party]; xt=(xt1,xt2)[party]
                yy=y.copy(); xx=x.copy(); xtt=xt.copy()
                if cfg.get('std_y'):
                    mu,sd = y.mean(), y.std(); yy=(y-mu)/sd
                if cfg.get('std_x'):
                    mx,sx = x.mean(), x.std(); xx=(x-mx)/sx; xtt=(xt-mx)/sx
                if cfg.get('fix_noise'):
                    cfg2=dict(cfg); cfg2['bounds']=[(1e-4,1e2),(1e-3,1e3),((1-r*r)*0.999999,(1-r*r))]
                else: cfg2=cfg
                z = fit(xx, yy, cfg2, rng)
                pred = predict(z, xx, yy, xtt, cfg.get('mean','zero'))
                if cfg.get('std_y'): pred = pred*sd+mu
                preds.append(pred); zs.append(z)
            for party in (0,1):
                pred = (preds[0]+preds[1])/2 if cfg.get('ensemble') else preds[party]
                mask = np.ones(len(yt),bool)
                if cfg.get('test_in_range'):
                    x=tr[party][1+party]; xt=(xt1,xt2)[party]; mask=(xt>=x.min())&(xt<=x.max())
                rm = math.sqrt(np.mean((pred[mask]-yt[mask])**2))
                z=zs[party]
                out.append(dict(ci='yes' if ci else 'no', r=r, nobs=n, seed=seed, party=party, rmse=rm,
                                s2=float(np.exp(z[0])), l=float(np.exp(z[1])), sn2=float(np.exp(z[2]))))
    return out


# Thomas 2017 Table C.1, (CI, masking, r) -> {n_obs: (mean, sd)}.
C1 = {
    ('no', 'no', 0.5): {25: (0.925, .0757), 50: (0.883, .0483)}, ('no', 'no', 0.75): {25: (0.707, .0475), 50: (0.682, .0414)},
    ('no', 'no', 0.9): {25: (0.479, .0403), 50: (0.456, .0337)}, ('no', 'no', 0.99): {25: (0.155, .0112), 50: (0.146, .00949)},
    ('yes', 'no', 0.5): {25: (0.935, .0528), 50: (0.883, .0436)}, ('yes', 'no', 0.75): {25: (0.714, .0635), 50: (0.674, .0264)},
    ('yes', 'no', 0.9): {25: (0.468, .0473), 50: (0.442, .0207)}, ('yes', 'no', 0.99): {25: (0.157, .0249), 50: (0.144, .00874)},
    ('no', 'yes', 0.5): {25: (1.00, .126), 50: (.967, .0977)}, ('no', 'yes', 0.75): {25: (.866, .135), 50: (.821, .110)},
    ('no', 'yes', 0.9): {25: (.668, .180), 50: (.649, .155)}, ('no', 'yes', 0.99): {25: (.440, .276), 50: (.333, .185)},
    ('yes', 'yes', 0.5): {25: (1.01, .0943), 50: (.975, .0710)}, ('yes', 'yes', 0.75): {25: (.874, .132), 50: (.849, .121)},
    ('yes', 'yes', 0.9): {25: (.695, .158), 50: (.635, .146)}, ('yes', 'yes', 0.99): {25: (.420, .196), 50: (.406, .223)},
}

GPY = {"start": "gpy", "transform": "softplus", "restarts": 0}
VARIANTS = {
    "base": ("D17 start, best of 4 (the binary's default reading)", {}),
    "single": ("D17 start, one start", {"restarts": 0}),
    "gpy": ("GPy: s² = ℓ = σ² = 1, softplus transform, no bounds, one start", GPY),
    "std-y": ("labels standardised with the party's train mean and sd (GPy normalizer)", {**GPY, "std_y": True}),
    "std-xy": ("covariate and labels standardised with train statistics", {**GPY, "std_x": True, "std_y": True}),
    "const-mean": ("constant mean function, fitted by ML-II", {"mean": "const"}),
    "linear-mean": ("linear mean function a + b·x, fitted by ML-II", {"mean": "linear"}),
    "true-noise": ("σ² fixed at the true 1 − r² (diagnostic)", {**GPY, "fix_noise": True}),
    "ensemble": ("RMSE of the two parties' averaged prediction (diagnostic)", {**GPY, "ensemble": True}),
    "in-range": ("RMSE over test points inside the party's training x-range (diagnostic)", {**GPY, "test_in_range": True}),
}


def table(rows, masked, agg):
    diffs = []
    for (ci, m, r), cells in C1.items():
        if m != masked:
            continue
        for n, (t, _) in cells.items():
            v = [x['rmse'] for x in rows if x['ci'] == ci and x['masked'] == m and x['r'] == r and x['nobs'] == n]
            if v:
                diffs.append(((np.median(v) if agg == 'median' else np.mean(v)) - t, n))
    pos = sum(d > 0.0005 for d, _ in diffs)
    neg = sum(d < -0.0005 for d, _ in diffs)
    p = binomtest(pos, pos + neg).pvalue if pos + neg else 1.0
    by = {n: np.mean([d for d, k in diffs if k == n]) for n in (25, 50)}
    return np.mean([d for d, _ in diffs]), pos, neg, p, by


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=40)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--masked", default="no,yes")
    a = ap.parse_args()
    print(f"seeds 0..{a.seeds - 1}, n_obs 25 and 50, both CI values, r in 0.5 / 0.75 / 0.9 / 0.99, both parties\n")
    print("| variant | masking | mean (ours − thesis) | n 25 | n 50 | above / below | sign-test p | median-based mean diff |")
    print("|---|---|---|---|---|---|---|---|")
    for name in a.variants.split(","):
        what, cfg = VARIANTS[name]
        for masked in a.masked.split(","):
            cells = [(ci, r, n) for ci in (False, True) for r in (0.5, 0.75, 0.9, 0.99) for n in (25, 50)]
            rows = run({**cfg, "masked": masked == "yes"}, range(a.seeds), cells)
            for x in rows:
                x['masked'] = masked
            m, pos, neg, p, by = table(rows, masked, 'mean')
            md = table(rows, masked, 'median')[0]
            print(f"| `{name}`: {what} | {masked} | {m:+.4f} | {by[25]:+.4f} | {by[50]:+.4f} | {pos} / {neg} | {p:.3g} | {md:+.4f} |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
