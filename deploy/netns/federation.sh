#!/usr/bin/env bash
# A two-party federation across separate network namespaces on one machine: each node gets its
# own network stack and host address (10.77.0.1 = party A, .2 = party B, .3 = the
# orchestrator) on a private bridge — the closest one machine gets to separate hosts. Nodes
# talk mutual TLS with tokens over that bridge; nothing listens on loopback.
#
#   cargo build --release                          # as yourself, first (never under sudo)
#   sudo deploy/netns/federation.sh [ROUNDS]      # from the repository root; needs iproute2
#
# It runs the binary at $DPCOTRAIN_BIN (default target/release/dpcotrain; it never builds, so
# no compiler runs as root and target/ gets no root-owned files), writes configs/secrets/ledgers to a temporary folder,
# runs ROUNDS (default 25) rounds, prints the result, and removes the namespaces on exit.
set -euo pipefail

ROUNDS="${1:-25}"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BIN="${DPCOTRAIN_BIN:-$ROOT/target/release/dpcotrain}"
WORK="$(mktemp -d /tmp/dpcotrain-netns.XXXXXX)"
BR=dpct-br0
NS=(dpct-a dpct-b dpct-orch)
IPS=(10.77.0.1 10.77.0.2 10.77.0.3)
PIDS=()

if [[ $EUID -ne 0 ]]; then echo "run as root (network namespaces need CAP_NET_ADMIN)" >&2; exit 1; fi
command -v ip >/dev/null || { echo "needs iproute2 (the ip command)" >&2; exit 1; }

cleanup() {
  for p in "${PIDS[@]:-}"; do [[ -n "$p" ]] && kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for i in 0 1 2; do ip netns del "${NS[$i]}" 2>/dev/null || true; ip link del "dpct-v$i" 2>/dev/null || true; done
  ip link del "$BR" 2>/dev/null || true
  echo "work folder kept: $WORK (configs, ledgers, logs)" >&2
}
trap cleanup EXIT

[[ -x "$BIN" ]] || { echo "$BIN not found: build it first, as yourself: cargo build --release" >&2; exit 1; }

# A bridge, and one namespace per participant attached to it by a veth pair.
ip link add "$BR" type bridge
ip link set "$BR" up
for i in 0 1 2; do
  ip netns add "${NS[$i]}"
  ip link add "dpct-v$i" type veth peer name eth0 netns "${NS[$i]}"
  ip link set "dpct-v$i" master "$BR" up
  ip -n "${NS[$i]}" addr add "${IPS[$i]}/24" dev eth0
  ip -n "${NS[$i]}" link set eth0 up
  ip -n "${NS[$i]}" link set lo up
done

# Secrets (certificates valid for the namespace addresses) and configs.
"$BIN" certs --out "$WORK/secrets" --parties A,B --hosts "${IPS[0]},${IPS[1]},localhost"
for P in A B; do
  if [[ $P == A ]]; then ME=${IPS[0]}; PEER=B; PEERIP=${IPS[1]}; D=party-a; else ME=${IPS[1]}; PEER=A; PEERIP=${IPS[0]}; D=party-b; fi
  cat > "$WORK/$P.toml" <<TOML
name = "$P"
federation_id = "ccpp-netns"
listen = "$ME:50051"
state_dir = "state/$P"

[security]
dir = "secrets"

[data]
train = "$ROOT/examples/two-party/data/$D/train.csv"
pool = "$ROOT/examples/two-party/data/$D/pool.csv"
test = "$ROOT/examples/two-party/data/$D/test.csv"
target = "PE"

[privacy]
mode = "calibrated"
epsilon = 1.0
policy = "batches"

[[peers]]
name = "$PEER"
address = "https://$PEERIP:50051"
TOML
done
cat > "$WORK/federation.toml" <<TOML
federation_id = "ccpp-netns"
rounds = $ROUNDS

[security]
dir = "secrets"

[[nodes]]
name = "A"
address = "https://${IPS[0]}:50051"

[[nodes]]
name = "B"
address = "https://${IPS[1]}:50051"
TOML

"$BIN" node check --config "$WORK/A.toml" >/dev/null
"$BIN" node check --config "$WORK/B.toml" >/dev/null
ip netns exec "${NS[0]}" "$BIN" node serve --config "$WORK/A.toml" 2>"$WORK/A.log" & PIDS+=($!)
ip netns exec "${NS[1]}" "$BIN" node serve --config "$WORK/B.toml" 2>"$WORK/B.log" & PIDS+=($!)

# The orchestrator runs in its own namespace and reaches the nodes only over the bridge.
ip netns exec "${NS[2]}" "$BIN" run --config "$WORK/federation.toml" "${@:2}"
