# The twelfth pass's view splits (issue 56), fixed before any run: for each data set of prep.py,
# contiguous halves and alternating columns. Sourced by all.sh; node-seeds/run.sh and floor.sh read SPECS.
D=docs/results/harm-study/twelfth/data
export SPECS="$D/slid.csv education,age male,english,french;$D/slid.csv education,male,french age,english;$D/psid.csv age,educatn hours,kids,married;$D/psid.csv age,hours,married educatn,kids"
