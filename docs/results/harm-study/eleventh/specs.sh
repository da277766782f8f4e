# The eleventh pass's view splits (issue 56), fixed before any run: for each data set of prep.py,
# contiguous halves and alternating columns. Sourced by all.sh; node-seeds/run.sh and floor.sh read SPECS.
D=docs/results/harm-study/eleventh/data
export SPECS="$D/schooling.csv ed76,exp76,kww,black south76,smsa76,momed,daded;$D/schooling.csv ed76,kww,south76,momed exp76,black,smsa76,daded;$D/star.csv treadssk,small,aide,totexpk girl,freelunk,white;$D/star.csv treadssk,aide,girl,white small,totexpk,freelunk"
