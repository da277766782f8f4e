"""Usage: python3 make.py DATA|PATH.csv A_COLS B_COLS masked|unmasked OUT_DIR   (run from the repository root)

Two masked views of a UCI data set for `experiment frontier --views` (unseen by every co-training experiment).
Public standardisation of every column over the whole file; test 250 and pool 250 drawn at random (seed 0);
the remaining rows split by 2-means on all covariates: party A's labelled rows from one cluster, B's from the other.
Also OUT_DIR/pool-labels.csv, the pool's true labels, for `experiment frontier --pool-labels` only."""
import csv, random, sys, os, math
name, a_cols, b_cols = sys.argv[1], sys.argv[2].split(','), sys.argv[3].split(',')
masked = sys.argv[4] != 'unmasked'
out = sys.argv[5]
src = name if name.endswith('.csv') else f'data/uci/{name}.csv'  # a UCI name, or a CSV path with a column y
rows = list(csv.DictReader(open(src)))
cols = list(rows[0].keys())
X = [[float(r[c]) for c in cols] for r in rows]
mu = [sum(x[j] for x in X)/len(X) for j in range(len(cols))]
sd = [math.sqrt(sum((x[j]-mu[j])**2 for x in X)/(len(X)-1)) for j in range(len(cols))]
Z = [[(x[j]-mu[j])/sd[j] for j in range(len(cols))] for x in X]
rng = random.Random(0)
idx = list(range(len(Z))); rng.shuffle(idx)
test, pool, rest = idx[:250], idx[250:500], idx[500:]
feat = [j for j, c in enumerate(cols) if c != 'y']
# 2-means (Lloyd, 50 iterations) on the standardised covariates of the remaining rows
cent = [Z[rest[0]], Z[rest[1]]]
for _ in range(50):
    lab = [min(range(2), key=lambda k: sum((Z[i][j]-cent[k][j])**2 for j in feat)) for i in rest]
    for k in range(2):
        m = [i for i, l in zip(rest, lab) if l == k]
        cent[k] = [sum(Z[i][j] for i in m)/len(m) for j in range(len(cols))]
clusters = [[i for i, l in zip(rest, lab) if l == k] for k in range(2)]
if not masked:
    clusters = [rest[0::2], rest[1::2]]
for party, view, train in [('a', a_cols, clusters[0]), ('b', b_cols, clusters[1])]:
    d = f'{out}/data/party-{party}'; os.makedirs(d, exist_ok=True)
    for fname, ids, with_y in [('train', train, True), ('pool', pool, False), ('test', test, True)]:
        with open(f'{d}/{fname}.csv', 'w') as f:
            hdr = view + (['y'] if with_y else [])
            f.write(','.join(hdr) + '\n')
            for i in ids:
                f.write(','.join(repr(Z[i][cols.index(c)]) for c in hdr) + '\n')
    print(name, party, view, 'train rows', len(train))
# The pool's true labels, for the lab only (`experiment frontier --pool-labels`: the true-label
# floor and the trace's oracles). Outside every party's folder: no node is given this file.
with open(f'{out}/pool-labels.csv', 'w') as f:
    f.write('y\n')
    for i in pool:
        f.write(repr(Z[i][cols.index('y')]) + '\n')
