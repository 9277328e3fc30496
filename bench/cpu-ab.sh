#!/usr/bin/env bash
# Server CPU per GB and per call of one shoal build (SHOAL_BIN, default this tree's
# release build) beside NFS-Ganesha on ext4, for comparing builds (a "before" and an
# "after") quickly: one stream of bench/nfs-bench each, 128K writes of a FILE_MIB file,
# then ROUNDS rounds of: read from disk (caches dropped, shoal restarted), read cached
# (PASSES passes), 8K random reads for 5 s. Prints one JSON line a figure with the
# server process's utime+stime over the run. bench/nfs.sh is the full comparison;
# this is the A/B tool (run it for each build, interleaved, and compare each build's
# ratio to Ganesha in the same run, since this VM drifts).
#
#   SHOAL_BIN=/other/target/release/shoal BENCH_DIR=/work/bench-data bench/cpu-ab.sh
#
# Needs root (Ganesha, dropping caches), nfs-ganesha and nfs-ganesha-vfs.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
DIR=${BENCH_DIR:-/tmp/shoal-bench}/cpu-ab
FILE_MIB=${FILE_MIB:-1024}
PASSES=${PASSES:-4}
ROUNDS=${ROUNDS:-2}
cargo build --release -q -p shoal -p nfs-bench
SHOAL=${SHOAL_BIN:-$PWD/target/release/shoal}
NB=$PWD/target/release/nfs-bench
SP=20977; GP=20990; GM=20991
rm -rf "$DIR"; mkdir -p "$DIR"/{devs,ext4,state}
export SHOAL_STATE_DIR=$DIR/state
cleanup() { kill "$(cat "$DIR/shoal.pid")" "$(cat "$DIR/ganesha.pid")" 2>/dev/null || true; sleep 1; rm -rf "$DIR"; }
trap cleanup EXIT
"$SHOAL" pool create --dir "$DIR/devs" --size "$(( FILE_MIB * 6 / 4 / 6 + 512 ))M" p raidz2 a b c d e f >/dev/null
"$SHOAL" fs create p/fs -o recordsize=128K -o compression=off >/dev/null
start_shoal() {
    SHOAL_LOG=warn "$SHOAL" serve --listen 127.0.0.1:$SP --api off --arc-max 2G \
        --share 'p/fs=127.0.0.1(rw,no_root_squash,insecure)' 2>>"$DIR/shoal.log" &
    echo $! > "$DIR/shoal.pid"
    for _ in $(seq 100); do ss -ltn | grep -q ":$SP " && break; sleep 0.1; done
}
start_shoal
pgrep -x rpcbind >/dev/null || rpcbind -w
ganesha_v3_conf $GP $GM "$DIR/ext4" > "$DIR/ganesha.conf"
ganesha.nfsd -F -L "$DIR/ganesha.log" -f "$DIR/ganesha.conf" -p "$DIR/g.unused" &
echo $! > "$DIR/ganesha.pid"
for _ in $(seq 100); do ss -ltn | grep -q ":$GP " && break; sleep 0.1; done
endpoint() {
    case $1 in
        shoal) echo "--server 127.0.0.1:$SP --export /p/fs" ;;
        ganesha) echo "--server 127.0.0.1:$GP --mount-port $GM --export $DIR/ext4" ;;
    esac
}
ticks() { awk '{ print $14 + $15 }' "/proc/$(cat "$DIR/$1.pid")/stat"; }
run() { # server what nfs-bench-args...
    local s=$1 what=$2 t0 t1 r
    shift 2
    t0=$(ticks "$s")
    # shellcheck disable=SC2046
    r=$("$NB" $(endpoint "$s") "$@")
    t1=$(ticks "$s")
    python3 -c '
import json, sys
r = json.loads(sys.argv[1]); cpu = (int(sys.argv[3]) - int(sys.argv[2])) / 100
print(json.dumps({"server": sys.argv[4], "what": sys.argv[5], "mb_per_s": round(r["mb_per_s"]), "iops": round(r["iops"]),
                  "cpu_s": cpu, "cpu_s_per_gb": round(cpu / (r["bytes"] / 1e9), 3), "cpu_us_per_op": round(cpu / r["calls"] * 1e6, 1)}))' \
        "$r" "$t0" "$t1" "$s" "$what"
}
for s in shoal ganesha; do
    run $s write --test write --streams 1 --file-mib "$FILE_MIB" --block 131072 --depth 16
done
sleep 8
for _ in $(seq "$ROUNDS"); do
    for s in shoal ganesha; do
        sync; echo 3 > /proc/sys/vm/drop_caches
        if [ $s = shoal ]; then
            kill "$(cat "$DIR/shoal.pid")"
            while kill -0 "$(cat "$DIR/shoal.pid")" 2>/dev/null; do sleep 0.1; done
            start_shoal
        fi
        run $s read_disk --test read --streams 1 --file-mib "$FILE_MIB" --block 131072 --depth 16
        run $s read_cached --test read --streams 1 --file-mib "$FILE_MIB" --block 131072 --depth 16 --passes "$PASSES"
        run $s randread_8k --test randread --streams 1 --file-mib "$FILE_MIB" --block 8192 --depth 32 --seconds 5
    done
done
