#!/usr/bin/env bash
# The Spark-level benchmark (SparkBenchTest, JUnit tag "bench"): each workload through
# Spark's own shuffle and through each stock client against a fresh release switchyard,
# interleaved round by round, each run in a fresh JVM; prints best and median wall time,
# map and reduce stages, the ratio to Spark's own shuffle, the gateway's CPU-s per GiB
# and peak RSS, and for the SQL workload each query's time and the requests the gateway
# answered per kind (the per-shuffle fixed cost). Not part of .ci/test: it takes about
# 20 minutes with the defaults and its figures only mean something on an idle machine.
#
#   integration/bench-spark.sh [mvn args...]
#
# Environment:
#   SWITCHYARD_BIN      the binary (default: builds and uses <repo>/target/release/switchyard)
#   BENCH_ROUNDS        rounds (default 3)
#   BENCH_WORKLOADS     groupby,sql (default both)
#   BENCH_CLIENTS       default vanilla,uniffle-GRPC,celeborn-HASH, plus the JVM paths below
#                       when their classpath is set (also uniffle-GRPC_NETTY, celeborn-SORT,
#                       jvm-uniffle-GRPC_NETTY; 0.9.x over GRPC_NETTY may fail its reads on
#                       JDK 17, Uniffle #2082)
#   BENCH_GIB           groupby size in GiB (default 1)
#   BENCH_SQL_ROWS      store_sales rows of the SQL workload (default 1500000)
#   UNIFFLE_VERSION     default 0.9.2;  CELEBORN_VERSION  default 0.5.4
#   BENCH_UNIFFLE_CONF  extra [uniffle] lines for the gateway, ';'-separated
#                       (e.g. 'report_durability = "background"')
#   JVM_UNIFFLE_CLASSPATH   optional: the classpath of an upstream Uniffle coordinator and
#                       shuffle server; adds the path jvm-uniffle-GRPC (same job, same memory,
#                       against the JVM servers, started fresh per round like Switchyard)
#   JVM_CELEBORN_CLASSPATH  optional: the same for a Celeborn master and worker (jvm-celeborn-HASH)
#                       Neither is on Maven Central here: build them from the upstream tags
#                       outside this repo, e.g. for Uniffle v0.10.0
#                         mvn -pl server,coordinator -am install -DskipTests \
#                           -Phadoop-dependencies-included -Dremoteresources.skip=true
#                         mvn -pl server,coordinator dependency:build-classpath -Dmdep.outputFile=cp.txt
#                         export JVM_UNIFFLE_CLASSPATH="$(cat server/cp.txt):$(cat coordinator/cp.txt):$PWD/server/target/*:$PWD/coordinator/target/*"
#                       and for Celeborn (v0.7.0) `mvn -pl master,worker -am package -DskipTests`,
#                       then the same with master/ and worker/. A distribution's jars work too:
#                       JVM_CELEBORN_CLASSPATH="$CELEBORN_HOME/jars/*".
# Report: integration/target/bench/<time>/report.txt (also printed).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
if [ -z "${SWITCHYARD_BIN:-}" ]; then
  (cd "$root" && cargo build --release -p switchyard)
  SWITCHYARD_BIN=$root/target/release/switchyard
fi
cd "$here"
clients=${BENCH_CLIENTS:-vanilla,uniffle-GRPC,celeborn-HASH}
if [ -z "${BENCH_CLIENTS:-}" ]; then
  [ -n "${JVM_UNIFFLE_CLASSPATH:-}" ] && clients="$clients,jvm-uniffle-GRPC"
  [ -n "${JVM_CELEBORN_CLASSPATH:-}" ] && clients="$clients,jvm-celeborn-HASH"
fi
exec "${MVN:-mvn}" -B test -Dshuffle.client=bench -Dswitchyard.bin="$SWITCHYARD_BIN" \
  -Dswitchyard.bench.rounds="${BENCH_ROUNDS:-3}" \
  -Dswitchyard.bench.workloads="${BENCH_WORKLOADS:-groupby,sql}" \
  -Dswitchyard.bench.clients="$clients" \
  -Dswitchyard.bench.gib="${BENCH_GIB:-1}" \
  -Dswitchyard.bench.sqlRows="${BENCH_SQL_ROWS:-1500000}" \
  -Dswitchyard.uniffle.conf="${BENCH_UNIFFLE_CONF:-}" \
  -Duniffle.client.version="${UNIFFLE_VERSION:-0.9.2}" -Duniffle.client.type=GRPC \
  -Dceleborn.client.version="${CELEBORN_VERSION:-0.5.4}" -Dceleborn.writers=HASH \
  "$@"
