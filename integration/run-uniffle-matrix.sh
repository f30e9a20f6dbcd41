#!/usr/bin/env bash
# Runs the Spark + stock Uniffle client integration suite (integration/) against a
# switchyard binary, once per client in the matrix:
#
#   1. rss-client-spark3-shaded 0.9.2 from Maven Central, GRPC
#   2. rss-client-spark3-shaded 0.9.0 from Maven Central, GRPC
#   3. every jar in $UNIFFLE_CLIENT_JARS (path-separator list), GRPC and GRPC_NETTY
#
# 0.9.x over GRPC_NETTY is left out of the default entries: the 0.9.x reader frees
# a sliced direct buffer and JDK 11+ throws "duplicate or slice" (Uniffle issue
# #2082, fixed in 0.10.0), whatever the server does.
#
# Builds nothing in Rust. Environment:
#   SWITCHYARD_BIN          the binary (default: <repo>/target/debug/switchyard)
#   UNIFFLE_CLIENT_JARS     extra client jars, ':'-separated (optional)
#   UNIFFLE_MAVEN_VERSIONS  Maven Central versions to run over GRPC (default "0.9.2 0.9.0"; empty: none)
#   UNIFFLE_JAR_TRANSPORTS  transports for the extra jars (default "GRPC GRPC_NETTY")
#   MVN                     maven command (default: mvn)
# Arguments are passed to every mvn run, e.g.
#   ./run-uniffle-matrix.sh -Dtest=ShuffleJobsTest -Dswitchyard.large.records=1000000
#
# Exits non-zero if any entry fails. Logs: integration/target/matrix/.
set -u -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
bin=${SWITCHYARD_BIN:-$root/target/debug/switchyard}
mvn_cmd=${MVN:-mvn}
versions=${UNIFFLE_MAVEN_VERSIONS-0.9.2 0.9.0}
jar_transports=${UNIFFLE_JAR_TRANSPORTS:-GRPC GRPC_NETTY}
outdir=$here/target/matrix

case "$bin" in
  /*) ;;
  *) bin=$(cd "$(dirname "$bin")" 2>/dev/null && pwd)/$(basename "$bin") ;;
esac
if [ ! -x "$bin" ]; then
  echo "error: switchyard binary not found or not executable: $bin" >&2
  echo "       build it (cargo build -p switchyard) or set SWITCHYARD_BIN" >&2
  exit 2
fi

mkdir -p "$outdir"
summary=()
failed=0
n=0

# run_entry LABEL MVN_ARGS...
run_entry() {
  local label=$1
  shift
  n=$((n + 1))
  local slug
  slug=$(printf '%02d-%s' "$n" "$label" | tr -c 'A-Za-z0-9._-' '_')
  local log=$outdir/$slug.log
  echo
  echo "=== [$n] $label"
  echo "    log: $log"
  rm -f "$here/target/switchyard-it-timings.txt"
  local start=$SECONDS
  (cd "$here" && "$mvn_cmd" -B test -Dswitchyard.bin="$bin" "$@" "${extra_args[@]}") >"$log" 2>&1
  local rc=$?
  local secs=$((SECONDS - start))
  local tests
  tests=$(grep -E '^\[(INFO|ERROR|WARNING)\] Tests run: [0-9]+, Failures: [0-9]+, Errors: [0-9]+, Skipped: [0-9]+$' "$log" | tail -1 | sed -E 's/^\[[A-Z]+\] //')
  [ -n "$tests" ] || tests="no test summary (build or dependency failure? see log)"
  if [ -f "$here/target/switchyard-it-timings.txt" ]; then
    cp "$here/target/switchyard-it-timings.txt" "$outdir/$slug-timings.txt"
    sed 's/^/    /' "$here/target/switchyard-it-timings.txt"
  fi
  grep -E '^\[ERROR\]   ' "$log" | head -20 | sed 's/^/    /'
  local verdict=PASS
  if [ $rc -ne 0 ]; then
    verdict=FAIL
    failed=$((failed + 1))
  fi
  local line
  line=$(printf '%s  %-40s %4ds  %s' "$verdict" "$label" "$secs" "$tests")
  echo "    $line"
  summary+=("$line")
}

extra_args=("$@")
echo "switchyard: $bin"
echo "maven client versions (GRPC): $versions"

for v in $versions; do
  run_entry "uniffle-$v-GRPC" -Duniffle.client.version="$v" -Duniffle.client.type=GRPC
done

if [ -z "${UNIFFLE_CLIENT_JARS:-}" ]; then
  echo
  echo "=== extra client jars: skipped: UNIFFLE_CLIENT_JARS not set"
  summary+=("SKIP  extra client jars: UNIFFLE_CLIENT_JARS not set")
else
  IFS=':' read -r -a jars <<<"$UNIFFLE_CLIENT_JARS"
  for jar in "${jars[@]}"; do
    [ -n "$jar" ] || continue
    if [ ! -f "$jar" ]; then
      echo
      echo "=== $jar: FAIL (no such file)"
      summary+=("FAIL  $jar: no such file")
      failed=$((failed + 1))
      continue
    fi
    jar=$(cd "$(dirname "$jar")" && pwd)/$(basename "$jar")
    for t in $jar_transports; do
      run_entry "$(basename "$jar" .jar)-$t" -Duniffle.client.jar="$jar" -Duniffle.client.type="$t"
    done
  done
fi

echo
echo "=== summary (logs in $outdir)"
for l in "${summary[@]}"; do
  echo "  $l"
done
if [ $failed -ne 0 ]; then
  echo "FAILED: $failed matrix entr$([ $failed -eq 1 ] && echo y || echo ies)"
  exit 1
fi
echo "all matrix entries passed"
