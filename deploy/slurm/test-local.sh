#!/bin/bash
# The Slurm scripts, run for real: a one-node Slurm cluster on this machine (slurmctld, slurmd
# and munged on loopback, with their own config, key, ports and folders in a temporary folder),
# then deploy/slurm/submit.sh as documented, waiting for its jobs and comparing the merged
# folder with an unsharded run of the same grid, file for file and byte for byte:
#   1. submit.sh --dp calibrated --epsilon 1 --quick          (the documented form; dpcotrain-lab on PATH)
#   2. submit.sh --shards 3 --cpus 1 --mem 1G --time 10:00 --partition P ccpp --quick --seeds 3
#      --dp thesis --rounds 3                                  (DPCOTRAIN_LAB set; every submit option)
#   3. a task that fails (its shard folder cannot be created): the merge job still runs, fails,
#      and names the task — it never waits forever.
#   4. a task asking more CPUs than the node has: submit.sh refuses it, nothing is queued.
#
#   DPCOTRAIN_LAB=target/release/dpcotrain-lab deploy/slurm/test-local.sh
#
# Needs slurmctld, slurmd, sbatch and munged (Debian: slurm-wlm, munge). If they are missing it
# installs them with apt-get when it runs as root (no service is started by the install: a
# policy-rc.d that forbids it is in place meanwhile, if none was), and on exit it takes back
# everything the install added: it purges exactly the packages that were not installed before,
# deletes the users and groups and the service links they created, and removes the folders they
# made (/etc/munge with its key, /var/lib/munge, …). KEEP_SLURM=1 keeps the install for the
# next run. It starts nothing but its own daemons and stops exactly those on exit.
# Exit codes: 0 passed, 1 failed, 77 skipped (Slurm could not be installed or started here;
# the reason is printed on a line that starts with SKIPPED). KEEP=1 keeps the work folder.
set -uo pipefail
export PATH="$PATH:/usr/sbin:/sbin"
here=$(cd "$(dirname "$0")" && pwd)
SKIP=77
skip() {
    echo "SKIPPED: $*" >&2
    exit $SKIP
}
fail() {
    echo "FAILED: $*" >&2
    exit 1
}
say() { echo "test-local: $*" >&2; }
t0=$SECONDS

bin=${DPCOTRAIN_LAB:-$(command -v dpcotrain-lab || true)}
[[ -n $bin && -x $bin ]] || fail "no dpcotrain-lab: set DPCOTRAIN_LAB=/path/to/dpcotrain-lab or put it on PATH"
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")

# 1. Slurm and munge from the distribution's packages.
missing() {
    local c
    for c in slurmctld slurmd sbatch squeue scontrol sinfo munged; do
        command -v "$c" >/dev/null || return 0
    done
    return 1
}
# What an install adds, so that it can be taken back: installed packages, users, groups, links
# under /etc/systemd (enabled services) and the folders the packages make.
installed_pkgs() { dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' 2>/dev/null | awk '$1 == "ii" {print $2}' | sort; }
configured_pkgs() { dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' 2>/dev/null | awk '$1 == "rc" {print $2}' | sort; }
names_in() { cut -d: -f1 "$1" | sort; }
service_links() { find /etc/systemd /lib/systemd/system /usr/lib/systemd/system -type l 2>/dev/null | sort; }
package_dirs=(/etc/munge /var/lib/munge /var/log/munge /run/munge /etc/slurm /etc/slurm-llnl /var/lib/slurm
    /var/lib/slurm-llnl /var/log/slurm /var/log/slurm-llnl /var/spool/slurmd /var/spool/slurmctld /run/slurm)
undo_install() { # purge what the install added; called on every exit once the install began
    local new users groups links d
    [[ -n ${KEEP_SLURM:-} ]] && {
        say "KEEP_SLURM set: slurm-wlm and munge stay installed"
        return
    }
    new=$(comm -13 <(echo "$pkgs_before") <(installed_pkgs))
    # Packages removed before but with their configuration kept ("rc") go back to that state:
    # removed, not purged, so their configuration files stay as they were.
    back=$(comm -12 <(echo "$new") <(echo "$rc_before"))
    new=$(comm -23 <(echo "$new") <(echo "$rc_before"))
    if [[ -n $new$back ]]; then
        say "removing what the install added: $(echo $new $back)"
        # shellcheck disable=SC2086
        { [[ -z $new ]] || DEBIAN_FRONTEND=noninteractive apt-get purge -y -q $new; } >>"$apt_log" 2>&1 ||
            say "apt-get purge failed (see $apt_log)"
        # shellcheck disable=SC2086
        { [[ -z $back ]] || DEBIAN_FRONTEND=noninteractive apt-get remove -y -q $back; } >>"$apt_log" 2>&1 ||
            say "apt-get remove failed (see $apt_log)"
    fi
    users=$(comm -13 <(echo "$users_before") <(names_in /etc/passwd))
    for u in $users; do userdel "$u" 2>/dev/null || say "could not delete user $u"; done
    groups=$(comm -13 <(echo "$groups_before") <(names_in /etc/group))
    for g in $groups; do groupdel "$g" 2>/dev/null || say "could not delete group $g"; done
    links=$(comm -13 <(echo "$links_before") <(service_links))
    for l in $links; do rm -f "$l"; done
    for d in "${package_dirs[@]}"; do
        [[ " $dirs_before " == *" $d "* ]] || rm -rf "$d"
    done
    # apt's log stays only if something went wrong (a message names it).
    [[ -n ${install_ok:-} && -z $(comm -13 <(echo "$pkgs_before") <(installed_pkgs)) ]] && rm -f "$apt_log"
}
if missing; then
    [[ $(id -u) == 0 ]] || skip "Slurm and munge are not installed, and installing them (apt-get install slurm-wlm munge) needs root"
    command -v apt-get >/dev/null || skip "Slurm and munge are not installed and there is no apt-get to install them"
    pkgs_before=$(installed_pkgs)
    rc_before=$(configured_pkgs)
    users_before=$(names_in /etc/passwd)
    groups_before=$(names_in /etc/group)
    links_before=$(service_links)
    dirs_before=
    for d in "${package_dirs[@]}"; do [[ -e $d ]] && dirs_before+=" $d"; done
    apt_log=$(mktemp "${TMPDIR:-/tmp}/dpcotrain-slurm-apt.XXXXXX")
    trap undo_install EXIT
    say "installing slurm-wlm and munge with apt-get…"
    policy=/usr/sbin/policy-rc.d
    own_policy=
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && own_policy=1
    fi
    apt_install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends slurm-wlm munge >"$apt_log" 2>&1; }
    apt_install || { apt-get update -q >/dev/null 2>&1 && apt_install; }
    ok=$?
    [[ -n $own_policy ]] && rm -f "$policy"
    ((ok == 0)) || skip "apt-get could not install slurm-wlm and munge (see $apt_log)"
    install_ok=1
    missing && skip "slurm-wlm and munge installed, but slurmctld, slurmd, sbatch or munged is still missing"
    say "installed in $((SECONDS - t0)) s"
fi
[[ $(id -u) == 0 ]] || skip "starting slurmd (which runs jobs as their user) needs root"

# 2. A one-node cluster on localhost.
work=$(mktemp -d "${TMPDIR:-/tmp}/dpcotrain-slurm.XXXXXX")
chmod 755 "$work"
pids=()
cleanup() {
    local rc=$? p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    if [[ $rc == 0 && -z ${KEEP:-} ]]; then
        rm -rf "$work"
    else
        say "work folder kept: $work (slurmctld.log, slurmd.log, munged.log, */logs)"
    fi
    [[ -n ${pkgs_before+x} ]] && undo_install
    exit "$rc"
}
trap cleanup EXIT
free_port() { # a port nothing listens on, from a range the usual services do not use
    local p
    for ((p = 20000 + RANDOM % 20000; ; p++)); do
        (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || {
            echo "$p"
            return
        }
    done
}
mkdir -p "$work/munge" "$work/state" "$work/spool"
chmod 700 "$work/munge"
head -c 1024 /dev/urandom >"$work/munge/munge.key"
chmod 400 "$work/munge/munge.key"
munged --foreground --force --key-file="$work/munge/munge.key" --socket="$work/munge/munge.socket" \
    --pid-file="$work/munge/munged.pid" --log-file="$work/munged.log" --seed-file="$work/munge/seed" \
    >>"$work/munged.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [[ -S $work/munge/munge.socket ]] && break; sleep 0.1; done
[[ -S $work/munge/munge.socket ]] || skip "munged did not start here (see $work/munged.log)"

cpus=$(nproc)
((cpus >= 2)) || cpus=2
ctld_port=$(free_port)
slurmd_port=$(free_port)
((slurmd_port != ctld_port)) || slurmd_port=$((ctld_port + 1))
partition=dpcotest
cat >"$work/slurm.conf" <<EOF
ClusterName=dpcotrain-test
SlurmctldHost=localhost
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
AuthInfo=socket=$work/munge/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=3600
NodeName=localhost CPUs=$cpus RealMemory=8192 State=UNKNOWN
PartitionName=$partition Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$work/slurm.conf
slurmctld -D -c >>"$work/slurmctld.log" 2>&1 &
pids+=($!)
slurmd -D -N localhost >>"$work/slurmd.log" 2>&1 &
pids+=($!)
state=
for _ in $(seq 60); do
    state=$(sinfo -h -n localhost -o %t 2>/dev/null | head -1)
    [[ $state == idle* ]] && break
    sleep 1
done
[[ $state == idle* ]] || skip "the one-node cluster did not come up (node state '$state'; see $work/slurmctld.log and slurmd.log)"
say "cluster up in $((SECONDS - t0)) s (ports $ctld_port, $slurmd_port; $(sinfo --version))"

# 3. The forms.
job_state() { scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' | head -1; }
wait_job() { # wait_job ID: until it has ended (at most 5 minutes); prints its final state
    local s
    for _ in $(seq 300); do
        s=$(job_state "$1")
        case $s in
        COMPLETED | FAILED | CANCELLED | TIMEOUT | OUT_OF_MEMORY | NODE_FAIL | BOOT_FAIL | DEADLINE | PREEMPTED)
            echo "$s"
            return
            ;;
        esac
        sleep 1
    done
    echo "STILL-${s:-UNKNOWN}"
}
submit() { # submit NAME [env…] -- submit.sh ARGS: submits from $work/NAME; sets $merge_job
    local name=$1 out
    shift
    mkdir -p "$work/$name"
    out=$(cd "$work/$name" && env "$@" 2>&1) || fail "$name: submit.sh failed: $out"
    echo "$out" | sed "s/^/  $name: /" >&2
    merge_job=$(echo "$out" | sed -n 's/^merge: job \([0-9]*\).*/\1/p')
    [[ -n $merge_job ]] || fail "$name: no merge job in submit.sh's output: $out"
}
same() { # same A B: the same files with the same bytes
    diff -r "$1" "$2" >/dev/null || fail "$1 and $2 differ: $(diff -rq "$1" "$2" | head -5)"
}
passed=()

# 3.1 The documented form, dpcotrain-lab on PATH.
t=$SECONDS
submit documented PATH="$(dirname "$bin"):$PATH" "$here/submit.sh" --results "$work/documented/results" \
    --dp calibrated --epsilon 1 --quick
s=$(wait_job "$merge_job")
[[ $s == COMPLETED ]] || fail "documented: merge job $merge_job ended $s: $(cat "$work"/documented/results/logs/merge-*.out 2>/dev/null)"
"$bin" experiment simulated --dp calibrated --epsilon 1 --quick --seeds 10 --out "$work/documented/unsharded" >/dev/null 2>&1 ||
    fail "documented: the unsharded run failed"
same "$work/documented/results/merged" "$work/documented/unsharded"
passed+=("documented form: merged = unsharded, $(ls "$work/documented/unsharded" | wc -l) files, $((SECONDS - t)) s")

# 3.2 Every submit option, DPCOTRAIN_LAB instead of PATH, the ccpp grid.
t=$SECONDS
submit options DPCOTRAIN_LAB="$bin" "$here/submit.sh" --shards 3 --cpus 1 --mem 1G --time 10:00 \
    --partition "$partition" --results "$work/options/results" ccpp --quick --seeds 3 --dp thesis --rounds 3
s=$(wait_job "$merge_job")
[[ $s == COMPLETED ]] || fail "options: merge job $merge_job ended $s: $(cat "$work"/options/results/logs/merge-*.out 2>/dev/null)"
"$bin" experiment ccpp --quick --seeds 3 --dp thesis --rounds 3 --out "$work/options/unsharded" >/dev/null 2>&1 ||
    fail "options: the unsharded run failed"
same "$work/options/results/merged" "$work/options/unsharded"
passed+=("ccpp with every submit option: merged = unsharded, $((SECONDS - t)) s")

# 3.3 A task that fails: the merge runs anyway (afterany), fails, and names it.
t=$SECONDS
mkdir -p "$work/failing/results"
echo "not a folder" >"$work/failing/results/shard-1" # task 1 cannot create its shard folder
submit failing DPCOTRAIN_LAB="$bin" "$here/submit.sh" --shards 2 --results "$work/failing/results" --quick --dp off \
    --r 0.9 --ci no
s=$(wait_job "$merge_job")
[[ $s == FAILED ]] || fail "failing: merge job $merge_job ended $s, not FAILED"
log=$(cat "$work"/failing/results/logs/merge-*.out)
[[ $log == *"task 1 of job"*"failed with exit code 1"* && $log != *"task 0"* ]] ||
    fail "failing: the merge job's log does not name task 1 (alone): $log"
passed+=("a failed task: the merge job ended FAILED naming it, $((SECONDS - t)) s")

# 3.4 A task bigger than every node is refused at submission; nothing is queued.
t=$SECONDS
mkdir -p "$work/too-big"
queued=$(squeue -h | wc -l)
if out=$(cd "$work/too-big" && DPCOTRAIN_LAB="$bin" "$here/submit.sh" --cpus $((cpus + 1)) --results "$work/too-big/results" --quick 2>&1); then
    fail "too-big: submit.sh queued a task needing $((cpus + 1)) CPUs on a node with $cpus: $out"
fi
[[ $out == *"wait forever"* ]] || fail "too-big: submit.sh did not say why: $out"
(($(squeue -h | wc -l) == queued)) || fail "too-big: something was queued: $(squeue -h)"
passed+=("a task bigger than every node: refused at submission, nothing queued, $((SECONDS - t)) s")

for p in "${passed[@]}"; do say "ok: $p"; done
say "passed in $((SECONDS - t0)) s"
