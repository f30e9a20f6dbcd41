#!/usr/bin/env bash
# Runs the cold-tier tests of the Spark integration suite (integration/, JUnit tag "cold"):
# ColdTierSkewedShuffleTest, a skewed job (about 530 MB shuffled, one key holding 80%) through
# switchyard with its cold tier on a real S3 server and on a real HDFS, with the stock Uniffle
# client (0.9.2, GRPC) and the stock Celeborn client (0.5.4, writer HASH): four runs; then
# HungDiskSparkTest, the large job with the Uniffle client while switchyard's first disk (ext4 on
# a loop device) is frozen with fsfreeze: the disk is marked hung, the job equals vanilla (needs
# root and loop devices; skipped, with the reason, where they are missing).
#
# The test starts both services itself, as child processes on 127.0.0.1, and stops them by PID:
#   * S3: storage/examples/s3_server.rs (s3s-fs), built by
#         cargo build -p switchyard-storage --example s3_server
#   * HDFS: integration/minidfs (Hadoop 3.4.2 MiniDFSCluster in its own JVM), built by the
#         integration pom's "cold" profile (mvn -f minidfs/pom.xml package) from Maven Central.
# A service that does not start fails the tests.
#
# Builds nothing in Rust. Environment:
#   SWITCHYARD_BIN            the binary (default: <repo>/target/debug/switchyard)
#   SWITCHYARD_S3_SERVER_BIN  the S3 test server (default: <repo>/target/debug/examples/s3_server)
#   MVN                       maven command (default: mvn)
# Arguments are passed to mvn, e.g.
#   ./run-cold-tier.sh -Dswitchyard.cold.records=2000000
#
# Then runs the storage crate's HDFS test (storage/tests/hdfs.rs) against a MiniDFS of its own.
#
# Exits 1 if the tests fail, 2 if a binary is missing. Log: integration/target/matrix/cold-tier.log.
set -u -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
bin=${SWITCHYARD_BIN:-$root/target/debug/switchyard}
s3bin=${SWITCHYARD_S3_SERVER_BIN:-$root/target/debug/examples/s3_server}
mvn_cmd=${MVN:-mvn}
outdir=$here/target/matrix

abs() {
  case "$1" in
    /*) echo "$1" ;;
    *) echo "$(cd "$(dirname "$1")" 2>/dev/null && pwd)/$(basename "$1")" ;;
  esac
}
bin=$(abs "$bin")
s3bin=$(abs "$s3bin")
if [ ! -x "$bin" ]; then
  echo "error: switchyard binary not found or not executable: $bin" >&2
  echo "       build it (cargo build -p switchyard) or set SWITCHYARD_BIN" >&2
  exit 2
fi
if [ ! -x "$s3bin" ]; then
  echo "error: S3 test server not found or not executable: $s3bin" >&2
  echo "       build it (cargo build -p switchyard-storage --example s3_server) or set SWITCHYARD_S3_SERVER_BIN" >&2
  exit 2
fi

mkdir -p "$outdir"
log=$outdir/cold-tier.log
echo "switchyard: $bin"
echo "s3 server:  $s3bin"
echo "=== cold tier: S3 and HDFS, Uniffle and Celeborn clients"
echo "    log: $log"
rm -f "$here/target/switchyard-it-timings.txt"
start=$SECONDS
(cd "$here" && "$mvn_cmd" -B test -Dshuffle.client=cold -Dswitchyard.bin="$bin" \
  -Dswitchyard.s3server.bin="$s3bin" "$@") >"$log" 2>&1
rc=$?
secs=$((SECONDS - start))
tests=$(grep -E '^\[(INFO|ERROR|WARNING)\] Tests run: [0-9]+, Failures: [0-9]+, Errors: [0-9]+, Skipped: [0-9]+$' "$log" | tail -1 | sed -E 's/^\[[A-Z]+\] //')
[ -n "$tests" ] || tests="no test summary (build or dependency failure? see log)"
if [ -f "$here/target/switchyard-it-timings.txt" ]; then
  cp "$here/target/switchyard-it-timings.txt" "$outdir/cold-tier-timings.txt"
  sed 's/^/    /' "$here/target/switchyard-it-timings.txt"
fi
grep -E '^\[ERROR\]   ' "$log" | head -20 | sed 's/^/    /'
verdict=PASS
# A run that executed no test at all is a failure too.
if [ $rc -ne 0 ] || ! grep -qE 'Tests run: [1-9]' "$log"; then
  verdict=FAIL
fi
printf '    %s  %-40s %4ds  %s\n' "$verdict" "cold-tier-s3+hdfs" "$secs" "$tests"

# The storage crate's own HDFS test (storage/tests/hdfs.rs: huge partitions on HDFS, reads
# across tiers, removal) against the same MiniDFS, which the run above built.
echo "=== storage/tests/hdfs.rs against MiniDFS"
hdfs_verdict=FAIL
mdfs_dir=$(mktemp -d)
cp_file=$here/minidfs/target/classpath.txt
mdfs_jar=$(ls "$here"/minidfs/target/switchyard-minidfs-*.jar 2>/dev/null | head -1)
if [ -f "$cp_file" ] && [ -n "$mdfs_jar" ]; then
  # MiniDFS runs until its stdin (a FIFO this shell holds open) closes, or until killed;
  # so it also stops if this script dies.
  mkfifo "$mdfs_dir/stdin"
  java -Xmx768m --add-opens=java.base/java.lang=ALL-UNNAMED \
    -cp "$mdfs_jar:$(cat "$cp_file")" dev.switchyard.minidfs.MiniDfsMain \
    "$mdfs_dir/base" "$mdfs_dir/info" <"$mdfs_dir/stdin" >"$outdir/minidfs-rust.log" 2>&1 &
  mdfs_pid=$!
  exec {mdfs_stdin}>"$mdfs_dir/stdin"
  for _ in $(seq 1 120); do
    [ -f "$mdfs_dir/info" ] && break
    kill -0 $mdfs_pid 2>/dev/null || break
    sleep 0.5
  done
  name_node=$(sed -n 's/^name_node=//p' "$mdfs_dir/info" 2>/dev/null)
  if [ -n "$name_node" ]; then
    echo "    MiniDFS at $name_node"
    if (cd "$root" && SWITCHYARD_TEST_HDFS="$name_node" cargo test -q -p switchyard-storage --test hdfs) \
      >"$outdir/hdfs-rust.log" 2>&1 && ! grep -q SKIPPED "$outdir/hdfs-rust.log"; then
      hdfs_verdict=PASS
    fi
    grep -E '^test |test result' "$outdir/hdfs-rust.log" | sed 's/^/    /'
  else
    echo "    MiniDFS did not start: see $outdir/minidfs-rust.log"
  fi
  exec {mdfs_stdin}>&-
  kill $mdfs_pid 2>/dev/null
  wait $mdfs_pid 2>/dev/null
else
  echo "    integration/minidfs is not built (the cold profile builds it)"
fi
rm -rf "$mdfs_dir"
printf '    %s  %-40s\n' "$hdfs_verdict" "storage-hdfs-rust"

[ "$verdict" = PASS ] && [ "$hdfs_verdict" = PASS ] || exit 1
