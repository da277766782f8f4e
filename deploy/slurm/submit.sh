#!/bin/bash
# Submit the sharded grid and its merge: the merge starts only when every array task succeeded.
# Arguments are passed on to the grid (e.g. `deploy/slurm/submit.sh --dp calibrated --epsilon 1`).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
array=$(sbatch --parsable "$here/experiment.sbatch" "$@")
sbatch --dependency="afterok:${array}" "$here/merge.sbatch"
echo "grid: job ${array} (4 tasks); merge queued after it"
