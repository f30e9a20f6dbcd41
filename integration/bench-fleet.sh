#!/usr/bin/env bash
# `switchyard-bench` against a 3-node fleet on 127.0.0.2-4 (every node a
# coordinator and a worker, default ports, 1 GiB memory each): Celeborn pushes
# and fetches with replication off and on, interleaved, then Uniffle over
# GRPC_NETTY with one and two replicas, interleaved; after each run, each node's CPU seconds for that run (from
# /proc/<pid>/stat) and, at the end, each node's peak RSS (VmHWM).
#
#   integration/bench-fleet.sh [SIZE] [PAIRS]     # defaults: 1GiB, 2 pairs
#
# Use a release build (SWITCHYARD_BIN, default target/release/switchyard;
# SWITCHYARD_BENCH_BIN, default target/release/switchyard-bench). The
# fixed addresses must be free (no other cluster test running). Not part of CI.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bin=${SWITCHYARD_BIN:-$PWD/target/release/switchyard}
bench_bin=${SWITCHYARD_BENCH_BIN:-$PWD/target/release/switchyard-bench}
size=${1:-1GiB}
pairs=${2:-2}
root=$(mktemp -d /tmp/switchyard-bench-fleet-XXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$root"
}
trap cleanup EXIT

for i in 1 2 3; do
  host=127.0.0.$((i + 1))
  mkdir -p "$root/node$i/data"
  cat >"$root/node$i/switchyard.toml" <<EOF
[node]
host = "$host"
[storage.memory]
capacity = "1GiB"
[storage.disks]
dirs = ["$root/node$i/data"]
min_free = "16MiB"
[cluster]
coordinators = ["127.0.0.2:19980", "127.0.0.3:19980", "127.0.0.4:19980"]
secret = "bench-fleet"
heartbeat_interval = "1s"
warmup = "2s"
EOF
  # exec: $! is the serve process itself.
  (cd "$root/node$i" && exec env -u RUST_LOG "$bin" serve --config switchyard.toml >"$root/node$i.log" 2>&1) &
  pids+=($!)
done
node_pids=("${pids[@]}")
for i in 1 2 3; do
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.$((i + 1)):19990/readyz" >/dev/null && break
    sleep 0.1
  done
done
# Every coordinator lists three active workers and is warm.
for _ in $(seq 100); do
  ok=1
  for i in 1 2 3; do
    body=$(curl -sf "http://127.0.0.$((i + 1)):19990/api/v1/cluster" || true)
    [ "$(grep -o '"state":"active"' <<<"$body" | wc -l)" = 3 ] && grep -q '"warming":false' <<<"$body" || ok=0
  done
  [ $ok = 1 ] && break
  sleep 0.2
done
[ $ok = 1 ] || { echo "the fleet did not form" >&2; exit 1; }
echo "fleet up: pids ${node_pids[*]}, $size per run, $pairs pairs"

cpu() { # utime+stime of a pid, in clock ticks
  awk '{print $14 + $15}' "/proc/$1/stat"
}
run() { # label, bench args...
  local label=$1; shift
  local before=() after=() line
  for p in "${node_pids[@]}"; do before+=("$(cpu "$p")"); done
  echo "--- $label"
  "$bench_bin" "$@" | grep -E 'GB/s|p99|write|read' | sed 's/^/    /'
  for p in "${node_pids[@]}"; do after+=("$(cpu "$p")"); done
  line="    node CPU-s:"
  local tck; tck=$(getconf CLK_TCK)
  for k in 0 1 2; do
    line+=" $(awk -v a="${after[$k]}" -v b="${before[$k]}" -v t="$tck" 'BEGIN{printf "%.1f", (a-b)/t}')"
  done
  echo "$line"
}

for n in $(seq "$pairs"); do
  run "celeborn, replication off ($n)" celeborn --master 127.0.0.2:9097 --size "$size"
  run "celeborn, replication on ($n)" celeborn --master 127.0.0.2:9097 --size "$size" --replicate
done
for n in $(seq "$pairs"); do
  run "uniffle GRPC_NETTY, 1 replica ($n)" uniffle --coordinator 127.0.0.2:19999 --size "$size" --transport GRPC_NETTY
  run "uniffle GRPC_NETTY, 2 replicas, reading the second ($n)" uniffle --coordinator 127.0.0.2:19999 --size "$size" \
    --transport GRPC_NETTY --replicas 2 --read-replica 1
done

echo "--- peak RSS per node"
for k in 0 1 2; do
  echo "    node $((k + 1)): $(awk '/VmHWM/ {printf "%.0f MiB", $2/1024}' "/proc/${node_pids[$k]}/status")"
done
