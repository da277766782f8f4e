"""Shared by the passes' table scripts: read a cell file, print shares as the report does."""
import json, os


def load(here, name):
    """The cells of `name` (a path relative to `here`, with or without .jsonl)."""
    path = os.path.join(here, name if name.endswith('.jsonl') else name + '.jsonl')
    return [json.loads(l) for l in open(path)]


def pct(x):
    """A percentage with the report's minus sign (U+2212) and no sign on a rounded zero."""
    v = round(100 * x)
    return f"{'−' if v < 0 else ''}{abs(v)}"


def shares(c):
    """Each party's share ± its SE, '–' where it has no gain beyond 2 SE."""
    return '; '.join('–' if p['share'] is None else f"{pct(p['share'])}% ± {pct(p['share_se'])}"
                     for p in c['per_party'])


def setting_row(name, cells, datas):
    """One table row for a setting: its hurt counts and summed gains over every cell, then each
    party's shares in the cells of `datas` at n = 100 and 400."""
    cs = {(c['data'], c['nobs']): c for c in cells}
    runs = sum(c['runs'] for c in cs.values())
    row = [name, f"{sum(c['hurt_no_dp'] for c in cs.values())}/{runs}", f"{sum(c['hurt'] for c in cs.values())}/{runs}",
           f"{sum(c['alone']-c['no_dp'] for c in cs.values()):+.3f}", f"{sum(c['alone']-c['dp'] for c in cs.values()):+.3f}"]
    row += [shares(cs[(d, k)]) for d in datas for k in [100, 400]]
    return '| ' + ' | '.join(row) + ' |'
