#!/bin/bash
# Submit a sharded experiment grid to Slurm: a job array whose task k runs shard k/N of the grid
# (experiment.sbatch), and a merge job (merge.sbatch) that starts once every task has ended —
# whatever its outcome, so it never waits forever — checks every shard and merges them into
# RESULTS/merged, or names the tasks that failed.
#
#   deploy/slurm/submit.sh [SUBMIT OPTIONS] [simulated|ccpp] [GRID OPTIONS]
#
# GRID OPTIONS are those of `dpcotrain-lab experiment simulated|ccpp` (see its --help), e.g.
#   deploy/slurm/submit.sh --dp calibrated --epsilon 1
#   deploy/slurm/submit.sh --shards 8 --partition long ccpp --seeds 20
# The grid defaults to simulated. Of the defaults below, each applies only where you gave no
# value for that flag: --dp thesis --seeds 10. --shard and --out are set for each task (one
# folder per shard under RESULTS); --fresh is refused (a requeued task resumes its runs.jsonl;
# to start over, use another --results or delete it).
#
# SUBMIT OPTIONS (before the grid; `--opt VALUE` or `--opt=VALUE`):
#   --shards N        tasks in the array, one shard each (default 4)
#   --results DIR     folder every node sees (default: $RESULTS, else ./results); it gets
#                     shard-K/, merged/, logs/ (each task's and the merge's output) and status/
#   --partition P  --account A  --qos Q      passed to sbatch for both jobs
#   --cpus N  --mem SIZE  --time LIMIT       per task (defaults: 2, 4G, 24:00:00)
#   --merge-time LIMIT                       the merge job's limit (default 1:00:00)
# Any other sbatch setting: sbatch's own SBATCH_* environment variables (e.g. SBATCH_CONSTRAINT),
# which apply to both jobs.
#
# The binary: $DPCOTRAIN_LAB if set, else `dpcotrain-lab` on PATH, resolved here to an absolute path that
# every node must reach (a shared file system). Before anything is queued the grid options are
# checked by that binary (an empty slice of the grid into a temporary folder), so a typo or a
# bad value is reported here, not by every task.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
die() {
    echo "submit.sh: $*" >&2
    exit 2
}

shards=4
results=${RESULTS:-$PWD/results}
common=() # sbatch options for both jobs
grid_opts=()
merge_time=1:00:00
cpus=2 mem=4G partition= # the task's request (experiment.sbatch's defaults unless given)
while (($#)); do
    opt=$1 val=
    case $opt in
    --shards | --results | --partition | --account | --qos | --cpus | --mem | --time | --merge-time)
        (($# >= 2)) || die "$opt needs a value"
        val=$2
        shift 2
        ;;
    --shards=* | --results=* | --partition=* | --account=* | --qos=* | --cpus=* | --mem=* | --time=* | --merge-time=*)
        val=${opt#*=} opt=${opt%%=*}
        shift
        ;;
    *) break ;;
    esac
    [[ -n $val ]] || die "$opt needs a value"
    case $opt in
    --shards) shards=$val ;;
    --results) results=$val ;;
    --partition | --account | --qos) common+=("$opt=$val") ;;&
    --partition) partition=$val ;;
    --cpus) grid_opts+=("--cpus-per-task=$val") cpus=$val ;;
    --mem) grid_opts+=("--mem=$val") mem=$val ;;
    --time) grid_opts+=("--time=$val") ;;
    --merge-time) merge_time=$val ;;
    esac
done
[[ $shards =~ ^[1-9][0-9]*$ ]] || die "--shards must be a whole number ≥ 1, not '$shards'"

grid=simulated
case ${1:-} in
simulated | ccpp)
    grid=$1
    shift
    ;;
-* | '') ;;
*) die "'$1' is not a grid this script shards (simulated or ccpp)" ;;
esac

has() { # has FLAG ARGS…: whether ARGS give FLAG (as FLAG VALUE or FLAG=VALUE)
    local flag=$1 a
    shift
    for a in "$@"; do
        [[ $a == "$flag" || $a == "$flag="* ]] && return 0
    done
    return 1
}
for flag in --shard --out --fresh; do
    if has "$flag" "$@"; then
        die "$flag is not a grid option here: each task runs its own --shard into RESULTS/shard-K (use --shards N and --results DIR)"
    fi
done
args=("$@")
defaults=(--dp thesis --seeds 10)
for ((i = 0; i < ${#defaults[@]}; i += 2)); do
    has "${defaults[i]}" "$@" || args+=("${defaults[i]}" "${defaults[i + 1]}")
done

# The binary, as an absolute path the tasks can run.
bin=${DPCOTRAIN_LAB:-dpcotrain-lab}
if ! path=$(command -v -- "$bin"); then
    if [[ -n ${DPCOTRAIN_LAB:-} ]]; then
        die "DPCOTRAIN_LAB=$DPCOTRAIN_LAB is not an executable file"
    fi
    die "dpcotrain-lab is not on PATH: add the folder that holds it (e.g. target/release after cargo build --release -p dpcotrain-lab) to PATH, or set DPCOTRAIN_LAB=/path/to/dpcotrain-lab; every node must reach that path"
fi
[[ $path == /* ]] || path="$(cd "$(dirname "$path")" && pwd)/$(basename "$path")"
command -v sbatch >/dev/null || die "sbatch not found: run this on a Slurm submit host"
[[ $cpus =~ ^[1-9][0-9]*$ ]] || die "--cpus must be a whole number ≥ 1, not '$cpus'"
mem_mb() { # a Slurm memory size (default unit M; K, M, G, T suffixes) in megabytes
    local n=${1%[KkMmGgTt]} u=${1: -1}
    [[ $n =~ ^[0-9]+$ ]] || return 1
    case $u in
    K | k) echo $((n / 1024)) ;; G | g) echo $((n * 1024)) ;; T | t) echo $((n * 1024 * 1024)) ;; *) echo "$n" ;;
    esac
}
want_mb=$(mem_mb "$mem") || die "--mem must be a size such as 4G or 4096M, not '$mem'"

# A task that asks more CPUs or memory than any node of the partition has would wait in the
# queue forever (and the merge job behind it): refuse it here, naming the largest node.
# Without --partition the jobs go to the default one (sinfo marks it with a *).
if command -v sinfo >/dev/null; then
    if all=$(sinfo -h -N -o '%P %c %m' 2>/dev/null) &&
        nodes=$(echo "$all" | awk -v p="$partition" '(p == "" && $1 ~ /\*$/) || (p != "" && ($1 == p || $1 == p "*")) {print $2, $3}') &&
        [[ -n $nodes ]]; then
        read -r max_cpus max_mb < <(echo "$nodes" | awk '{m = $2 + 0; if ($1 > c) c = $1; if (m > b) b = m} END {print c + 0, b + 0}')
        fit=$(echo "$nodes" | awk -v c="$cpus" -v m="$want_mb" '$1 >= c && $2 + 0 >= m {n++} END {print n + 0}')
        ((fit > 0)) || die "no node${partition:+ in partition $partition} has --cpus $cpus and --mem $mem (the largest have $max_cpus CPUs, ${max_mb}M): the tasks would wait forever; nothing was submitted"
    elif [[ -n $partition && -n ${all:-} ]]; then
        die "--partition $partition: sinfo lists no node in it (partitions: $(echo "$all" | awk '{print $1}' | sort -u | tr '\n' ' '))"
    else
        echo "submit.sh: note: sinfo lists no node${partition:+ in partition $partition}; the task size is not checked" >&2
    fi
fi

# The grid options, checked by the binary itself on an empty slice of the grid.
check=$(mktemp -d)
trap 'rm -rf "$check"' EXIT
if ! "$path" experiment "$grid" "${args[@]}" --shard 999999999/1000000000 --out "$check/grid" >"$check/out" 2>&1; then
    echo "submit.sh: the grid options are refused; nothing was submitted:" >&2
    grep -v '^ *$' "$check/out" >&2 || true
    exit 2
fi
runs=$(sed -n 's/^ *"grid_runs": *\([0-9]*\).*/\1/p' "$check/grid/shard.json")
[[ -n $runs ]] || die "could not read the grid's size from $check/grid/shard.json"
((shards <= runs)) || echo "submit.sh: note: $shards shards for $runs runs: shards ≥ $runs are empty" >&2

mkdir -p "$results/logs" "$results/status" || die "cannot create $results"
results=$(cd "$results" && pwd)
array=$(sbatch --parsable "${common[@]}" "${grid_opts[@]}" --array="0-$((shards - 1))" \
    --output="$results/logs/grid-%A_%a.out" \
    "$here/experiment.sbatch" "$path" "$results" "$shards" "$grid" "${args[@]}")
array=${array%%;*}
merge=$(sbatch --parsable "${common[@]}" --time="$merge_time" --dependency="afterany:${array}" \
    --output="$results/logs/merge-%j.out" \
    "$here/merge.sbatch" "$path" "$results" "$shards" "$array")
merge=${merge%%;*}
echo "grid: job ${array} (${shards} tasks, ${runs} runs): dpcotrain-lab experiment ${grid} ${args[*]}"
echo "merge: job ${merge}, after every task has ended, into ${results}/merged (logs in ${results}/logs)"
