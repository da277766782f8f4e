"""One direction of the querier's uncertain region (docs/results.md, "the best this family can do").

    python3 docs/results/harm-study/one_direction.py

The querier's error there is e0 ~ N(0, p); an answer carries that direction with independent noise
n ~ N(0, s²) (at ε = 1 the capped release's noise is about the prior's size, s² ≈ p). Read with
weight w the error becomes e1 = (1 − w)·e0 + w·n; the Bayes weight is w* = p/(p + s²). Printed:
the chance that the direction gets worse (e1² > e0²) and the expected gain in its mean squared
error, for w = w*, w*/3, w*/10, and the limit of the chance as w → 0,
P(n/e0 > 1) = 1/2 − arctan(√p/s)/π (a Cauchy tail): no weight, however small, makes a worse
direction rarer than that; only the size of the change, which shrinks with the gain, can stay
under a tolerance. 400,000 draws, seeded.
"""
import math, random

rng = random.Random(0)
N = 400_000
for s2 in (0.25, 1.0, 4.0):
    draws = [(rng.gauss(0, 1), rng.gauss(0, math.sqrt(s2))) for _ in range(N)]
    ws = 1 / (1 + s2)
    parts = []
    for c in (1.0, 1 / 3, 0.1):
        w = c * ws
        worse = sum(((1 - w) * e + w * n) ** 2 > e * e for e, n in draws) / N
        gain = 1 - sum(((1 - w) * e + w * n) ** 2 for e, n in draws) / sum(e * e for e, _ in draws)
        parts.append(f"w = {c:.2g}·w*: worse {100 * worse:.1f}%, gain {100 * gain:.1f}%")
    limit = 0.5 - math.atan(1 / math.sqrt(s2)) / math.pi
    print(f"s²/p = {s2}: " + "; ".join(parts) + f"; w → 0: worse {100 * limit:.1f}%")
