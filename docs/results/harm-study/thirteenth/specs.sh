# The thirteenth pass's view splits (issue 56), fixed before any run: for each data set of prep.py,
# contiguous halves and alternating columns. Sourced by all.sh; node-seeds/run.sh and floor.sh read SPECS.
D=docs/results/harm-study/thirteenth/data
export SPECS="$D/wages.csv exp,wks,bluecol,ind,south,smsa married,male,union,ed,black;$D/wages.csv exp,bluecol,south,married,union,black wks,ind,smsa,male,ed;$D/doctor.csv lc,idp,lpi,fmde,physlim,ndisease,health linc,lfam,educdec,age,male,child,black;$D/doctor.csv lc,lpi,physlim,health,lfam,age,child idp,fmde,ndisease,linc,educdec,male,black"
