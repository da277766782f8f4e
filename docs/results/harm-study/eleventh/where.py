"""Where a party's change comes from, from floor.sh's trace (docs/results.md, "The eleventh pass"):
    python3 where.py TRACE.jsonl N PARTY [SPLIT ...]
Per split and node seed, without DP and at eps = 1: the party's fitted noise variance before and after the
re-fit; at the entities it asked about, its own private-only latent sd (mean), the answers' reported variance
(mean) and their RMS error against the entities' true labels (the lab's pool labels); its test RMSE alone ->
after, and the change of its mean squared error split between the test points where its alone latent sd is
above the median (where its own rows do not reach) and the rest."""
import json, math, sys
path, nobs, party = sys.argv[1], int(sys.argv[2]), sys.argv[3]
splits = [int(s) for s in sys.argv[4:]]
print(f"{'split':>5} {'node':>4} {'eps':>4} {'sigma2 before -> after':>22} {'own sd':>6} {'ans var':>7} {'ans err':>7} {'RMSE alone -> after':>20} {'dMSE far':>9} {'dMSE near':>9}")
for line in open(path):
    r = json.loads(line)
    if r['nobs'] != nobs or (splits and r['seed'] not in splits):
        continue
    p = next(q for q in r['parties'] if q['party'] == party)
    t = p['test']  # per test point: label, alone mean, alone latent sd, after mean, ...
    rmse = lambda k: math.sqrt(sum((x[k] - x[0]) ** 2 for x in t) / len(t))
    med = sorted(x[2] for x in t)[len(t) // 2]
    d = lambda keep: sum((x[3] - x[0]) ** 2 - (x[1] - x[0]) ** 2 for x in t if keep(x)) / len(t)
    a = p['answers']  # per answer: index, mean, reported variance, DP noise variance, own mean, own sd, true label
    k = max(len(a), 1)
    own_sd, av = sum(x[5] for x in a) / k, sum(x[2] for x in a) / k
    err = math.sqrt(sum((x[1] - x[6]) ** 2 for x in a) / k)
    eps = '-' if r['epsilon'] is None else f"{r['epsilon']:g}"
    print(f"{r['seed']:>5} {r.get('node_seed', 0):>4} {eps:>4} {p['noise_before']:>10.3f} -> {p['noise_after']:.3f} {own_sd:>6.2f} {av:>7.3f} {err:>7.3f} "
          f"{rmse(1):>10.4f} -> {rmse(3):.4f} {d(lambda x: x[2] > med):>+9.4f} {d(lambda x: x[2] <= med):>+9.4f}")
