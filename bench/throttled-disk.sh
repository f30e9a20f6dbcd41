#!/usr/bin/env bash
# A disk with a hard bandwidth limit, for `switchyard-bench neighbours --jvm-dir`
# (docs/benchmarks.md, "Noisy neighbours"): the JVM servers have no write throttle of
# their own, so the device itself is throttled and every server under comparison keeps
# its data on it.
#
#   throttled-disk.sh up DIR [SIZE] [WRITE] [READ]
#                                            a loop device over DIR.img (SIZE, default 20G),
#                                            ext4, mounted at DIR, writes held to WRITE bytes/s
#                                            (default 67108864: 64 MiB/s) and reads to READ
#                                            (default 268435456: 256 MiB/s), the bench's
#                                            --write-rate and --read-rate
#   throttled-disk.sh down DIR               unmounts DIR, frees the loop device and its
#                                            limits, deletes DIR.img
#
# While it is up, the page cache holds at most 256 MiB of data not yet written back
# (vm.dirty_bytes; vm.dirty_background_bytes 64 MiB), as much as the bench node's memory
# budget: with the default 20% of RAM, servers that write through the page cache (the JVM
# ones) would absorb gigabytes beyond the disk's rate and never meet the disk within a run.
# `down` restores the values it found.
#
# Needs root and cgroup v1's blkio controller. The limit is set in the root group, which
# holds the kernel's writeback threads: page-cache writes (the JVM servers' flushes) are
# held to the rate too, which a limit on the servers' own group would not do.
set -euo pipefail

blkio=/sys/fs/cgroup/blkio
usage() { echo "usage: throttled-disk.sh up DIR [SIZE] [WRITE] [READ] | down DIR" >&2; exit 2; }
[ $# -ge 2 ] || usage
cmd=$1 dir=$(realpath -m "$2")
img=$dir.img

limit() { # major:minor write-rate read-rate (0: no limit)
  echo "$1 $2" > "$blkio/blkio.throttle.write_bps_device"
  echo "$1 $3" > "$blkio/blkio.throttle.read_bps_device"
}

case "$cmd" in
  up)
    size=${3:-20G} write=${4:-67108864} read=${5:-268435456}
    [ -w "$blkio/blkio.throttle.write_bps_device" ] || {
      echo "throttled-disk.sh: no writable $blkio (root and cgroup v1 blkio are needed)" >&2; exit 1; }
    mountpoint -q "$dir" && { echo "throttled-disk.sh: $dir is mounted already" >&2; exit 1; }
    mkdir -p "$dir"
    truncate -s "$size" "$img"
    dev=$(losetup --find --show "$img")
    mkfs.ext4 -q -F "$dev"
    mount "$dev" "$dir"
    limit "$(lsblk -dno MAJ:MIN "$dev" | tr -d ' ')" "$write" "$read"
    sysctl -n vm.dirty_bytes vm.dirty_background_bytes vm.dirty_ratio vm.dirty_background_ratio > "$dir.sysctl"
    sysctl -q -w vm.dirty_bytes=268435456 vm.dirty_background_bytes=67108864
    echo "throttled-disk.sh: $dir on $dev, writes held to $write bytes/s, reads to $read"
    ;;
  down)
    dev=$(findmnt -no SOURCE "$dir" || true)
    if [ -n "$dev" ]; then
      limit "$(lsblk -dno MAJ:MIN "$dev" | tr -d ' ')" 0 0 || true
      umount "$dir"
      losetup -d "$dev"
    fi
    if [ -f "$dir.sysctl" ]; then
      # Bytes take precedence over ratios when non-zero: restore whichever was in force.
      { read -r db; read -r dbb; read -r dr; read -r dbr; } < "$dir.sysctl"
      if [ "$db" != 0 ]; then sysctl -q -w vm.dirty_bytes="$db"; else sysctl -q -w vm.dirty_ratio="$dr"; fi
      if [ "$dbb" != 0 ]; then sysctl -q -w vm.dirty_background_bytes="$dbb"; else sysctl -q -w vm.dirty_background_ratio="$dbr"; fi
      rm -f "$dir.sysctl"
    fi
    rm -f "$img"
    rmdir "$dir" 2>/dev/null || true
    echo "throttled-disk.sh: $dir released"
    ;;
  *) usage ;;
esac
