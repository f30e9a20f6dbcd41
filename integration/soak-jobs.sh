#!/usr/bin/env bash
# One round of real jobs against a running fleet, for `switchyard-bench soak --jobs`
# (docs/reliability.md): a Spark 3.5 job through the stock Uniffle client, one through
# the stock Celeborn client, and a Flink 1.20 job through the stock Celeborn Flink
# client, each compared with the same job on the engine's own shuffle. One line per
# job goes to OUT (tab-separated):
#
#   client  ok|mismatch|failed  wall-ms  start-epoch-ms  one-line detail
#
# Exits 0 once OUT holds a line per job, whatever the jobs did (the soak judges them);
# non-zero only when the round could not be run at all (no java/mvn, a client jar
# missing, the build failed, bad arguments).
#
#   soak-jobs.sh --build                                  build only (once; later calls reuse it)
#   soak-jobs.sh --uniffle Q --celeborn M --out OUT [--work DIR]
#     Q  the Uniffle coordinator quorum, e.g. 127.0.3.2:19999,127.0.3.3:19999
#     M  the Celeborn master endpoints, e.g. 127.0.3.2:9097,127.0.3.3:9097
#
# The build (mvn test-compile of integration/ and integration/flink/, and their
# classpaths) is redone only when a source, a pom or a client jar changed; the compiled
# classes are copied to target/soak-jobs/ so that a later `mvn test` of the suite
# cannot change them under a running soak.
#
# Environment (as .ci/test):
#   UNIFFLE_CLIENT_JARS        the Uniffle Spark client jar (first of a ':' list)
#                              default <clients>/rss-client-spark3-shaded-0.10.0.jar
#   CELEBORN_CLIENT_JARS       the Celeborn Spark 3 client jar (first of a ':' list)
#                              default <clients>/celeborn-client-spark-3-shaded_2.12-0.6.3.jar
#   CELEBORN_FLINK_CLIENT_JAR  the Celeborn Flink client jar
#                              default <clients>/celeborn-client-flink-1.20-shaded_2.12-0.6.3.jar
#   <clients>: $SWITCHYARD_CLIENTS_DIR, else ../shared/clients beside the checkout, else
#   /work/shared/clients. A missing jar fails the round naming its path.
#   SOAK_JOBS_RECORDS      records of each Spark job (default 200000, about 22 MB shuffled)
#   SOAK_JOBS_FLINK_LINES  lines of the Flink word count (default 100000, about 450k words)
#   SOAK_JOBS_UNIFFLE      Uniffle transport: GRPC or GRPC_NETTY (default GRPC_NETTY)
#   SOAK_JOBS_WRITER       Celeborn writer: HASH or SORT (default HASH)
#   SOAK_JOBS_TIMEOUT      seconds each job's JVM may run (default 150)
#   SOAK_JOBS_REPLICAS     copies of the Spark jobs' shuffle data (default 2; 1 against a
#                          single node, as switchyard-bench neighbours runs it)
#   SOAK_JOBS_FLINK=0      leave the Flink job out
#   MVN                    maven command (default: mvn)
set -u -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
state=$here/target/soak-jobs
mvn_cmd=${MVN:-mvn}

build_only=0 uniffle="" celeborn="" out="" work=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build_only=1; shift ;;
    --uniffle) uniffle=$2; shift 2 ;;
    --celeborn) celeborn=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    *) echo "soak-jobs.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ $build_only = 0 ] && { [ -z "$uniffle" ] || [ -z "$celeborn" ] || [ -z "$out" ]; }; then
  echo "usage: soak-jobs.sh --build | --uniffle QUORUM --celeborn MASTERS --out FILE [--work DIR]" >&2
  exit 2
fi
for tool in java "$mvn_cmd"; do
  command -v "$tool" >/dev/null || { echo "soak-jobs.sh: $tool is needed" >&2; exit 1; }
done

clients=${SWITCHYARD_CLIENTS_DIR:-$root/../shared/clients}
if [ -z "${SWITCHYARD_CLIENTS_DIR:-}" ] && [ ! -d "$clients" ] && [ -d /work/shared/clients ]; then
  clients=/work/shared/clients
fi
first() { local IFS=':'; set -- $1; echo "$1"; }
uniffle_jar=$(first "${UNIFFLE_CLIENT_JARS:-$clients/rss-client-spark3-shaded-0.10.0.jar}")
celeborn_jar=$(first "${CELEBORN_CLIENT_JARS:-$clients/celeborn-client-spark-3-shaded_2.12-0.6.3.jar}")
flink_jar=${CELEBORN_FLINK_CLIENT_JAR:-$clients/celeborn-client-flink-1.20-shaded_2.12-0.6.3.jar}
flink=${SOAK_JOBS_FLINK:-1}
jars=("$uniffle_jar" "$celeborn_jar")
[ "$flink" = 0 ] || jars+=("$flink_jar")
for jar in "${jars[@]}"; do
  if [ ! -f "$jar" ]; then
    echo "soak-jobs.sh: client jar missing: $jar (see ../shared/clients/README.md; set SWITCHYARD_CLIENTS_DIR or the *_JARS variables)" >&2
    exit 1
  fi
done
abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
uniffle_jar=$(abs "$uniffle_jar") celeborn_jar=$(abs "$celeborn_jar") flink_jar=$(abs "$flink_jar")

# ---- build, once per change of sources, poms or jars
build() {
  mkdir -p "$state"
  local key="$uniffle_jar $celeborn_jar $flink_jar flink=$flink"
  local stamp=$state/built
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ] &&
    [ -z "$(find "$here/src" "$here/flink/src" "$here/pom.xml" "$here/flink/pom.xml" "${jars[@]}" -newer "$stamp" -print -quit)" ]; then
    return 0
  fi
  echo "soak-jobs.sh: building (log $state/build.log)" >&2
  rm -f "$stamp"
  # The Celeborn jar as a system dependency and the Uniffle jar beside it: the suite's
  # profiles celeborn-from-jar and uniffle-from-jar (the latter only adds it to surefire's
  # classpath, so it is appended below).
  if ! (cd "$here" && "$mvn_cmd" -B -q test-compile dependency:build-classpath \
    -Dceleborn.client.jar="$celeborn_jar" -Duniffle.client.jar="$uniffle_jar" \
    -Dmdep.includeScope=test -Dmdep.outputFile="$state/spark-classpath.txt") >"$state/build.log" 2>&1; then
    tail -30 "$state/build.log" >&2
    echo "soak-jobs.sh: the Spark build failed (log $state/build.log)" >&2
    return 1
  fi
  rm -rf "$state/spark-classes" && cp -r "$here/target/test-classes" "$state/spark-classes"
  if [ "$flink" != 0 ]; then
    if ! (cd "$here/flink" && CELEBORN_FLINK_CLIENT_JAR="$flink_jar" "$mvn_cmd" -B -q test-compile \
      dependency:build-classpath -Dmdep.includeScope=test -Dmdep.outputFile="$state/flink-classpath.txt") \
      >>"$state/build.log" 2>&1; then
      tail -30 "$state/build.log" >&2
      echo "soak-jobs.sh: the Flink build failed (log $state/build.log)" >&2
      return 1
    fi
    rm -rf "$state/flink-classes" && cp -r "$here/flink/target/test-classes" "$state/flink-classes"
  fi
  echo "$key" >"$stamp"
}
build || exit 1
[ $build_only = 1 ] && exit 0

# ---- one round
work=${work:-$state/rounds/$(date -u +%Y%m%d-%H%M%S)-$$}
mkdir -p "$work"
: >"$out"
timeout_s=${SOAK_JOBS_TIMEOUT:-150}
spark_cp="$state/spark-classes:$(cat "$state/spark-classpath.txt"):$uniffle_jar"
case ":$spark_cp:" in *":$celeborn_jar:"*) ;; *) spark_cp="$spark_cp:$celeborn_jar" ;; esac
# What Spark's launcher adds on Java 17, as the suite's pom (spark.java17.opens).
opens() { sed -n "s:.*<$1>\\([^\$]*\\)</$1>.*:\\1:p" "$2" | head -1; }
spark_opens=$(opens spark.java17.opens "$here/pom.xml")
flink_opens=$(opens flink.java17.opens "$here/flink/pom.xml")
export SPARK_LOCAL_IP=127.0.0.1 SPARK_LOCAL_HOSTNAME=localhost CELEBORN_LOCAL_IP=127.0.0.1

# job NAME LABEL CMD...: runs one job's JVM under the deadline; when it wrote no line
# (killed, crashed), writes a failed one with the end of its log.
job() {
  local name=$1 label=$2
  shift 2
  local log=$work/$name.log line=$work/$name.line
  local start_ms
  start_ms=$(date +%s%3N)
  (cd "$work" && timeout --kill-after=10s "$timeout_s" "$@") >"$log" 2>&1
  local rc=$?
  if [ -s "$line" ]; then
    cat "$line" >>"$out"
  else
    local why="exit status $rc"
    [ $rc = 124 ] || [ $rc = 137 ] && why="no result within $timeout_s s (killed)"
    local last
    last=$(grep -v '^\s' "$log" | grep -iE 'exception|error' | tail -1 | tr '\t' ' ' | cut -c1-300)
    printf '%s\tfailed\t%d\t%d\t%s; %s (log %s)\n' "$label" $(($(date +%s%3N) - start_ms)) "$start_ms" \
      "$why" "${last:-no error in the log}" "$log" >>"$out"
  fi
}

records=${SOAK_JOBS_RECORDS:-200000}
uniffle_client=uniffle-${SOAK_JOBS_UNIFFLE:-GRPC_NETTY}
celeborn_client=celeborn-${SOAK_JOBS_WRITER:-HASH}
replicas="-Dswitchyard.soak.replicas=${SOAK_JOBS_REPLICAS:-2}"
# The first Spark JVM computes the round's reference on Spark's own shuffle; the second reads it.
# shellcheck disable=SC2086
job spark-uniffle "spark-$uniffle_client" java -Xmx2g $spark_opens "$replicas" -cp "$spark_cp" \
  dev.switchyard.it.SoakJobMain "$uniffle_client" "$uniffle" "$records" "$work/spark-reference.txt" "$work/spark-uniffle.line"
# shellcheck disable=SC2086
job spark-celeborn "spark-$celeborn_client" java -Xmx2g $spark_opens "$replicas" -cp "$spark_cp" \
  dev.switchyard.it.SoakJobMain "$celeborn_client" "$celeborn" "$records" "$work/spark-reference.txt" "$work/spark-celeborn.line"
if [ "$flink" != 0 ]; then
  flink_cp="$state/flink-classes:$(cat "$state/flink-classpath.txt"):$flink_jar"
  # shellcheck disable=SC2086
  job flink-celeborn flink-celeborn java -Xmx2g $flink_opens -cp "$flink_cp" \
    -Dswitchyard.flink.workDir="$work/flink-work" -Dswitchyard.flink.jobTimeout=$((timeout_s / 2)) \
    dev.switchyard.flink.SoakFlinkMain "$celeborn" "${SOAK_JOBS_FLINK_LINES:-100000}" "$work/flink-celeborn.line"
fi
# The shuffle files of the reference runs; the logs stay.
rm -rf "$work/target/spark-local" "$work/flink-work"
exit 0
