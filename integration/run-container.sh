#!/usr/bin/env bash
# The container image, built and run (CI: .ci/test). Steps, each a PASS/FAIL line:
#   1. build localhost/switchyard:dev with deploy/docker/build.sh from the host's
#      switchyard binary ($SWITCHYARD_BIN, default target/debug/switchyard);
#   2. the Helm chart (helm template) against the image: the same user and group
#      ids, config path, data path, ports, command;
#   3. run it with podman as the chart runs it (read-only root, no capabilities,
#      /tmp a tmpfs; --init, host network, default ports, SWITCHYARD_HOST=127.0.0.1,
#      a named volume for the data), check /healthz and /metrics;
#   4. real Spark jobs with the stock clients from Maven Central (Uniffle 0.9.2,
#      Celeborn 0.5.4) against it, equal to Spark's own shuffle, and a shuffle of
#      each client read again after `podman stop` + `podman start`
#      (ContainerJobsTest, tag `container`);
#   5. `podman stop -t 120`: exit status 0 and the shutdown logged; the volume
#      holds the node id and the restart manifest; a new container on the same
#      volume comes back as the same node.
# podman, runc and debootstrap come from .ci/install-podman (Debian's packages;
# installed when missing: a machine without them fails here, it never skips).
# Logs: integration/target/container/. Extra arguments go to mvn.
# Environment: SWITCHYARD_BIN, IMAGE (localhost/switchyard:dev),
# SWITCHYARD_CONTAINER_NAME (switchyard-ci; its volume is <name>-data),
# SWITCHYARD_HELM (else .ci/install-helm), CONTAINERS_CONF (else .ci/install-podman's).
# The container binds the default ports (19990, 19999, 19997, 19996, 9097,
# 9100-9103) on 127.0.0.1: run it alone.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

NAME="${SWITCHYARD_CONTAINER_NAME:-switchyard-ci}"
VOLUME="$NAME-data"
export IMAGE="${IMAGE:-localhost/switchyard:dev}"
BIN="${SWITCHYARD_BIN:-${CARGO_TARGET_DIR:-$repo/target}/debug/switchyard}"
ADMIN=http://127.0.0.1:19990
logs="$repo/integration/target/container"
mkdir -p "$logs"
started=$(date +%s)

fail() { echo "FAIL  container: $*" >&2; exit 1; }
pass() { echo "PASS  container: $* ($(( $(date +%s) - started ))s so far)"; }

if [ -z "${CONTAINERS_CONF:-}" ]; then
    CONTAINERS_CONF=$(.ci/install-podman) || fail ".ci/install-podman failed: no podman"
    export CONTAINERS_CONF
fi
command -v podman >/dev/null || fail "no podman"
[ -x "$BIN" ] || fail "no switchyard binary at $BIN (cargo build -p switchyard)"

cleanup() {
    podman logs "$NAME" >"$logs/$NAME.log" 2>&1 || true
    podman rm -f "$NAME" >/dev/null 2>&1 || true
    podman volume rm -f "$VOLUME" >/dev/null 2>&1 || true
}
trap cleanup EXIT

# ---- 1. the image
deploy/docker/build.sh "$BIN" 2>"$logs/build.log" || { tail -30 "$logs/build.log"; fail "build.sh (log $logs/build.log)"; }
tail -1 "$logs/build.log"
pass "built $IMAGE"

# ---- 2. the chart against the image
check_chart() {
    local helm chart user group ports exposed config data
    helm="${SWITCHYARD_HELM:-$(.ci/install-helm)}"
    chart=$("$helm" template sy deploy/helm/switchyard 2>/dev/null)
    user=$(sed -n 's/^ *runAsUser: *//p' <<<"$chart" | sort -u)
    group=$(sed -n 's/^ *runAsGroup: *//p' <<<"$chart" | sort -u)
    [ "$(podman image inspect --format '{{.Config.User}}' "$IMAGE")" = "$user:$group" ] \
        || fail "chart: runAsUser/runAsGroup $user/$group, image USER $(podman image inspect --format '{{.Config.User}}' "$IMAGE")"
    [ "$(podman run --rm --no-healthcheck --entrypoint /bin/sh "$IMAGE" -c 'id -u; id -g; command -v switchyard' | tr '\n' ' ')" \
        = "$user $group /usr/local/bin/switchyard " ] || fail "chart: the image's user or PATH differ"
    ports=$(grep -o 'containerPort: [0-9]*' <<<"$chart" | awk '{print $2}' | sort -u | tr '\n' ' ')
    exposed=$(podman image inspect --format '{{range $p, $_ := .Config.ExposedPorts}}{{$p}} {{end}}' "$IMAGE" \
        | tr ' ' '\n' | sed -n 's|/tcp$||p' | sort -u | tr '\n' ' ')
    [ "$ports" = "$exposed" ] || fail "chart: containerPorts [$ports], image EXPOSE [$exposed]"
    config=$(grep -A1 'name: SWITCHYARD_CONFIG' <<<"$chart" | sed -n 's/^ *value: *//p' | sort -u)
    grep -q "SWITCHYARD_CONFIG=$config" <<<"$(podman image inspect --format '{{range .Config.Env}}{{.}} {{end}}' "$IMAGE")" \
        || fail "chart: SWITCHYARD_CONFIG=$config is not the image's"
    grep -q "{name: config, mountPath: $(dirname "$config")," <<<"$chart" || fail "chart: the config is not mounted at $(dirname "$config")"
    data=$(sed -n 's/.*{name: data, mountPath: "\([^"]*\)".*/\1/p' <<<"$chart" | sort -u)
    [ "$(podman image inspect --format '{{range $v, $_ := .Config.Volumes}}{{$v}}{{end}}' "$IMAGE")" = "$data" ] \
        || fail "chart: the coordinator's data dir $data is not the image's VOLUME"
    [ "$(grep -c 'args: \["serve"\]' <<<"$chart")" -ge 2 ] && [ "$(podman image inspect --format '{{json .Config.Cmd}}' "$IMAGE")" = '["serve"]' ] \
        || fail "chart: the pods' args are not the image's CMD [\"serve\"]"
    pass "chart matches the image: user $user:$group, config $config, data $data, ports $ports"
}
check_chart

# ---- 3. run it
run_container() {
    podman rm -f "$NAME" >/dev/null 2>&1 || true
    # The Helm chart's securityContext: read-only root, no capabilities, no
    # privilege escalation; /tmp writable. No HEALTHCHECK timer (podman runs
    # it through systemd, which CI's machine lacks): step 3 runs its command.
    podman run -d --name "$NAME" --init --network host --no-healthcheck \
        --read-only --tmpfs /tmp --cap-drop ALL --security-opt no-new-privileges \
        -v "$VOLUME:/var/lib/switchyard/data" \
        -e SWITCHYARD_HOST=127.0.0.1 -e SWITCHYARD_MEMORY_CAPACITY=512MiB -e SWITCHYARD_DISK_MIN_FREE=256MiB \
        "$IMAGE" >/dev/null || fail "podman run"
    for _ in $(seq 1 300); do
        [ "$(curl -fsS "$ADMIN/readyz" 2>/dev/null)" = ready ] && return
        [ "$(podman inspect --format '{{.State.Running}}' "$NAME")" = true ] || break
        sleep 0.2
    done
    podman logs "$NAME" | tail -30 >&2
    fail "the container is not ready at $ADMIN/readyz"
}
node_id() { curl -fsS "$ADMIN/api/v1/status" | sed -n 's/.*"node":{"id":"\([^"]*\)".*/\1/p'; }

podman rm -f "$NAME" >/dev/null 2>&1 || true
podman volume rm -f "$VOLUME" >/dev/null 2>&1 || true
# Another server on the default ports would answer for the container.
! curl -s -m 2 -o /dev/null "$ADMIN/healthz" || fail "something already answers at $ADMIN: stop it first"
podman volume create "$VOLUME" >/dev/null
run_container
[ "$(curl -fsS "$ADMIN/healthz")" = ok ] || fail "/healthz"
health=$(podman image inspect --format '{{index .Config.Healthcheck.Test 1}}' "$IMAGE")
podman exec "$NAME" /bin/sh -c "$health" >/dev/null || fail "the image's HEALTHCHECK ($health) says unhealthy"
grep -q '^switchyard_' <<<"$(curl -fsS "$ADMIN/metrics")" || fail "/metrics has no switchyard_ series"
[ "$(podman top "$NAME" huser | sed -n 2p)" = 10001 ] || fail "the server does not run as uid 10001: $(podman top "$NAME" huser user args)"
first_id=$(node_id)
[ -n "$first_id" ] || fail "no node id in /api/v1/status"
pass "running as uid 10001, node $first_id, /healthz ok, HEALTHCHECK healthy, /metrics served"

# ---- 4. Spark jobs through it
mvn -B -f integration/pom.xml test -Dshuffle.client=container -Dswitchyard.container.name="$NAME" \
    -Dceleborn.writers=HASH "$@" >"$logs/mvn.log" 2>&1 \
    || { grep -E 'Tests run|FAIL|ERROR' "$logs/mvn.log" | tail -20; fail "ContainerJobsTest (log $logs/mvn.log)"; }
grep -E '^\[(timing|container)\]|Tests run:' "$logs/mvn.log" | tail -8
pass "Spark jobs through the container (Uniffle 0.9.2, Celeborn 0.5.4)"

# ---- 5. a clean stop, and the data on the volume
t0=$(date +%s)
podman stop -t 120 "$NAME" >/dev/null
status=$(podman inspect --format '{{.State.ExitCode}}' "$NAME")
[ "$status" = 0 ] || fail "exit status $status after podman stop (SIGTERM)"
log=$(podman logs "$NAME" 2>&1)
grep -q 'switchyard stopped' <<<"$(tail -12 <<<"$log")" || fail "no 'switchyard stopped' at the end of the log"
grep 'partitions recorded for the restart' <<<"$log" | tail -1
podman run --rm --no-healthcheck -v "$VOLUME:/d" --entrypoint /bin/sh "$IMAGE" -c 'test -s /d/node-id && test -s /d/.switchyard/manifest.redb' \
    || fail "the volume lacks node-id or .switchyard/manifest.redb"
pass "podman stop: exit 0 in $(( $(date +%s) - t0 ))s, shutdown logged, node-id and manifest on the volume"
podman logs "$NAME" >"$logs/$NAME-first.log" 2>&1
run_container
[ "$(node_id)" = "$first_id" ] || fail "a new container on the volume is node $(node_id), not $first_id"
grep -q '"id_source":"persisted"' <<<"$(curl -fsS "$ADMIN/api/v1/status")" || fail "the node id was not read from the volume"
podman stop -t 120 "$NAME" >/dev/null
[ "$(podman inspect --format '{{.State.ExitCode}}' "$NAME")" = 0 ] || fail "the second container's exit status"
pass "a new container on the same volume is node $first_id again; stopped cleanly"
echo "PASS  container: all in $(( $(date +%s) - started ))s"
