"""Issue 56, the twelfth pass: which covariates are constant on each party's labelled rows (its train file, of which
each split draws n_obs rows) in the view folders that node-seeds/run.sh writes under OUT/views.
    python3 docs/results/harm-study/twelfth/constant.py OUT/views"""
import csv, glob, os, sys

for d in sorted(glob.glob(os.path.join(sys.argv[1], '*'))):
    for f in sorted(glob.glob(os.path.join(d, 'data', '*', 'train.csv'))):
        rows = list(csv.DictReader(open(f)))
        cols = [c for c in rows[0] if c != 'y']
        const = [c for c in cols if len({r[c] for r in rows}) == 1]
        print(f"{os.path.basename(d):<14} {f.split(os.sep)[-2]:<8} {len(rows):>5} rows; constant: {', '.join(const) or '-'}")
