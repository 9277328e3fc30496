#!/usr/bin/env bash
# `shoal send | shoal receive` of one filesystem by two or more shoal builds, rounds
# interleaved, for before/after comparisons of the stream path (bench/replication.sh
# is the full comparison with zfs-fuse and the raw disk). The pools are made once by
# the first build (SIZE_MIB of random bytes plus FILES small files, 128K records,
# compression off); each round destroys the received copy, drops the kernel's caches
# and times the transfer to the end of sync(1). Prints one JSON object: per build the
# median and range of seconds and of user+system CPU seconds.
# A benchmark, never a test. Needs root (drop_caches).
#
#   BINS="/tmp/shoal-before target/release/shoal" bench/replication-ab.sh
#   BENCH_DIR=/dev/shm/ab SIZE_MIB=2048 ROUNDS=5 BINS="..." bench/replication-ab.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
DIR=${BENCH_DIR:-$PWD/target/bench-data}/replication-ab
SIZE_MIB=${SIZE_MIB:-2048}
FILES=${FILES:-2000}
ROUNDS=${ROUNDS:-5}
if [ -z "${BINS:-}" ]; then
    cargo build --release -q -p shoal
    BINS=$PWD/target/release/shoal
fi
read -r -a bins <<< "$BINS"
for b in "${bins[@]}"; do
    [ -x "$b" ] || { echo "not an executable: $b" >&2; exit 2; }
done
FIRST=${bins[0]}
DEV_MIB=$(( SIZE_MIB * 3 / 2 + 1024 ))
export SHOAL_STATE_DIR=$DIR/state
OUT=$(mktemp -d)
cleanup() {
    "$FIRST" unmount "$DIR/mnt" 2>/dev/null || true
    rm -rf "$DIR" "$OUT"
}
trap cleanup EXIT
rm -rf "$DIR"
mkdir -p "$DIR/data" "$DIR/mnt"
echo "data: ${SIZE_MIB} MiB and $FILES small files..." >&2
replication_data "$DIR/data" "$SIZE_MIB" "$FILES" random
"$FIRST" pool create --dir "$DIR/devs" --size "${DEV_MIB}M" ssrc a >&2
"$FIRST" pool create --dir "$DIR/devs" --size "${DEV_MIB}M" sdst b >&2
"$FIRST" fs create ssrc/fs -o recordsize=128K -o compression=off >&2
"$FIRST" mount ssrc/fs "$DIR/mnt" 2>>"$OUT/mount.log" &
for _ in $(seq 100); do mountpoint -q "$DIR/mnt" && break; sleep 0.1; done
mountpoint -q "$DIR/mnt" || { echo "shoal mount did not come up" >&2; exit 1; }
cp -r "$DIR/data/." "$DIR/mnt/"
"$FIRST" unmount "$DIR/mnt"
while mountpoint -q "$DIR/mnt" || pgrep -f "shoal mount ssrc/fs" >/dev/null; do sleep 0.1; done
rm -rf "$DIR/data"
"$FIRST" snapshot create ssrc/fs@s1 >&2

for r in $(seq "$ROUNDS"); do
    for i in "${!bins[@]}"; do
        b=${bins[$i]}
        echo "round $r: ${b}..." >&2
        shoal_send_receive_round "$b" "$OUT" >> "$OUT/$i"
    done
done

python3 - "$OUT" "$SIZE_MIB" "$ROUNDS" "${bins[@]}" <<'PY'
import json, statistics, sys
out, mib, rounds, bins = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
result = {"benchmark": "replication-ab", "size_mib": mib, "rounds": rounds, "builds": []}
for i, b in enumerate(bins):
    rows = [tuple(map(float, line.split())) for line in open(f"{out}/{i}")]
    secs, cpu = [r[0] for r in rows], [r[1] for r in rows]
    result["builds"].append({
        "bin": b,
        "seconds_median": statistics.median(secs), "seconds_min": min(secs),
        "seconds_max": max(secs),
        "cpu_s_median": statistics.median(cpu), "cpu_s_min": min(cpu), "cpu_s_max": max(cpu),
    })
print(json.dumps(result, indent=2))
PY
