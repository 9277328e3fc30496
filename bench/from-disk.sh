#!/usr/bin/env bash
# Streaming reads from disk over NFSv4.1 beside the raw disk, with the CPU it costs.
#
# One shoal daemon serves two pools on the same ext4 this machine has: `dz`, a raidz2
# of six files, and `d1`, a pool of one file, both recordsize 128K, compression off,
# with a 256 MiB ARC against DISK_MIB (default 4096) of files, so every read comes
# from disk. Each round, for one stream and for four (`shoal bench`, 8 files), after
# dropping the host's caches: the raw disk, then each pool in each read shape over
# NFSv4.1 and NFSv3. The raw disk is fio, O_DIRECT, 1 MiB reads, 32 in flight, on a
# file of the same size on the same file system, in as many jobs as the streams
# (each its own part of the file): the file system's best at the same parallelism.
# Read shapes: `1M:8`, 1 MiB reads 8 in flight per stream, as the Linux client reads a
# file sequentially from shoal (rsize is the server's 1 MiB maximum, and read-ahead
# keeps several in flight), and `128K:16`, 128 KiB reads 16 in flight, a client held
# to a small rsize. Rounds are interleaved, so a drift of the VM's disk moves every
# system alike; figures are medians with min and max, and the ratio to the raw disk is
# taken per round, against that round's raw figure. Each shoal run records the
# server's CPU seconds (/proc/PID/stat) and the client's (user + system of `shoal
# bench`), as CPU-seconds per GB, which drift far less than throughput.
#
#   BENCH_DIR=/work/bench-data REPEAT=5 bench/from-disk.sh > docs/bench/from-disk-DATE.json
# POOLS="d1", STREAMS="4", SHAPES="1M:8", VERSIONS="4.1" run a part.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${BENCH_DIR:-/var/tmp/shoal-bench}/from-disk
REPEAT=${REPEAT:-5}
DISK_MIB=${DISK_MIB:-4096}
POOLS=${POOLS:-dz d1}
STREAMS=${STREAMS:-1 4}
SHAPES=${SHAPES:-1M:8 128K:16}
VERSIONS=${VERSIONS:-4.1 3}
. bench/lib.sh
need fio
cargo build --release -q -p shoal
SHOAL=$PWD/target/release/shoal
export SHOAL_STATE_DIR="$DIR/state"
OUT=$(mktemp -d)
PORT=20490
log() { echo "from-disk.sh: $*" >&2; }
cleanup() {
    [ -f "$OUT/shoal.pid" ] && kill -TERM "$(cat "$OUT/shoal.pid")" 2>/dev/null || true
    sleep 1
    rm -rf "$DIR" "$OUT"
}
trap cleanup EXIT
rm -rf "$DIR"
mkdir -p "$DIR/dz" "$DIR/d1"
"$SHOAL" pool create --dir "$DIR/dz" --size $(( DISK_MIB / 2 + 1024 ))M dz raidz2 a b c d e f >/dev/null
"$SHOAL" pool create --dir "$DIR/d1" --size $(( DISK_MIB * 3 / 2 + 1024 ))M d1 one >/dev/null
for p in dz d1; do "$SHOAL" fs create $p/fs -o recordsize=128K -o compression=off >/dev/null; done
SHOAL_LOG=warn "$SHOAL" serve --listen 127.0.0.1:$PORT --api off --arc-max 256M \
    --share 'dz/fs=127.0.0.1(rw,no_root_squash,insecure)' \
    --share 'd1/fs=127.0.0.1(rw,no_root_squash,insecure)' 2>>"$OUT/shoal.log" &
echo $! > "$OUT/shoal.pid"
wait_listening $PORT "$OUT/shoal.log"
PID=$(cat "$OUT/shoal.pid")
FILE=$(( DISK_MIB / 8 ))M
for p in $POOLS; do
    log "writing $DISK_MIB MiB to $p"
    "$SHOAL" bench run --threads 4 --server 127.0.0.1:$PORT --export /$p/fs --workload read \
        --files 8 --file-size "$FILE" --dir set >/dev/null 2>>"$OUT/bench.log"
done
fio --name=raw --filename="$DIR/raw" --size="${DISK_MIB}M" --rw=write --bs=1M --direct=1 \
    --ioengine=psync --output-format=json > /dev/null \
    || { log "fio could not write $DISK_MIB MiB to $DIR/raw (is the file system full?)"; exit 1; }

raw_read() { # STREAMS -> MB/s
    drop_caches
    local part=$(( DISK_MIB / $1 ))M
    fio --name=raw --filename="$DIR/raw" --size="$part" --offset_increment="$part" --numjobs="$1" \
        --rw=read --bs=1M --direct=1 --ioengine=libaio --iodepth=$(( 32 / $1 )) --output-format=json \
        | python3 -c 'import json,sys; print(sum(j["read"]["bw_bytes"] for j in json.load(sys.stdin)["jobs"])/1e6)'
}
shoal_read() { # POOL STREAMS IO_SIZE DEPTH VERSION -> "MB/s GB server_cpu_s client_cpu_s"
    drop_caches
    local before after out
    before=$(proc_cpu_ticks "$PID")
    out=$(/usr/bin/time -f "%U %S" -o "$OUT/time" "$SHOAL" bench run --json --nfs-version "$5" \
        --threads "$2" --server 127.0.0.1:$PORT --export "/$1/fs" --workload read --io-size "$3" \
        --depth "$4" --files 8 --file-size "$FILE" --dir set 2>>"$OUT/bench.log") \
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

touch "$OUT/runs.jsonl"
for round in $(seq "$REPEAT"); do
    for streams in $STREAMS; do
        log "round $round of $REPEAT, $streams stream(s)"
        line="{\"round\": $round, \"streams\": $streams, \"raw_mb_per_s\": $(raw_read "$streams")"
        for shape in $SHAPES; do
            for p in $POOLS; do
                for v in $VERSIONS; do
                    read -r mbs gb server client <<<"$(shoal_read "$p" "$streams" "${shape%:*}" "${shape#*:}" "$v")"
                    line="$line, \"$p v$v $shape\": {\"mb_per_s\": $mbs, \"gb\": $gb, \"server_cpu_s\": $server, \"client_cpu_s\": $client}"
                done
            done
        done
        echo "$line}" | tee -a "$OUT/runs.jsonl" >&2
    done
done

python3 - "$OUT/runs.jsonl" "$REPEAT" "$DISK_MIB" "$(git rev-parse --short HEAD)" "$POOLS" "$STREAMS" "$SHAPES" "$VERSIONS" <<'PY'
import json, statistics, sys
path, repeat, disk_mib, commit, pools, streams, shapes, versions = sys.argv[1:]
runs = [json.loads(l) for l in open(path)]
def spread(xs):
    return {"median": round(statistics.median(xs), 3), "min": round(min(xs), 3), "max": round(max(xs), 3)} if xs else None
out = {"bench": "from-disk", "commit": commit, "rounds": int(repeat), "disk_mib": int(disk_mib),
       "setup": "one shoal daemon, ARC 256 MiB; dz: raidz2 of six files, d1: one file, both on this VM's ext4, "
                "recordsize 128K, compression off; shoal bench, 8 files, per stream SIZE reads DEPTH in flight "
                "(keys 'POOL vVERSION SIZE:DEPTH'); raw: fio O_DIRECT 1 MiB, 32 in flight, as many jobs as streams, "
                "on one file on the same ext4; host caches dropped before each run",
       "command": "BENCH_DIR=/work/bench-data REPEAT=%s bench/from-disk.sh" % repeat}
for s in map(int, streams.split()):
    rs = [r for r in runs if r["streams"] == s]
    row = {"raw_disk_mb_per_s": spread([r["raw_mb_per_s"] for r in rs])}
    for p in [f"{p} v{v} {sh}" for sh in shapes.split() for p in pools.split() for v in versions.split()]:
        ok = [r for r in rs if r[p]["gb"] > 0 and r["raw_mb_per_s"] > 0]
        row[p] = {
            "mb_per_s": spread([r[p]["mb_per_s"] for r in ok]),
            "vs_raw_disk": spread([r[p]["mb_per_s"] / r["raw_mb_per_s"] for r in ok]),
            "vs_raw_disk_per_round": [round(r[p]["mb_per_s"] / r["raw_mb_per_s"], 3) for r in ok],
            "server_cpu_s_per_gb": spread([r[p]["server_cpu_s"] / r[p]["gb"] for r in ok]),
            "client_cpu_s_per_gb": spread([r[p]["client_cpu_s"] / r[p]["gb"] for r in ok]),
        }
    out[f"streams {s}"] = row
out["runs"] = runs
print(json.dumps(out, indent=1))
PY
