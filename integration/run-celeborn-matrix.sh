#!/usr/bin/env bash
# Runs the Spark + stock Celeborn client integration suite (integration/, JUnit tag
# "celeborn") against a switchyard binary, once per client version, each with both
# writers (HASH and SORT), then Flink jobs with the Celeborn Flink client, then the
# Flink protocol driver, then the mixed-protocol test once:
#
#   1. celeborn-client-spark-3-shaded_2.12 0.5.4 from Maven Central, HASH and SORT
#   2. celeborn-client-spark-3-shaded_2.12 0.5.1 from Maven Central, HASH and SORT
#   2a. every jar in $CELEBORN_CLIENT_JARS (Spark 3 client builds, e.g. 0.6.3), HASH and SORT
#   2b. every jar in $CELEBORN_SPARK4_CLIENT_JARS (celeborn-client-spark-4-shaded_2.13
#      builds) on Spark 4.0 (Scala 2.13), HASH and SORT
#   3. Flink 1.20 jobs with the Celeborn Flink client (integration/flink, its own Maven
#      project): the client jar is not on Maven Central, so they need
#      CELEBORN_FLINK_CLIENT_JAR; without it the entry runs, its tests report skipped
#      (about 10 s) and the entry shows SKIP; a jar named there that does not exist fails
#   4. The Flink protocol driver (JUnit tag "celeborn-flink": CelebornFlinkDriverTest,
#      CelebornFlinkMixedTest): the Flink client's MAP-partition sequence driven through
#      the real LifecycleManager and transport classes of the Spark client jar 0.5.4
#      (no Flink, no Flink client jar), then alongside a Uniffle and a Celeborn Spark job
#   5. MixedProtocolTest (tag "mixed"): one switchyard, a Uniffle 0.9.2 GRPC job and a
#      Celeborn job (first version of the list, HASH) at the same time, each in its
#      own JVM
#   6. tag "fleet": three switchyard nodes as one fleet on 127.0.0.2-4. FleetJobsTest: a
#      Uniffle 0.9.2 GRPC_NETTY job listing every coordinator, then a Celeborn job listing
#      every master (each equals vanilla and every node stored part of it), replication and
#      nodes killed; FleetFailoverTest: coordinators killed, a node cut off with iptables
#      (needs root and Debian's iptables), a node decommissioned mid-job;
#      FleetFlinkDriverTest: the Flink driver scenarios over the three nodes
#
# Builds nothing in Rust. Environment:
#   SWITCHYARD_BIN           the binary (default: <repo>/target/debug/switchyard)
#   CELEBORN_MAVEN_VERSIONS  Maven Central versions (default "0.5.4 0.5.1"; empty: none)
#   CELEBORN_WRITERS         writers per version (default "HASH,SORT")
#   CELEBORN_CLIENT_JARS     extra Spark 3 client jars, ':'-separated (optional; a missing file fails)
#   CELEBORN_SPARK4_CLIENT_JARS  Spark 4 client jars, ':'-separated (optional; a missing file fails)
#   FLEET_UNIFFLE_CLIENT_JAR, FLEET_CELEBORN_CLIENT_JAR  when both are set, the fleet's
#                            failover scenarios (FleetFailoverTest) run a second time with these
#                            client jars (Uniffle over GRPC_NETTY)
#   CELEBORN_SKIP_MIXED=1    leave out the mixed-protocol entry
#   CELEBORN_SKIP_FLEET=1    leave out the fleet entry
#   CELEBORN_FLINK_CLIENT_JAR a celeborn-client-flink-1.20-shaded_2.12 jar (0.6.x) for entry 3
#   CELEBORN_SKIP_FLINK=1    leave out the Flink entry
#   CELEBORN_SKIP_FLINK_DRIVER=1   leave out the Flink driver entry (always client 0.5.4:
#                            0.5.1's ShuffleClientImpl lacks methods the driver overrides)
#   MVN                      maven command (default: mvn)
# Arguments are passed to every mvn run, e.g.
#   ./run-celeborn-matrix.sh -Dswitchyard.large.records=1000000
#
# Exits 1 if any entry fails, 2 if the binary is missing. Logs: integration/target/matrix/.
set -u -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
bin=${SWITCHYARD_BIN:-$root/target/debug/switchyard}
mvn_cmd=${MVN:-mvn}
versions=${CELEBORN_MAVEN_VERSIONS-0.5.4 0.5.1}
writers=${CELEBORN_WRITERS:-HASH,SORT}
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

# run_entry LABEL MVN_ARGS...   ($timings: the timings file that project writes)
timings=$here/target/switchyard-it-timings.txt
run_entry() {
  local label=$1
  shift
  n=$((n + 1))
  local slug
  slug=$(printf 'celeborn-%02d-%s' "$n" "$label" | tr -c 'A-Za-z0-9._-' '_')
  local log=$outdir/$slug.log
  echo
  echo "=== [$n] $label"
  echo "    log: $log"
  rm -f "$timings"
  local start=$SECONDS
  (cd "$here" && "$mvn_cmd" -B test -Dswitchyard.bin="$bin" "$@" "${extra_args[@]}") >"$log" 2>&1
  local rc=$?
  local secs=$((SECONDS - start))
  local tests
  tests=$(grep -E '^\[(INFO|ERROR|WARNING)\] Tests run: [0-9]+, Failures: [0-9]+, Errors: [0-9]+, Skipped: [0-9]+$' "$log" | tail -1 | sed -E 's/^\[[A-Z]+\] //')
  [ -n "$tests" ] || tests="no test summary (build or dependency failure? see log)"
  if [ -f "$timings" ]; then
    cp "$timings" "$outdir/$slug-timings.txt"
    sed 's/^/    /' "$timings"
  fi
  grep -E '^\[ERROR\]   ' "$log" | head -20 | sed 's/^/    /'
  local verdict=PASS
  # A run that executed no test (e.g. a mistyped -Dtest) is a failure too.
  if [ $rc -ne 0 ] || ! grep -qE 'Tests run: [1-9]' "$log"; then
    verdict=FAIL
    failed=$((failed + 1))
  elif [[ "$tests" =~ ^Tests\ run:\ ([0-9]+),.*Skipped:\ ([0-9]+)$ ]] &&
    [ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ]; then
    verdict=SKIP # every test skipped itself (e.g. Flink without CELEBORN_FLINK_CLIENT_JAR)
    grep -m1 -E '^\[flink\] skipped' "$log" | sed 's/^/    /'
  fi
  local line
  line=$(printf '%s  %-40s %4ds  %s' "$verdict" "$label" "$secs" "$tests")
  echo "    $line"
  summary+=("$line")
}

# jar_list VAR_NAME: the ':'-separated files of that variable, made absolute; a missing
# file is a failed entry naming the path (never a skip).
jar_list() {
  local var=$1 jar
  local -a listed
  jars=()
  IFS=':' read -r -a listed <<<"${!var:-}"
  for jar in "${listed[@]}"; do
    [ -n "$jar" ] || continue
    if [ ! -f "$jar" ]; then
      echo
      echo "=== $var: $jar: FAIL (no such file)"
      summary+=("FAIL  $var: no such file: $jar")
      failed=$((failed + 1))
      continue
    fi
    jars+=("$(cd "$(dirname "$jar")" && pwd)/$(basename "$jar")")
  done
}

extra_args=("$@")
echo "switchyard: $bin"
echo "celeborn client versions: ${versions:-none}; writers: $writers"

first=""
for v in $versions; do
  [ -n "$first" ] || first=$v
  run_entry "celeborn-$v-${writers//,/+}" -Dshuffle.client=celeborn -Dceleborn.client.version="$v" \
    -Dceleborn.writers="$writers"
done

jar_list CELEBORN_CLIENT_JARS
for jar in "${jars[@]}"; do
  run_entry "$(basename "$jar" .jar)-${writers//,/+}" -Dshuffle.client=celeborn \
    -Dceleborn.client.jar="$jar" -Dceleborn.writers="$writers"
done

# Spark 4.0 (Scala 2.13): the pom's spark4 profile; only the Celeborn suite (Uniffle has no
# Spark 4 client).
jar_list CELEBORN_SPARK4_CLIENT_JARS
for jar in "${jars[@]}"; do
  run_entry "spark-4.0-$(basename "$jar" .jar)-${writers//,/+}" -Dspark4 -Dshuffle.client=celeborn \
    -Dceleborn.client.jar="$jar" -Dceleborn.writers="$writers"
done

if [ -n "${CELEBORN_FLINK_CLIENT_JAR:-}" ] && [ ! -f "$CELEBORN_FLINK_CLIENT_JAR" ]; then
  echo
  echo "=== Flink entry: FAIL: CELEBORN_FLINK_CLIENT_JAR: no such file: $CELEBORN_FLINK_CLIENT_JAR"
  summary+=("FAIL  flink: CELEBORN_FLINK_CLIENT_JAR: no such file: $CELEBORN_FLINK_CLIENT_JAR")
  failed=$((failed + 1))
elif [ "${CELEBORN_SKIP_FLINK:-0}" = 1 ]; then
  echo
  echo "=== Flink entry: skipped (CELEBORN_SKIP_FLINK=1)"
  summary+=("SKIP  flink: CELEBORN_SKIP_FLINK=1")
else
  timings=$here/flink/target/switchyard-flink-timings.txt
  run_entry "flink-1.20-celeborn-client" -f flink/pom.xml
  timings=$here/target/switchyard-it-timings.txt
fi

if [ "${CELEBORN_SKIP_FLINK_DRIVER:-0}" = 1 ]; then
  echo
  echo "=== Flink driver entry: skipped (CELEBORN_SKIP_FLINK_DRIVER=1)"
  summary+=("SKIP  flink driver: CELEBORN_SKIP_FLINK_DRIVER=1")
else
  driver_version=0.5.4
  run_entry "flink-driver-celeborn-$driver_version" -Dshuffle.client=celeborn-flink \
    -Dceleborn.client.version="$driver_version" -Dceleborn.writers="${writers%%,*}" \
    -Duniffle.client.version=0.9.2 -Duniffle.client.type=GRPC
fi

if [ "${CELEBORN_SKIP_MIXED:-0}" = 1 ]; then
  echo
  echo "=== mixed-protocol test: skipped (CELEBORN_SKIP_MIXED=1)"
  summary+=("SKIP  mixed-protocol test: CELEBORN_SKIP_MIXED=1")
else
  mixed_version=${first:-0.5.4}
  mixed_writer=${writers%%,*}
  run_entry "mixed-uniffle-0.9.2-GRPC+celeborn-$mixed_version-$mixed_writer" -Dshuffle.client=mixed \
    -Dceleborn.client.version="$mixed_version" -Dceleborn.writers="$mixed_writer" \
    -Duniffle.client.version=0.9.2 -Duniffle.client.type=GRPC
fi

if [ "${CELEBORN_SKIP_FLEET:-0}" = 1 ]; then
  echo
  echo "=== fleet test: skipped (CELEBORN_SKIP_FLEET=1)"
  summary+=("SKIP  fleet test: CELEBORN_SKIP_FLEET=1")
else
  fleet_version=${first:-0.5.4}
  fleet_writer=${writers%%,*}
  run_entry "fleet-3-nodes-uniffle-0.9.2-GRPC_NETTY+celeborn-$fleet_version-$fleet_writer" -Dshuffle.client=fleet \
    -Dceleborn.client.version="$fleet_version" -Dceleborn.writers="$fleet_writer" \
    -Duniffle.client.version=0.9.2 -Duniffle.client.type=GRPC_NETTY
  if [ -n "${FLEET_UNIFFLE_CLIENT_JAR:-}${FLEET_CELEBORN_CLIENT_JAR:-}" ]; then
    jar_list FLEET_UNIFFLE_CLIENT_JAR
    fleet_uniffle=${jars[0]:-}
    jar_list FLEET_CELEBORN_CLIENT_JAR
    fleet_celeborn=${jars[0]:-}
    if [ -n "$fleet_uniffle" ] && [ -n "$fleet_celeborn" ]; then
      run_entry "fleet-failover-$(basename "$fleet_uniffle" .jar)-GRPC_NETTY+$(basename "$fleet_celeborn" .jar)-$fleet_writer" \
        -Dshuffle.client=fleet -Dtest=FleetFailoverTest -Dceleborn.client.jar="$fleet_celeborn" -Dceleborn.writers="$fleet_writer" \
        -Duniffle.client.jar="$fleet_uniffle" -Duniffle.client.type=GRPC_NETTY
    fi
  fi
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
