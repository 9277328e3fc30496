#!/bin/bash
# Profiles `shoal serve` under 8K FILE_SYNC writes: the pools of bench/syncwrite.sh
# (raidz2 of six 1G files, p without and q with a log device; 128K and 8K records,
# compression off), prefilled once and kept between calls in $BENCH_DIR/profile, then
# `nfs-bench --test syncwrite` for SECONDS with STREAMS writers and, with `perf` as the
# last argument, `perf record --call-graph dwarf` on the daemon (perf.data in that dir).
# Prints JSON: IOPS, calls, and the daemon's CPU per operation (utime+stime).
#   bench/profile-syncwrite.sh q/r8k 8 8 perf
#   perf report -i /tmp/shoal-bench/profile/perf.data --no-children --sort comm,symbol
# A diagnosis tool, not a comparison: bench/syncwrite.sh is the benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 3 ] || { echo "usage: $0 POOL/FS STREAMS SECONDS [perf]" >&2; exit 2; }
FS=$1 STREAMS=$2 SECS=$3 PERF=${4:-}
cargo build --release -q -p shoal -p nfs-bench
SHOAL=$PWD/target/release/shoal NB=$PWD/target/release/nfs-bench
DIR=${BENCH_DIR:-/tmp/shoal-bench}/profile PORT=${SHOAL_PORT:-20977}
export SHOAL_STATE_DIR=$DIR/state
if [ ! -f "$DIR/ready" ]; then
    [ -f "$DIR/shoal.pid" ] && kill "$(cat "$DIR/shoal.pid")" 2>/dev/null && sleep 1
    rm -rf "$DIR"; mkdir -p "$DIR/devs" "$DIR/state"
    "$SHOAL" pool create --dir "$DIR/devs" --size 1G p raidz2 a b c d e f >/dev/null
    "$SHOAL" pool create --dir "$DIR/devs" --size 1G q raidz2 g h i j k l log m >/dev/null
    for p in p q; do
        "$SHOAL" fs create $p/r128k -o recordsize=128K -o compression=off >/dev/null
        "$SHOAL" fs create $p/r8k -o recordsize=8K -o compression=off >/dev/null
    done
fi
if ! { [ -f "$DIR/shoal.pid" ] && kill -0 "$(cat "$DIR/shoal.pid")" 2>/dev/null; }; then
    shares=()
    for s in p/r128k p/r8k q/r128k q/r8k; do shares+=(--share "$s=127.0.0.1(rw,no_root_squash,insecure)"); done
    SHOAL_LOG=warn "$SHOAL" serve --listen 127.0.0.1:$PORT --api off --arc-max 1G "${shares[@]}" \
        > "$DIR/shoal.out" 2> "$DIR/shoal.log" &
    echo $! > "$DIR/shoal.pid"
    for _ in $(seq 100); do ss -ltn | grep -q ":$PORT " && break; sleep 0.1; done
fi
if [ ! -f "$DIR/ready" ]; then
    for e in /p/r128k /p/r8k /q/r128k /q/r8k; do
        for s in 1 8; do
            "$NB" --server 127.0.0.1:$PORT --export $e --test write --streams $s \
                --file-mib $((64 / s)) --block 131072 --depth 16 >/dev/null
        done
    done
    sleep 12 # the prefill's dirty data written
    touch "$DIR/ready"
fi
PID=$(cat "$DIR/shoal.pid")
cpu_ticks() { awk '{print $14+$15}' "/proc/$PID/stat"; }
t0=$(cpu_ticks)
PERF_PID=
if [ "$PERF" = perf ]; then
    perf record -F 499 --call-graph dwarf,32768 -p "$PID" -o "$DIR/perf.data" -- sleep "$SECS" >/dev/null 2>&1 &
    PERF_PID=$!
fi
r=$("$NB" --server 127.0.0.1:$PORT --export "/$FS" --test syncwrite --streams "$STREAMS" \
    --file-mib $((64 / STREAMS)) --block 8192 --depth 1 --seconds "$SECS")
t1=$(cpu_ticks)
[ -n "$PERF_PID" ] && wait "$PERF_PID"
python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print(json.dumps({"fs": sys.argv[4], "streams": int(sys.argv[5]), "iops": r["iops"], "calls": r["calls"], "server_cpu_us_per_op": (int(sys.argv[3]) - int(sys.argv[2])) / 100 / max(r["calls"], 1) * 1e6}))' \
    "$r" "$t0" "$t1" "$FS" "$STREAMS"
echo "daemon left running (pid $PID); stop it with: kill $PID" >&2
