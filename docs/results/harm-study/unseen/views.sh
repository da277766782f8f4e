#!/bin/sh
# Two views of a data set for `experiment frontier --views`: make.py's train, pool and test
# files, and the two-party example's configs pointed at them (run from the repository root).
#   sh docs/results/harm-study/unseen/views.sh DATA A_COLS B_COLS masked|unmasked OUT_DIR FEDERATION_ID
set -e
python3 docs/results/harm-study/unseen/make.py "$1" "$2" "$3" "$4" "$5" > /dev/null
for p in a b; do
  sed -e "s#federation_id = \"ccpp-two-party\"#federation_id = \"$6\"#" -e 's#target = "PE"#target = "y"#' \
    examples/two-party/party-$p.toml > "$5/party-$p.toml"
done
