#!/usr/bin/env bash
# Builds the image localhost/switchyard:dev with podman and no registry:
#   1. the base image localhost/debian:<release>-slim, unless podman has it:
#      a minimal Debian root made by debootstrap from the machine's apt mirror,
#      cached as a tarball between runs, then `podman import`ed;
#   2. deploy/docker/Dockerfile's target `prebuilt` on that base, with a binary
#      built on the host (debug info stripped from the copy).
#
# Usage: deploy/docker/build.sh [BINARY]
#   BINARY: default $SWITCHYARD_BIN, else target/release/switchyard if built,
#   else target/debug/switchyard (under $CARGO_TARGET_DIR when set). CI passes
#   the debug binary it builds for the other tests.
# Environment:
#   IMAGE            the tag to build (localhost/switchyard:dev)
#   DEBIAN_RELEASE   bookworm (the release of the base and of the host binary's glibc)
#   DEBIAN_MIRROR    default: the first URI of /etc/apt/sources.list.d/debian.sources
#                    (or /etc/apt/sources.list), else http://deb.debian.org/debian
#   SWITCHYARD_IMAGE_CACHE  where the debootstrap'ed root is kept:
#                    /var/cache/switchyard-image if writable, else ~/.cache/switchyard-image
#   CONTAINERS_CONF  podman's config; on VMs where crun fails (CI's), the one
#                    .ci/install-podman prints (runc, lower default ulimits)
# Needs root (debootstrap, rootful podman), podman, and debootstrap for step 1.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

IMAGE="${IMAGE:-localhost/switchyard:dev}"
DEBIAN_RELEASE="${DEBIAN_RELEASE:-bookworm}"
BASE_IMAGE="localhost/debian:${DEBIAN_RELEASE}-slim"
say() { echo "build.sh: $*" >&2; }

binary() {
    local target="${CARGO_TARGET_DIR:-$repo/target}"
    if [ -n "${1:-}" ]; then echo "$1"
    elif [ -n "${SWITCHYARD_BIN:-}" ]; then echo "$SWITCHYARD_BIN"
    elif [ -x "$target/release/switchyard" ]; then echo "$target/release/switchyard"
    else echo "$target/debug/switchyard"
    fi
}

mirror() {
    if [ -n "${DEBIAN_MIRROR:-}" ]; then echo "$DEBIAN_MIRROR"; return; fi
    local uri=""
    if [ -f /etc/apt/sources.list.d/debian.sources ]; then
        uri=$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\).*/\1/p' /etc/apt/sources.list.d/debian.sources | head -1)
    fi
    if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
        uri=$(awk '$1 == "deb" && $2 !~ /security/ { print $2; exit }' /etc/apt/sources.list)
    fi
    echo "${uri:-http://deb.debian.org/debian}"
}

cache_dir() {
    if [ -n "${SWITCHYARD_IMAGE_CACHE:-}" ]; then echo "$SWITCHYARD_IMAGE_CACHE"
    elif mkdir -p /var/cache/switchyard-image 2>/dev/null && [ -w /var/cache/switchyard-image ]; then
        echo /var/cache/switchyard-image
    else echo "${XDG_CACHE_HOME:-$HOME/.cache}/switchyard-image"
    fi
}

# The root file system of a minimal Debian as a tarball, made once per release
# and mirror. minbase is what debian:*-slim has: apt, dpkg, bash, coreutils.
base_tarball() {
    local dir mirror tarball root
    dir=$(cache_dir)
    mirror=$(mirror)
    mkdir -p "$dir"
    tarball="$dir/debian-${DEBIAN_RELEASE}-minbase-$(echo "$mirror" | md5sum | cut -c1-8).tar.zst"
    if [ -s "$tarball" ]; then
        say "base root from the cache: $tarball" && echo "$tarball" && return
    fi
    command -v debootstrap >/dev/null || { say "debootstrap missing (.ci/install-podman installs it)"; exit 1; }
    root=$(mktemp -d "$dir/root.XXXXXX")
    say "debootstrap --variant=minbase $DEBIAN_RELEASE from $mirror"
    debootstrap --variant=minbase "$DEBIAN_RELEASE" "$root" "$mirror" >&2
    rm -rf "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/*
    # As Debian's own images: the release, its updates and the security archive.
    cat >"$root/etc/apt/sources.list" <<SOURCES
deb $mirror $DEBIAN_RELEASE main
deb $mirror $DEBIAN_RELEASE-updates main
deb ${mirror%/debian}/debian-security $DEBIAN_RELEASE-security main
SOURCES
    tar --numeric-owner -C "$root" -c . | zstd -q -T0 -o "$tarball.tmp"
    mv "$tarball.tmp" "$tarball"
    rm -rf "$root"
    echo "$tarball"
}

base_image() {
    if podman image exists "$BASE_IMAGE"; then
        say "base image $BASE_IMAGE exists"
        return
    fi
    local tarball
    tarball=$(base_tarball)
    zstd -q -d -c "$tarball" | podman import --change 'CMD ["/bin/bash"]' - "$BASE_IMAGE" >/dev/null
    say "imported $BASE_IMAGE ($(podman image inspect --format '{{.Size}}' "$BASE_IMAGE") bytes)"
}

# A build context with only what the `prebuilt` target copies: not the
# repository, whose target/ holds gigabytes.
context() {
    local bin=$1 ctx=$2
    mkdir -p "$ctx/prebuilt" "$ctx/deploy/docker"
    cp "$repo/deploy/docker/switchyard.toml" "$ctx/deploy/docker/"
    if command -v objcopy >/dev/null; then
        objcopy --strip-debug "$bin" "$ctx/prebuilt/switchyard"
    else
        cp "$bin" "$ctx/prebuilt/switchyard"
    fi
    chmod 0755 "$ctx/prebuilt/switchyard"
}

main() {
    local bin started
    started=$(date +%s)
    bin=$(binary "${1:-}")
    [ -x "$bin" ] || { say "no switchyard binary at $bin (cargo build -p switchyard, or pass its path)"; exit 1; }
    command -v podman >/dev/null || { say "podman missing (.ci/install-podman installs it)"; exit 1; }
    say "binary $bin ($("$bin" --version 2>/dev/null || echo '?'))"
    base_image
    ctx=$(mktemp -d)  # global: the EXIT trap reads it
    trap 'rm -rf "$ctx"' EXIT
    context "$bin" "$ctx"
    # --format docker keeps the HEALTHCHECK (OCI images have none); chroot
    # isolation runs the RUN steps without a container runtime of their own.
    podman build --pull=never --isolation=chroot --format docker \
        --build-arg "BASE_IMAGE=$BASE_IMAGE" --build-arg "DEBIAN_RELEASE=$DEBIAN_RELEASE" \
        --target prebuilt -f "$repo/deploy/docker/Dockerfile" -t "$IMAGE" "$ctx" >&2
    say "built $IMAGE in $(( $(date +%s) - started ))s ($(podman image inspect --format '{{.Size}}' "$IMAGE") bytes)"
}

main "$@"
