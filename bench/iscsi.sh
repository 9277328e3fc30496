#!/usr/bin/env bash
# iSCSI benchmark: `shoal serve` exporting a thick volume (default 16K volblocksize) of a
# pool of one file device, against tgt (Debian's user-space target) exporting a file of
# the same size on the same file system (its rdwr backing store through the page cache,
# as tgt is run by default), and the raw file itself through fio (O_DIRECT, libaio):
# the device's own ceiling. The same client for both targets: the project's pipelined
# initiator (bench/iscsi-bench): 4K random writes and reads at depth 32, 128K
# sequential writes and reads at depth 8, 4K FUA writes at depth 1 (sync write latency).
# The span is written in full first (sequentially), so reads meet data, not holes.
# Every figure carries the CPU the target's process spent on it (utime+stime from /proc)
# as microseconds per operation and seconds per GB. REPEAT interleaved rounds, the order
# of the targets alternating; medians with each round's value beside them. Prints one
# JSON object. A benchmark, never a test. Needs root (tgtd).
#
# VOLUME_SYNC sets the volume's sync property: `standard` (the default: write-through,
# every write durable when answered, the write cache reported off) or `disabled` (a
# volatile write cache, as tgt's file backing store has through the page cache: the
# like-for-like comparison of write speed).
#
#   bench/iscsi.sh                                  # 1 GiB span, 10 s per test, 3 rounds
#   VOLUME_SYNC=disabled bench/iscsi.sh
#   VOLBLOCKSIZE=4K bench/iscsi.sh                  # the volume's block size (default 16K)
#   BENCH_DIR=/work/bench-data SPAN_MIB=2048 SECONDS_RUN=20 REPEAT=5 bench/iscsi.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${BENCH_DIR:-$PWD/target/bench-data}/iscsi
SPAN_MIB=${SPAN_MIB:-1024}
SECONDS_RUN=${SECONDS_RUN:-10}
REPEAT=${REPEAT:-3}
VOLUME_SYNC=${VOLUME_SYNC:-standard}
VOLBLOCKSIZE=${VOLBLOCKSIZE:-16K}
command -v tgtd >/dev/null && command -v fio >/dev/null || { echo "iscsi.sh: needs tgt and fio" >&2; exit 1; }
cargo build --release -q -p shoal -p iscsi-bench
SHOAL=$PWD/target/release/shoal
IB=$PWD/target/release/iscsi-bench
HZ=$(getconf CLK_TCK)
OUT=$(mktemp -d)
export SHOAL_STATE_DIR="$DIR/state"
SHOAL_PORT=23260
TGT_PORT=23261
TGT_CONTROL=77
log() { echo "iscsi.sh: $*" >&2; }
# SIGTERM, then SIGKILL after 5 s (tgtd ignores SIGTERM while it has targets).
stop() {
    [ -f "$OUT/$1.pid" ] || return 0
    local pid; pid=$(cat "$OUT/$1.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$OUT/$1.pid"
}
cleanup() { stop shoal || true; stop tgt || true; rm -rf "$DIR" "$OUT"; }
trap cleanup EXIT
rm -rf "$DIR"; mkdir -p "$DIR"
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# shoal: one file device, a thick volume of the span, a target.
"$SHOAL" pool create --dir "$DIR" --size "$(( SPAN_MIB * 2 + 512 ))M" tank shoal-dev >/dev/null
"$SHOAL" volume create tank/lun --size "${SPAN_MIB}M" -o "sync=$VOLUME_SYNC" --volblocksize "$VOLBLOCKSIZE" >/dev/null
SHOAL_LOG=warn "$SHOAL" serve --listen 127.0.0.1:0 --api 127.0.0.1:0 --portmapper off \
    --iscsi "127.0.0.1:$SHOAL_PORT" > "$OUT/shoal.log" 2>&1 &
echo $! > "$OUT/shoal.pid"
for _ in $(seq 100); do "$SHOAL" iscsi target list >/dev/null 2>&1 && break; sleep 0.1; done
"$SHOAL" iscsi target create iqn.2026-12.org.shoal:bench --lun 0=tank/lun >/dev/null
# tgt: a file of the span on the same file system.
truncate -s "${SPAN_MIB}M" "$DIR/tgt.img"
tgtd -f --iscsi "portal=127.0.0.1:$TGT_PORT" -C $TGT_CONTROL > "$OUT/tgt.log" 2>&1 &
echo $! > "$OUT/tgt.pid"
for _ in $(seq 100); do tgtadm -C $TGT_CONTROL --lld iscsi --op show --mode target >/dev/null 2>&1 && break; sleep 0.1; done
tgtadm -C $TGT_CONTROL --lld iscsi --op new --mode target --tid 1 -T iqn.2026-12.org.shoal:tgt
tgtadm -C $TGT_CONTROL --lld iscsi --op new --mode logicalunit --tid 1 --lun 1 -b "$DIR/tgt.img"
tgtadm -C $TGT_CONTROL --lld iscsi --op bind --mode target --tid 1 -I ALL

# One figure: target, test, block, depth -> a JSON line with the target's CPU.
run() {
    local who=$1 test=$2 block=$3 depth=$4 port target lun pid t0 t1
    case $who in
        shoal) port=$SHOAL_PORT; target=iqn.2026-12.org.shoal:bench; lun=0; pid=$(cat "$OUT/shoal.pid") ;;
        tgt) port=$TGT_PORT; target=iqn.2026-12.org.shoal:tgt; lun=1; pid=$(cat "$OUT/tgt.pid") ;;
    esac
    t0=$(cpu_ticks "$pid")
    "$IB" --portal "127.0.0.1:$port" --target "$target" --lun $lun --test "$test" --block "$block" \
        --depth "$depth" --seconds "$SECONDS_RUN" --span-mib "$SPAN_MIB" > "$OUT/one.json" 2>> "$OUT/client.err"
    t1=$(cpu_ticks "$pid")
    python3 - "$who" "$OUT/one.json" "$(( t1 - t0 ))" "$HZ" <<'PY'
import json, sys
who, path, ticks, hz = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
r = json.load(open(path))
cpu = ticks / hz
r["target"] = who
r["target_cpu_seconds"] = cpu
r["target_cpu_us_per_op"] = cpu * 1e6 / max(r["ops"], 1)
r["target_cpu_seconds_per_gb"] = cpu / max(r["ops"] * r["block"] / 1e9, 1e-9)
print(json.dumps(r))
PY
}
raw() {
    local name=$1; shift
    fio --name="$name" --filename="$DIR/raw.img" --size="${SPAN_MIB}M" --direct=1 \
        --time_based --runtime="$SECONDS_RUN" --output-format=json "$@" > "$OUT/fio.json" 2>/dev/null
    python3 - "$name" "$OUT/fio.json" <<'PY'
import json, sys
name, path = sys.argv[1], sys.argv[2]
j = json.load(open(path))["jobs"][0]
side = j["write"] if j["write"]["io_bytes"] > 0 else j["read"]
lat = side.get("clat_ns", {}).get("percentile", {})
print(json.dumps({"target": "raw", "test": name, "iops": side["iops"], "mb_per_s": side["bw_bytes"] / 1e6,
                  "latency_us_p50": lat.get("50.000000", 0) / 1000, "latency_us_p99": lat.get("99.000000", 0) / 1000}))
PY
}

log "filling both spans and the raw file"
for who in shoal tgt; do run "$who" write 131072 8 >/dev/null; done
fio --name=fill --filename="$DIR/raw.img" --size="${SPAN_MIB}M" --rw=write --bs=1M --direct=1 >/dev/null
TESTS="randwrite:4096:32 randread:4096:32 write:131072:8 read:131072:8 syncwrite:4096:1"
: > "$OUT/results.jsonl"
for round in $(seq "$REPEAT"); do
    if [ $(( round % 2 )) = 1 ]; then order="shoal tgt"; else order="tgt shoal"; fi
    log "round $round: $order"
    for spec in $TESTS; do
        IFS=: read -r test block depth <<< "$spec"
        for who in $order; do run "$who" "$test" "$block" "$depth" | sed "s/^{/{\"round\": $round, /" >> "$OUT/results.jsonl"; done
    done
    raw randwrite --rw=randwrite --bs=4k --iodepth=32 --ioengine=libaio | sed "s/^{/{\"round\": $round, /" >> "$OUT/results.jsonl"
    raw randread --rw=randread --bs=4k --iodepth=32 --ioengine=libaio | sed "s/^{/{\"round\": $round, /" >> "$OUT/results.jsonl"
    raw write --rw=write --bs=128k --iodepth=8 --ioengine=libaio | sed "s/^{/{\"round\": $round, /" >> "$OUT/results.jsonl"
    raw read --rw=read --bs=128k --iodepth=8 --ioengine=libaio | sed "s/^{/{\"round\": $round, /" >> "$OUT/results.jsonl"
    raw syncwrite --rw=randwrite --bs=4k --iodepth=1 --ioengine=psync --fdatasync=1 | sed "s/^{/{\"round\": $round, /" >> "$OUT/results.jsonl"
done
python3 - "$OUT/results.jsonl" "$SPAN_MIB" "$SECONDS_RUN" "$REPEAT" "$VOLUME_SYNC" "$VOLBLOCKSIZE" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
out = {"bench": "iscsi", "span_mib": int(sys.argv[2]), "seconds": int(sys.argv[3]), "repeat": int(sys.argv[4]),
       "client": "bench/iscsi-bench (pipelined, one session)", "volume_sync": sys.argv[5], "volblocksize": sys.argv[6], "figures": {}}
keys = ["iops", "mb_per_s", "latency_us_p50", "latency_us_p99", "target_cpu_us_per_op", "target_cpu_seconds_per_gb"]
for r in rows:
    f = out["figures"].setdefault(r["test"], {}).setdefault(r["target"], {k: [] for k in keys})
    for k in keys:
        if k in r:
            f[k].append(round(r[k], 3))
for test, by in out["figures"].items():
    for who, f in by.items():
        for k in list(f):
            if not f[k]:
                del f[k]
                continue
            f[k + "_median"] = statistics.median(f[k])
    s, t, raw = by.get("shoal", {}), by.get("tgt", {}), by.get("raw", {})
    ratios = {}
    if s.get("iops_median") and t.get("iops_median"):
        ratios["shoal_over_tgt_iops"] = round(s["iops_median"] / t["iops_median"], 3)
    if s.get("target_cpu_us_per_op_median") and t.get("target_cpu_us_per_op_median"):
        ratios["shoal_over_tgt_cpu_per_op"] = round(s["target_cpu_us_per_op_median"] / t["target_cpu_us_per_op_median"], 3)
    if s.get("mb_per_s_median") and raw.get("mb_per_s_median"):
        ratios["shoal_over_raw_mb_per_s"] = round(s["mb_per_s_median"] / raw["mb_per_s_median"], 3)
    by["ratios"] = ratios
print(json.dumps(out, indent=1))
PY
