#!/usr/bin/env bash
# Streaming reads from disk over NFSv4.1 beside the raw disk, with the CPU it costs.
#
# One shoal daemon serves two pools on the same ext4 this machine has: `dz`, a raidz2
# of six files, and `d1`, a pool of one file, both recordsize 128K, compression off,
# with a 256 MiB ARC against DISK_MIB (default 4096) of files, so every read comes
# from disk. Each round, for one stream and for four (`shoal bench`, FILES files), after
# dropping the host's caches: the raw disk, then each pool in each read shape over
# NFSv4.1 and NFSv3. The raw disk is fio, O_DIRECT, 1 MiB reads, 32 in flight, into
# buffers in huge pages, on a file of the same size on the same file system, in as
# many jobs as the streams (each its own part of the file): the file system's best at
# the same parallelism.
# Read shapes: `1M:8`, 1 MiB reads 8 in flight per stream, as the Linux client reads a
# file sequentially from shoal (rsize is the server's 1 MiB maximum, and read-ahead
# keeps several in flight), and `128K:16`, 128 KiB reads 16 in flight, a client held
# to a small rsize. This VM's disk drifts 2x within minutes, so the raw disk is read
# before every shoal run and once after the last: each run's ratio is to the mean of
# the raw reads just before and just after it (a few seconds each side), and rounds
# are interleaved; figures are medians with min and max. Each shoal run records the
# server's CPU seconds (/proc/PID/stat) and the client's (user + system of `shoal
# bench`), as CPU-seconds per GB, which drift far less than throughput.
# RAM_POOL=1 (the default) adds `ram`, a one-file pool in /dev/shm served by the same
# daemon and read the same way (v4.1, 1 MiB x 8, after the same cache drop): shoal's
# whole read path from a device (read-ahead, checksums, ARC misses, NFS) where the
# device is never the limit, i.e. what this machine's CPUs let shoal stream.
#
#   BENCH_DIR=/work/bench-data REPEAT=5 bench/from-disk.sh > docs/bench/from-disk-DATE.json
# POOLS="d1", STREAMS="4", SHAPES="1M:8", VERSIONS="4.1", RAM_POOL=0 run a part.
# FILES=1 writes the set as one file of DISK_MIB, the shape fio reads for the raw disk
# (one stream reads it whole, four read a quarter each, as fio's jobs do); the default,
# 8 files, adds the change from one file to the next, where read-ahead ends at each
# file's end and the disk idles until the next file's reads come.
# SHOAL_BIN=/path/to/shoal measures that binary instead of building this tree (to
# compare two builds in alternating runs).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${BENCH_DIR:-/var/tmp/shoal-bench}/from-disk
REPEAT=${REPEAT:-5}
DISK_MIB=${DISK_MIB:-4096}
POOLS=${POOLS:-dz d1}
STREAMS=${STREAMS:-1 4}
SHAPES=${SHAPES:-1M:8 128K:16}
VERSIONS=${VERSIONS:-4.1 3}
RAM_POOL=${RAM_POOL:-1}
FILES=${FILES:-8}
RAM_DIR=/dev/shm/shoal-from-disk
. bench/lib.sh
need fio
# SHOAL_BIN: a shoal binary to measure instead of this tree's (to compare builds).
if [ -n "${SHOAL_BIN:-}" ]; then
    SHOAL=$SHOAL_BIN
else
    cargo build --release -q -p shoal
    SHOAL=$PWD/target/release/shoal
fi
export SHOAL_STATE_DIR="$DIR/state"
OUT=$(mktemp -d)
PORT=20490
log() { echo "from-disk.sh: $*" >&2; }
cleanup() {
    [ -f "$OUT/shoal.pid" ] && kill -TERM "$(cat "$OUT/shoal.pid")" 2>/dev/null || true
    sleep 1
    rm -rf "$DIR" "$OUT" "$RAM_DIR"
    restore_hugepages
}
trap cleanup EXIT
rm -rf "$DIR" "$RAM_DIR"
mkdir -p "$DIR/dz" "$DIR/d1"
"$SHOAL" pool create --dir "$DIR/dz" --size $(( DISK_MIB / 2 + 1024 ))M dz raidz2 a b c d e f >/dev/null
"$SHOAL" pool create --dir "$DIR/d1" --size $(( DISK_MIB * 3 / 2 + 1024 ))M d1 one >/dev/null
ALL_POOLS="dz d1"
if [ "$RAM_POOL" = 1 ]; then
    mkdir -p "$RAM_DIR"
    "$SHOAL" pool create --dir "$RAM_DIR" --size $(( DISK_MIB * 3 / 2 + 1024 ))M ram one >/dev/null
    ALL_POOLS="$ALL_POOLS ram"
fi
SHARES=()
for p in $ALL_POOLS; do
    "$SHOAL" fs create $p/fs -o recordsize=128K -o compression=off >/dev/null
    SHARES+=(--share "$p/fs=127.0.0.1(rw,no_root_squash,insecure)")
done
SHOAL_LOG=warn "$SHOAL" serve --listen 127.0.0.1:$PORT --api off --arc-max 256M "${SHARES[@]}" 2>>"$OUT/shoal.log" &
echo $! > "$OUT/shoal.pid"
wait_listening $PORT "$OUT/shoal.log"
PID=$(cat "$OUT/shoal.pid")
FILE=$(( DISK_MIB / FILES ))M
for p in $POOLS $([ "$RAM_POOL" = 1 ] && echo ram); do
    log "writing $DISK_MIB MiB to $p"
    "$SHOAL" bench run --threads 4 --server 127.0.0.1:$PORT --export /$p/fs --workload read \
        --files "$FILES" --file-size "$FILE" --dir set >/dev/null 2>>"$OUT/bench.log"
done
fio --name=raw --filename="$DIR/raw" --size="${DISK_MIB}M" --rw=write --bs=1M --direct=1 \
    --ioengine=psync --output-format=json > /dev/null \
    || { log "fio could not write $DISK_MIB MiB to $DIR/raw (is the file system full?)"; exit 1; }

raw_read() { # STREAMS -> MB/s
    drop_caches
    local part=$(( DISK_MIB / $1 ))M
    fio --name=raw --filename="$DIR/raw" --size="$part" --offset_increment="$part" --numjobs="$1" \
        --rw=read --bs=1M --direct=1 --ioengine=libaio --iodepth=$(( 32 / $1 )) --mem=shmhuge --output-format=json \
        | python3 -c 'import json,sys; print(sum(j["read"]["bw_bytes"] for j in json.load(sys.stdin)["jobs"])/1e6)'
}
shoal_read() { # POOL STREAMS IO_SIZE DEPTH VERSION -> "MB/s GB server_cpu_s client_cpu_s"
    drop_caches
    local before after out
    before=$(proc_cpu_ticks "$PID")
    out=$(/usr/bin/time -f "%U %S" -o "$OUT/time" "$SHOAL" bench run --json --nfs-version "$5" \
        --threads "$2" --server 127.0.0.1:$PORT --export "/$1/fs" --workload read --io-size "$3" \
        --depth "$4" --files "$FILES" --file-size "$FILE" --dir set 2>>"$OUT/bench.log") \
        || { log "read from $1 failed"; tail -5 "$OUT/bench.log" >&2; exit 1; }
    after=$(proc_cpu_ticks "$PID")
    python3 - "$out" "$before" "$after" "$(getconf CLK_TCK)" "$(cat "$OUT/time")" <<'PY'
import json, sys
a = json.loads(sys.argv[1])["aggregate"]["stonewall"]
tick = int(sys.argv[4])
user, system = map(float, sys.argv[5].split())
print(a["mb_per_s"], a["bytes"] / 1e9, (int(sys.argv[3]) - int(sys.argv[2])) / tick, user + system)
PY
}

# fio's buffers in huge pages: a read into scattered 4 KiB pages is cut at a virtio
# disk's segment limit (254 contiguous runs), and on this VM's disk 1 MiB x 32 read at
# two thirds of the rate into heap buffers that it did into huge pages
# (bench/disk-submission.sh). The raw disk is the disk's best. 64 huge pages (128 MiB) hold 32 MiB of buffers with room to spare.
reserve_hugepages 64
touch "$OUT/runs.jsonl"
for round in $(seq "$REPEAT"); do
    for streams in $STREAMS; do
        log "round $round of $REPEAT, $streams stream(s)"
        raw_before=$(raw_read "$streams")
        raws="$raw_before"
        line="{\"round\": $round, \"streams\": $streams"
        for shape in $SHAPES; do
            for p in $POOLS; do
                for v in $VERSIONS; do
                    read -r mbs gb server client <<<"$(shoal_read "$p" "$streams" "${shape%:*}" "${shape#*:}" "$v")"
                    raw_after=$(raw_read "$streams")
                    raws="$raws, $raw_after"
                    line="$line, \"$p v$v $shape\": {\"mb_per_s\": $mbs, \"gb\": $gb, \"server_cpu_s\": $server, \"client_cpu_s\": $client, \"raw_before_mb_per_s\": $raw_before, \"raw_after_mb_per_s\": $raw_after}"
                    raw_before=$raw_after
                done
            done
        done
        if [ "$RAM_POOL" = 1 ]; then
            read -r mbs gb server client <<<"$(shoal_read ram "$streams" 1M 8 4.1)"
            line="$line, \"ram v4.1 1M:8\": {\"mb_per_s\": $mbs, \"gb\": $gb, \"server_cpu_s\": $server, \"client_cpu_s\": $client}"
        fi
        echo "$line, \"raw_mb_per_s\": [$raws]}" | tee -a "$OUT/runs.jsonl" >&2
    done
done

python3 - "$OUT/runs.jsonl" "$REPEAT" "$DISK_MIB" "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates bench || echo +uncommitted)" "$POOLS" "$STREAMS" "$SHAPES" "$VERSIONS" "$FILES" <<'PY'
import json, statistics, sys
path, repeat, disk_mib, commit, pools, streams, shapes, versions, files = sys.argv[1:]
runs = [json.loads(l) for l in open(path)]
def spread(xs):
    return {"median": round(statistics.median(xs), 3), "min": round(min(xs), 3), "max": round(max(xs), 3)} if xs else None
out = {"bench": "from-disk", "commit": commit, "rounds": int(repeat), "disk_mib": int(disk_mib),
       "setup": "one shoal daemon, ARC 256 MiB; dz: raidz2 of six files, d1: one file, both on this VM's ext4, "
                "recordsize 128K, compression off; shoal bench, %s file(s), per stream SIZE reads DEPTH in flight " % files +
                "(keys 'POOL vVERSION SIZE:DEPTH'); raw: fio O_DIRECT 1 MiB, 32 in flight, huge-page buffers, as many jobs as streams, "
                "on one file on the same ext4, read before every shoal run and after the last; each run's ratio is "
                "to the mean of the raw reads just before and after it; host caches dropped before each run; "
                "'ram v4.1 1M:8': a one-file pool in /dev/shm served by the same daemon, shoal's ceiling here",
       "files": int(files),
       "command": "BENCH_DIR=/work/bench-data REPEAT=%s FILES=%s bench/from-disk.sh" % (repeat, files)}
for s in map(int, streams.split()):
    rs = [r for r in runs if r["streams"] == s]
    row = {"raw_disk_mb_per_s": spread([x for r in rs for x in r["raw_mb_per_s"]])}
    def raw_around(run):  # the raw disk in the seconds around one shoal run
        return (run["raw_before_mb_per_s"] + run["raw_after_mb_per_s"]) / 2
    for p in [f"{p} v{v} {sh}" for sh in shapes.split() for p in pools.split() for v in versions.split()]:
        ok = [r[p] for r in rs if r[p]["gb"] > 0 and raw_around(r[p]) > 0]
        row[p] = {
            "mb_per_s": spread([run["mb_per_s"] for run in ok]),
            "vs_raw_disk": spread([run["mb_per_s"] / raw_around(run) for run in ok]),
            "vs_raw_disk_per_round": [round(run["mb_per_s"] / raw_around(run), 3) for run in ok],
            "server_cpu_s_per_gb": spread([run["server_cpu_s"] / run["gb"] for run in ok]),
            "client_cpu_s_per_gb": spread([run["client_cpu_s"] / run["gb"] for run in ok]),
        }
    ram = [r["ram v4.1 1M:8"] for r in rs if "ram v4.1 1M:8" in r and r["ram v4.1 1M:8"]["gb"] > 0]
    if ram:  # the pool in RAM: shoal's own ceiling on this machine, no raw disk to compare
        row["ram v4.1 1M:8"] = {
            "mb_per_s": spread([run["mb_per_s"] for run in ram]),
            "server_cpu_s_per_gb": spread([run["server_cpu_s"] / run["gb"] for run in ram]),
            "client_cpu_s_per_gb": spread([run["client_cpu_s"] / run["gb"] for run in ram]),
        }
    out[f"streams {s}"] = row
out["runs"] = runs
print(json.dumps(out, indent=1))
PY
