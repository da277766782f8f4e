#!/bin/sh
# The harm study at n_obs 100 and 400 on two more data sets no co-training experiment had used
# (docs/results.md, "The fifth pass"): Ecdat's Computers and BudgetFood (prep.py), two view splits
# each (contiguous halves; alternating columns), masked and unmasked, 20 seeds, ε = 1, answers as
# reported and with an extra variance of 3 and 10 (VS="own:10 own:30": K times the querier's own
# fitted noise variance, D30). Run from the repository root with the lab binary built (cargo build --release -p dpcotrain-lab); about
# 15 minutes on 2 cores.
#   sh docs/results/harm-study/unseen400/run.sh [OUT_DIR]   (default: a temporary directory)
HERE=docs/results/harm-study/unseen400/data
SPECS="$HERE/computers.csv speed,hd,ram,screen cd,multi,premium,ads,trend;$HERE/computers.csv speed,ram,cd,premium,trend hd,screen,multi,ads;$HERE/budgetfood.csv totexp,age size,town,sex;$HERE/budgetfood.csv totexp,size,sex age,town" \
NOBS=100,400 exec sh docs/results/harm-study/unseen/run.sh "$@"
