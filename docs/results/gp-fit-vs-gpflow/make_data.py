"""The data set of docs/results.md "gp fit against GPflow" (issue 39): N = 20,000 rows, D = 4,
x ~ U(-2, 2)^4, y = sum_d sin(1.5 x_d) + 0.1 U(-1, 1) (the shape of bench gp's data), and 500
inducing inputs drawn from the rows. Standard library only: python3 make_data.py OUTDIR"""
import math, random, sys
out = sys.argv[1] if len(sys.argv) > 1 else "."
r = random.Random(7)
rows = []
for _ in range(20000):
    x = [r.uniform(-2, 2) for _ in range(4)]
    rows.append(x + [sum(math.sin(1.5 * v) for v in x) + 0.1 * r.uniform(-1, 1)])
with open(f"{out}/ridge20k.csv", "w") as f:
    f.write("x1,x2,x3,x4,y\n")
    for row in rows:
        f.write(",".join(repr(v) for v in row) + "\n")
with open(f"{out}/Z500.csv", "w") as f:
    f.write("x1,x2,x3,x4\n")
    for i in random.Random(3).sample(range(len(rows)), 500):
        f.write(",".join(repr(v) for v in rows[i][:4]) + "\n")
