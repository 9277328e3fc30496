#!/usr/bin/env bash
# Snapshot streams: `shoal send | shoal receive` of a full filesystem against the raw
# disk (the same bytes read and written with O_DIRECT: one after the other, as a copy
# does, and both at once, the most a transfer between two pools on one disk can get)
# and against zfs-fuse's
# `zfs send | zfs receive` of the same data in the same run; then the size of an
# incremental stream after 1% of the records changed. Prints one JSON object.
#
# Same data, same state: one file of random bytes (SIZE_MIB) plus FILES small files is
# copied into a fresh filesystem on each system (recordsize 128K, COMPRESSION (off by
# default; lzjb and gzip-N are the ones both systems have), one device file per pool,
# the source and the target pool in the same directory). KIND=text makes the data
# log-like text that compresses (see replication_data in bench/lib.sh) instead of
# random bytes. zfs-fuse's send has no compressed mode: its streams carry blocks
# decompressed and its receive compresses them again, as its users run it.
# Every round starts with the kernel's caches dropped and both systems' pools
# exported and imported (their own caches empty); shoal and zfs-fuse rounds
# alternate, ROUNDS each; medians and spreads are reported, and CPU seconds per GiB:
# of the send and receive processes for shoal (all the work happens in them), of the
# zfs-fuse daemon plus its zfs commands for zfs-fuse. Each timed transfer ends with
# sync(1), so what either system left in the kernel's page cache is on disk when the
# clock stops.
# A benchmark, never a test. Needs root and /dev/fuse.
#
#   bench/replication.sh                  # 4 GiB under target/bench-data
#   BENCH_DIR=/mnt/disk SIZE_MIB=1024 ROUNDS=5 bench/replication.sh
#   COMPRESSION=lzjb KIND=text bench/replication.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${BENCH_DIR:-$PWD/target/bench-data}/replication
SIZE_MIB=${SIZE_MIB:-4096}
FILES=${FILES:-2000}
ROUNDS=${ROUNDS:-3}
export COMPRESSION=${COMPRESSION:-off}
export KIND=${KIND:-random}
DEV_MIB=$(( SIZE_MIB * 3 / 2 + 1024 ))
. bench/lib.sh
need_zfs_fuse
need fio
cargo build --release -q -p shoal
SHOAL=$PWD/target/release/shoal
export SHOAL_STATE_DIR="$DIR/state"
OUT=$(mktemp -d)

cleanup() {
    "$SHOAL" unmount "$DIR/shoal-mnt" 2>/dev/null || true
    zpool destroy -f zsrc 2>/dev/null || true
    zpool destroy -f zdst 2>/dev/null || true
    [ -f "$OUT/zfs.pid" ] && kill "$(cat "$OUT/zfs.pid")" 2>/dev/null || true
    sleep 1
    rm -rf "$DIR" "$OUT"
    remove_zfs_fuse_if_installed
}
trap cleanup EXIT
rm -rf "$DIR"
mkdir -p "$DIR/data" "$DIR/shoal-mnt" "$DIR/zfs-devs"

# ---- the data both systems get ----
echo "data: ${SIZE_MIB} MiB ($KIND) and $FILES small files..." >&2
replication_data "$DIR/data" "$SIZE_MIB" "$FILES" "$KIND"
DATA_BYTES=$(du -sb "$DIR/data" | cut -f1)

# ---- the raw disk: the same bytes read and written, O_DIRECT ----
raw_copy() {
    drop_caches
    local t0 t1
    t0=$(date +%s.%N)
    dd if="$DIR/data/big" of="$DIR/raw-copy" bs=4M iflag=direct oflag=direct conv=fsync status=none
    t1=$(date +%s.%N)
    rm -f "$DIR/raw-copy"
    echo "$t0 $t1" | awk '{print $2 - $1}'
}

# ---- the raw disk reading the bytes and writing as many at once: fio, O_DIRECT,
# 1 MiB, 4 in flight each way; the time until both are done ----
raw_concurrent() {
    drop_caches
    local t0 t1
    t0=$(date +%s.%N)
    fio --output=/dev/null --direct=1 --bs=1M --ioengine=libaio --iodepth=4 \
        --name=read --filename="$DIR/data/big" --rw=read \
        --name=write --filename="$DIR/raw-copy" --rw=write --size="${SIZE_MIB}M" --end_fsync=1
    t1=$(date +%s.%N)
    rm -f "$DIR/raw-copy"
    echo "$t0 $t1" | awk '{print $2 - $1}'
}

# ---- shoal ----
"$SHOAL" pool create --dir "$DIR/shoal-devs" --size "${DEV_MIB}M" ssrc a >&2
"$SHOAL" pool create --dir "$DIR/shoal-devs" --size "${DEV_MIB}M" sdst b >&2
"$SHOAL" fs create ssrc/fs -o recordsize=128K -o compression="$COMPRESSION" >&2
shoal_mount() {
    "$SHOAL" mount ssrc/fs "$DIR/shoal-mnt" 2>>"$OUT/shoal-mount.log" &
    for _ in $(seq 100); do mountpoint -q "$DIR/shoal-mnt" && return; sleep 0.1; done
    echo "shoal mount did not come up" >&2; exit 1
}
shoal_unmount() {
    "$SHOAL" unmount "$DIR/shoal-mnt"
    while mountpoint -q "$DIR/shoal-mnt" || pgrep -f "shoal mount ssrc/fs" >/dev/null; do sleep 0.1; done
}
echo "shoal: filling..." >&2
shoal_mount
cp -r "$DIR/data/." "$DIR/shoal-mnt/"
shoal_unmount
"$SHOAL" snapshot create ssrc/fs@s1 >&2

# ---- zfs-fuse ----
zfs-fuse --no-kstat-mount -p "$OUT/zfs.pid"
sleep 2
truncate -s "${DEV_MIB}M" "$DIR/zfs-devs/a" "$DIR/zfs-devs/b"
zpool create -f -m "$DIR/zfs-mnt" zsrc "$DIR/zfs-devs/a" >&2
zpool create -f -m none zdst "$DIR/zfs-devs/b" >&2
zfs create -o recordsize=128K -o compression="$COMPRESSION" -o mountpoint="$DIR/zfs-mnt/fs" zsrc/fs >&2
echo "zfs-fuse: filling..." >&2
cp -r "$DIR/data/." "$DIR/zfs-mnt/fs/"
sync
zfs snapshot zsrc/fs@s1 >&2
zfs_reimport() {
    zpool export zsrc && zpool import -d "$DIR/zfs-devs" zsrc
    zpool export zdst && zpool import -d "$DIR/zfs-devs" zdst
}
zfs_daemon_cpu() { # utime + stime of zfs-fuse, seconds
    awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$(cat "$OUT/zfs.pid")/stat"
}

# One timed full transfer: prints "seconds cpu_seconds".
shoal_round() { shoal_send_receive_round "$SHOAL" "$OUT"; }
zfs_round() {
    zfs destroy -r zdst/fs >/dev/null 2>&1 || true
    zfs_reimport
    drop_caches
    local c0 c1
    c0=$(zfs_daemon_cpu)
    /usr/bin/time -f "%e %U %S" -o "$OUT/time" bash -c "zfs send zsrc/fs@s1 | zfs receive zdst/fs; sync"
    c1=$(zfs_daemon_cpu)
    read -r e u s < "$OUT/time"
    echo "$e $(echo "$u $s $c0 $c1" | awk '{print $1 + $2 + $4 - $3}')"
}

for r in $(seq "$ROUNDS"); do
    echo "round $r: raw copy..." >&2
    raw_copy >> "$OUT/raw"
    echo "round $r: raw read and write at once..." >&2
    raw_concurrent >> "$OUT/raw_concurrent"
    echo "round $r: shoal send | receive..." >&2
    shoal_round >> "$OUT/shoal"
    echo "round $r: zfs send | receive..." >&2
    zfs_round >> "$OUT/zfs"
done

# ---- the received copies are the data ----
shoal_mount_dst() {
    "$SHOAL" mount sdst/fs "$DIR/shoal-mnt" 2>>"$OUT/shoal-mount.log" &
    for _ in $(seq 100); do mountpoint -q "$DIR/shoal-mnt" && return; sleep 0.1; done
    echo "shoal mount did not come up" >&2; exit 1
}
shoal_mount_dst
diff -r "$DIR/data" "$DIR/shoal-mnt" >&2 || { echo "shoal: the received copy differs" >&2; exit 1; }
"$SHOAL" unmount "$DIR/shoal-mnt"
while mountpoint -q "$DIR/shoal-mnt" || pgrep -f "shoal mount sdst/fs" >/dev/null; do sleep 0.1; done
zfs set mountpoint="$DIR/zfs-dst" zdst/fs
zfs mount zdst/fs 2>/dev/null || true
diff -r "$DIR/data" "$DIR/zfs-dst" >&2 || { echo "zfs-fuse: the received copy differs" >&2; exit 1; }

# ---- the full streams' sizes (untimed) ----
SHOAL_FULL=$("$SHOAL" send ssrc/fs@s1 2>/dev/null | wc -c)
ZFS_FULL=$(zfs send zsrc/fs@s1 | wc -c)

# ---- incremental: 1% of the big file's records rewritten ----
change_one_percent() { # file
    python3 - "$1" "$SIZE_MIB" <<'PY'
import os, sys, random
path, mib = sys.argv[1], int(sys.argv[2])
records = mib * 8  # 128 KiB records
r = random.Random(11)
fd = os.open(path, os.O_WRONLY)
for rec in r.sample(range(records), max(1, records // 100)):
    os.pwrite(fd, r.randbytes(4096), rec * 131072 + r.randrange(0, 31) * 4096)
os.fsync(fd)
os.close(fd)
PY
}
echo "incremental..." >&2
shoal_mount
change_one_percent "$DIR/shoal-mnt/big"
shoal_unmount
"$SHOAL" snapshot create ssrc/fs@s2 >&2
SHOAL_INC=$("$SHOAL" send ssrc/fs@s2 --from @s1 2>/dev/null | wc -c)
change_one_percent "$DIR/zfs-mnt/fs/big"
sync
zfs snapshot zsrc/fs@s2
ZFS_INC=$(zfs send -i @s1 zsrc/fs@s2 | wc -c)

python3 - "$OUT" "$DATA_BYTES" "$SIZE_MIB" "$SHOAL_INC" "$ZFS_INC" "$SHOAL_FULL" "$ZFS_FULL" <<'PY'
import json, os, statistics, sys
out, data_bytes, size_mib, shoal_inc, zfs_inc, shoal_full, zfs_full = sys.argv[1], *map(int, sys.argv[2:])
big = size_mib << 20
def rows(name):
    return [list(map(float, l.split())) for l in open(f"{out}/{name}") if l.strip()]
def summary(rs, nbytes):
    secs = [r[0] for r in rs]
    mbs = [nbytes / s / 1e6 for s in secs]
    s = {"mb_s_median": round(statistics.median(mbs), 1),
         "mb_s_min": round(min(mbs), 1), "mb_s_max": round(max(mbs), 1),
         "rounds": len(rs)}
    if len(rs[0]) > 1:
        s["cpu_s_per_gib_median"] = round(statistics.median(r[1] / (nbytes / 2**30) for r in rs), 2)
        s["cpu_s_per_gib_min"] = round(min(r[1] / (nbytes / 2**30) for r in rs), 2)
        s["cpu_s_per_gib_max"] = round(max(r[1] / (nbytes / 2**30) for r in rs), 2)
    return s
raw = summary(rows("raw"), big)
both = summary(rows("raw_concurrent"), big)
shoal = summary(rows("shoal"), data_bytes)
zfs = summary(rows("zfs"), data_bytes)
shoal["stream_bytes"] = shoal_full
zfs["stream_bytes"] = zfs_full
print(json.dumps({
    "benchmark": "replication",
    "data_bytes": data_bytes,
    "compression": os.environ["COMPRESSION"],
    "data_kind": os.environ["KIND"],
    "raw_copy_o_direct": raw,
    "raw_read_and_write_at_once": both,
    "shoal_send_receive": shoal,
    "zfs_fuse_send_receive": zfs,
    "shoal_vs_zfs_fuse": round(shoal["mb_s_median"] / zfs["mb_s_median"], 2),
    "shoal_vs_raw_copy": round(shoal["mb_s_median"] / raw["mb_s_median"], 2),
    "shoal_vs_raw_read_and_write_at_once": round(shoal["mb_s_median"] / both["mb_s_median"], 2),
    "zfs_fuse_vs_raw_read_and_write_at_once": round(zfs["mb_s_median"] / both["mb_s_median"], 2),
    "cpu_per_gib_zfs_fuse_over_shoal": round(zfs["cpu_s_per_gib_median"] / shoal["cpu_s_per_gib_median"], 2),
    "incremental_1pct": {
        "shoal_stream_bytes": shoal_inc,
        "shoal_fraction_of_data": round(shoal_inc / data_bytes, 4),
        "zfs_fuse_stream_bytes": zfs_inc,
        "zfs_fuse_fraction_of_data": round(zfs_inc / data_bytes, 4),
    },
}, indent=2))
PY
