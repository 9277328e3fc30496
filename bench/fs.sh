#!/usr/bin/env bash
# Filesystem benchmark through FUSE: shoal against zfs-fuse (Debian), same layout
# (raidz2 of 6 file devices in one directory, recordsize 128K, compression off), same
# run, same fio jobs. Prints one JSON object with the figures and shoal/zfs-fuse ratios.
# The fsync job runs once more on shoal with a log device (a seventh file in the same
# directory), for the log-device-versus-none ratio.
# Both FUSE file systems get the same kernel caching of names and attributes:
# `shoal mount` answers with 60 s lifetimes, so zfs-fuse runs with
# `--fuse-attr-timeout 60 --fuse-entry-timeout 60` (its default is 0, no caching;
# ZFS_FUSE_TTL=0 runs it so, for its out-of-the-box figures).
# A benchmark, never a test. Needs root and /dev/fuse.
#
#   bench/fs.sh                          # 4 GiB streams under target/bench-data
#   BENCH_DIR=/mnt/disk SIZE_MIB=1024 FILES=20000 bench/fs.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${BENCH_DIR:-$PWD/target/bench-data}/fs
SIZE_MIB=${SIZE_MIB:-4096}
DEV_MIB=${DEV_MIB:-$(( SIZE_MIB * 6 / 4 / 6 + 1024 ))}
FILES=${FILES:-100000}
SECONDS_SYNC=${SECONDS_SYNC:-20}
# shoal's FUSE mounts cache names and attributes this long (crates/fuse: TTL_MS).
SHOAL_FUSE_TTL=60
ZFS_FUSE_TTL=${ZFS_FUSE_TTL:-$SHOAL_FUSE_TTL}
. bench/lib.sh
need fio
need_zfs_fuse
cargo build --release -q -p shoal
SHOAL=$PWD/target/release/shoal
export SHOAL_STATE_DIR="$DIR/state"
OUT=$(mktemp -d)

cleanup() {
    "$SHOAL" unmount "$DIR/shoal-mnt" 2>/dev/null || true
    zpool destroy -f zbench 2>/dev/null || true
    [ -f "$OUT/zfs.pid" ] && kill "$(cat "$OUT/zfs.pid")" 2>/dev/null || true
    sleep 1
    rm -rf "$DIR" "$OUT"
    remove_zfs_fuse_if_installed
}
trap cleanup EXIT
rm -rf "$DIR"
mkdir -p "$DIR"


fio_job() { # name dir rw bs extra... -> JSON {bw_bytes, iops, lat_us_p50}
    local name=$1 dir=$2 rw=$3 bs=$4
    shift 4
    fio --name="$name" --directory="$dir" --rw="$rw" --bs="$bs" --ioengine=psync \
        --output-format=json "$@" > "$OUT/fio.json"
    python3 - "$OUT/fio.json" "$rw" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
side = "write" if "write" in sys.argv[2] else "read"
print(json.dumps({"bw_bytes": j[side]["bw_bytes"], "iops": j[side]["iops"]}))
PY
}

files_job() { # dir -> JSON of create/stat/delete rates for FILES empty files
    python3 - "$1" "$FILES" <<'PY'
import os, sys, time, json
d, n = os.path.join(sys.argv[1], "many"), int(sys.argv[2])
os.mkdir(d)
names = [os.path.join(d, f"f{i:07d}") for i in range(n)]
t = time.monotonic()
for p in names:
    os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644))
c = time.monotonic() - t
t = time.monotonic()
for p in names:
    os.stat(p)
s = time.monotonic() - t
t = time.monotonic()
for p in names:
    os.unlink(p)
u = time.monotonic() - t
os.rmdir(d)
print(json.dumps({"create_per_s": n / c, "stat_per_s": n / s, "delete_per_s": n / u}))
PY
}

# workloads: sw (seq write), sr (seq read, caches dropped and the FS remounted), rs
# (8K random writes with fsync, one job), files (create/stat/delete)
run_all() { # tag mountpoint remount-command
    local tag=$1 mnt=$2 remount=$3
    echo "$tag: sequential write..." >&2
    fio_job sw "$mnt" write 128k --size="${SIZE_MIB}M" --end_fsync=1 > "$OUT/$tag.sw"
    $remount
    drop_caches
    echo "$tag: sequential read (uncached)..." >&2
    fio_job sw "$mnt" read 128k --size="${SIZE_MIB}M" > "$OUT/$tag.sr"
    rm -f "$mnt"/sw.*
    echo "$tag: 8K random writes with fsync..." >&2
    fio_job rs "$mnt" randwrite 8k --size=256M --fsync=1 --runtime="$SECONDS_SYNC" --time_based > "$OUT/$tag.rs"
    rm -f "$mnt"/rs.*
    echo "$tag: $FILES files..." >&2
    files_job "$mnt" > "$OUT/$tag.files"
}

# ---- the raw device: the ceiling both sides share ----
# One file in the same directory, O_DIRECT, written fresh (like the device files are)
# and read back with caches dropped, at queue depth 1 and 8.
echo "raw device..." >&2
mkdir -p "$DIR/raw"
fio_job raw "$DIR/raw" write 128k --size="${SIZE_MIB}M" --direct=1 --end_fsync=1 > "$OUT/raw.w"
drop_caches
fio_job raw "$DIR/raw" read 128k --size="${SIZE_MIB}M" --direct=1 > "$OUT/raw.r1"
fio_job raw "$DIR/raw" read 128k --size="${SIZE_MIB}M" --direct=1 --ioengine=libaio --iodepth=8 > "$OUT/raw.r8"
rm -rf "$DIR/raw"

# ---- shoal ----
mkdir -p "$DIR/shoal-mnt"
"$SHOAL" pool create --dir "$DIR/shoal-devs" --size "${DEV_MIB}M" sbench raidz2 a b c d e f >&2
"$SHOAL" fs create sbench/fs -o recordsize=128K -o compression=off >&2
shoal_mount() {
    "$SHOAL" mount sbench/fs "$DIR/shoal-mnt" 2>>"$OUT/shoal-mount.log" &
    for _ in $(seq 100); do mountpoint -q "$DIR/shoal-mnt" && return; sleep 0.1; done
    echo "shoal mount did not come up" >&2; exit 1
}
shoal_remount() {
    "$SHOAL" unmount "$DIR/shoal-mnt"
    while mountpoint -q "$DIR/shoal-mnt" || pgrep -f "shoal mount sbench/fs" >/dev/null; do sleep 0.1; done
    shoal_mount
}
shoal_mount
run_all shoal "$DIR/shoal-mnt" shoal_remount
shoal_destroy() {
    "$SHOAL" unmount "$DIR/shoal-mnt"
    while pgrep -f "shoal mount sbench/fs" >/dev/null; do sleep 0.1; done
    "$SHOAL" pool destroy sbench >&2
    rm -rf "$DIR/shoal-devs"
}
shoal_destroy
"$SHOAL" pool create --dir "$DIR/shoal-devs" --size "${DEV_MIB}M" sbench raidz2 a b c d e f log g >&2
"$SHOAL" fs create sbench/fs -o recordsize=128K -o compression=off >&2
shoal_mount
echo "shoal with a log device: 8K random writes with fsync..." >&2
fio_job rs "$DIR/shoal-mnt" randwrite 8k --size=256M --fsync=1 --runtime="$SECONDS_SYNC" --time_based > "$OUT/shoal.rs-log"
shoal_destroy

# ---- zfs-fuse ----
zfs-fuse --no-kstat-mount -p "$OUT/zfs.pid" --fuse-attr-timeout "$ZFS_FUSE_TTL" --fuse-entry-timeout "$ZFS_FUSE_TTL"
sleep 2
mkdir -p "$DIR/zfs-devs"
devs=()
for d in a b c d e f; do truncate -s "${DEV_MIB}M" "$DIR/zfs-devs/$d"; devs+=("$DIR/zfs-devs/$d"); done
zpool create -f -m "$DIR/zfs-mnt" zbench raidz2 "${devs[@]}" >&2
zfs set recordsize=128K zbench
zfs set compression=off zbench
zfs_remount() { zpool export zbench && zpool import -d "$DIR/zfs-devs" zbench; }
run_all zfs "$DIR/zfs-mnt" zfs_remount

python3 - "$OUT" "$SIZE_MIB" "$FILES" "$SHOAL_FUSE_TTL" "$ZFS_FUSE_TTL" <<'PY'
import json, os, sys
d = sys.argv[1]
r = lambda n: json.load(open(os.path.join(d, n)))
fig = {}
for tag in ("shoal", "zfs"):
    fig[tag] = {
        "seq_write_mb_s": round(r(f"{tag}.sw")["bw_bytes"] / 1e6, 1),
        "seq_read_uncached_mb_s": round(r(f"{tag}.sr")["bw_bytes"] / 1e6, 1),
        "rand_write_8k_fsync_iops": round(r(f"{tag}.rs")["iops"], 1),
        **{k: round(v) for k, v in r(f"{tag}.files").items()},
    }
ratio = {k: round(fig["shoal"][k] / fig["zfs"][k], 2) for k in fig["shoal"] if fig["zfs"][k]}
log_iops = r("shoal.rs-log")["iops"]
fig["shoal"]["rand_write_8k_fsync_iops_log_device"] = round(log_iops, 1)
ratio["rand_write_8k_fsync_iops_log_device"] = round(log_iops / fig["zfs"]["rand_write_8k_fsync_iops"], 2)
log_vs_none = round(log_iops / fig["shoal"]["rand_write_8k_fsync_iops"], 2)
raw = {
    "write_mb_s": round(r("raw.w")["bw_bytes"] / 1e6, 1),
    "read_qd1_mb_s": round(r("raw.r1")["bw_bytes"] / 1e6, 1),
    "read_qd8_mb_s": round(r("raw.r8")["bw_bytes"] / 1e6, 1),
}
# RAID-Z2 of 6 writes 6/4 of the data, all six files on the one disk underneath.
ceiling = {
    "seq_write_vs_zfs_fuse": round(raw["write_mb_s"] * 4 / 6 / fig["zfs"]["seq_write_mb_s"], 2),
    "seq_read_vs_zfs_fuse": round(raw["read_qd8_mb_s"] / fig["zfs"]["seq_read_uncached_mb_s"], 2),
}
print(json.dumps({
    "size_mib": int(sys.argv[2]), "files": int(sys.argv[3]),
    "layout": "raidz2 of 6 file devices, recordsize 128K, compression off",
    "kernel_name_and_attr_cache_s": {"shoal": int(sys.argv[4]), "zfs_fuse": float(sys.argv[5])},
    "shoal": fig["shoal"], "zfs_fuse": fig["zfs"], "shoal_vs_zfs_fuse": ratio,
    "shoal_fsync_log_device_vs_none": log_vs_none,
    "raw_device": raw,
    "best_possible_ratio_on_this_disk": ceiling,
    "targets": {"seq_write_mb_s": 4, "seq_read_uncached_mb_s": 3, "rand_write_8k_fsync_iops": 2,
                "create_per_s": 2, "stat_per_s": 2, "delete_per_s": 2},
}, indent=2))
PY
