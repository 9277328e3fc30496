#!/usr/bin/env bash
# Pool-layout scaling on simulated disks: the layouts of a 16-disk server (3x(4+1)
# RAID-Z, 5x(2+1) RAID-Z, 7x2 mirror), every device a disk of DISK (72 MB/s, 90 random
# IOPS by default, `shoal serve --simulate-disk`), measured with `shoal bench` for
# streaming write, streaming read from disk (server restarted: empty ARC; checked with
# the cache check) and 8K random reads, each next to `shoal plan`'s prediction.
# Prints one JSON object a measurement (the bench report's key figures) and writes
# the full reports under $OUT.
#
#   bench/scaling.sh                                  # all three layouts
#   LAYOUTS="7x2mirror" SET=2G RANDOM_S=10 bench/scaling.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DISK=${DISK:-72MB/s,90iops}
MBPS=${MBPS:-72}
IOPS=${IOPS:-90}
LAYOUTS=${LAYOUTS:-3x(4+1)raidz 5x(2+1)raidz 7x2mirror}
SET=${SET:-3G}            # the file set (12x the ARC)
ARC=${ARC:-256M}
DEV_SIZE=${DEV_SIZE:-1G}
RANDOM_S=${RANDOM_S:-20}
BENCH_DIR=${BENCH_DIR:-$PWD/target/bench-data/scaling}
OUT=${OUT:-$BENCH_DIR/out}
NFS=127.0.0.1:20790
API=127.0.0.1:20780

cargo build --release -q -p shoal
SHOAL=$PWD/target/release/shoal
mkdir -p "$OUT"
log() { echo "scaling: $*" >&2; }

stop_shoal() {
    if [ -f "$OUT/shoal.pid" ]; then
        kill -TERM "$(cat "$OUT/shoal.pid")" 2>/dev/null || true
        while kill -0 "$(cat "$OUT/shoal.pid")" 2>/dev/null; do sleep 0.1; done
        rm -f "$OUT/shoal.pid"
    fi
}
trap stop_shoal EXIT

start_shoal() {
    SHOAL_STATE_DIR=$STATE SHOAL_LOG=warn "$SHOAL" serve --listen $NFS --api $API \
        --share 'tank/b=*(rw,no_root_squash)' --arc-max "$ARC" --simulate-disk "$DISK" \
        >>"$OUT/shoal.log" 2>&1 &
    echo $! > "$OUT/shoal.pid"
    for _ in $(seq 100); do ss -ltn | grep -q "${NFS#*:} " && return; sleep 0.1; done
    log "shoal did not start"; exit 1
}

# pool words for `shoal pool create`: 3x(4+1)raidz -> raidz1 d0..d4 raidz1 d5..d9 ...
pool_words() {
    local spec=$1 groups width kind i g words=()
    if [[ $spec =~ ^([0-9]+)x\(([0-9]+)\+([0-9]+)\)raidz$ ]]; then
        groups=${BASH_REMATCH[1]}; width=$((BASH_REMATCH[2] + BASH_REMATCH[3])); kind=raidz${BASH_REMATCH[3]}
    elif [[ $spec =~ ^([0-9]+)x([0-9]+)mirror$ ]]; then
        groups=${BASH_REMATCH[1]}; width=${BASH_REMATCH[2]}; kind=mirror
    else
        log "layout $spec: not understood"; exit 1
    fi
    for ((g = 0; g < groups; g++)); do
        words+=("$kind")
        for ((i = 0; i < width; i++)); do words+=("d$((g * width + i))"); done
    done
    echo "${words[@]}"
}

run() { # NAME EXPECT ARGS... -> one JSON line
    local name=$1 expect=$2; shift 2
    local report="$OUT/$TAG-$name.json"
    local expect_args=()
    [ "$expect" != none ] && expect_args=(--expect "$expect")
    "$SHOAL" bench run --json --server $NFS --export /tank/b --shoal-api "http://$API" \
        --layout "$LAYOUT" --disk-mbps "$MBPS" --disk-iops "$IOPS" --working-set "$SET" \
        "${expect_args[@]}" "$@" > "$report" 2>>"$OUT/bench.log" || log "$TAG $name: shoal bench failed (see $OUT/bench.log)"
    python3 - "$report" "$LAYOUT" "$name" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
a, p, s = r["aggregate"], r.get("predicted") or {}, r.get("server") or {}
check = (s.get("cache_check") or {})
print(json.dumps({
    "layout": sys.argv[2], "test": sys.argv[3],
    "clients": a["clients"], "threads": a["threads"],
    "mb_per_s": round(a["last_done"]["mb_per_s"], 1), "iops": round(a["last_done"]["iops"], 1),
    "p99_ms": round(a["latency"]["p99_us"] / 1000, 2),
    "predicted": p.get("predicted"), "measured_over_predicted": round(p["measured_over_predicted"], 3) if p else None,
    "device_read_mb": round(s.get("device_read_bytes", 0) / 1e6, 1),
    "nfs_read_mb": round(s.get("nfs_read_bytes", 0) / 1e6, 1),
    "arc_hit_ratio": s.get("arc_hit_ratio"), "cache_check": check.get("passed"),
    "errors": a["errors"],
}))
PY
}

for LAYOUT in $LAYOUTS; do
    TAG=$(echo "$LAYOUT" | tr -d '()+')
    DIR=$BENCH_DIR/$TAG
    STATE=$DIR/state
    rm -rf "$DIR"; mkdir -p "$DIR"
    log "$LAYOUT: pool of $DEV_SIZE devices"
    # shellcheck disable=SC2046
    SHOAL_STATE_DIR=$STATE "$SHOAL" pool create --dir "$DIR/devs" --size "$DEV_SIZE" tank $(pool_words "$LAYOUT") >/dev/null
    SHOAL_STATE_DIR=$STATE "$SHOAL" fs create tank/b -o compression=off >/dev/null
    start_shoal
    run write none --workload write --clients 2 --threads 4 --depth 8 --files 16
    # From disk: a restarted server has an empty ARC, and the set is 12x the ARC.
    stop_shoal; start_shoal
    run read disk --workload read --clients 2 --threads 4 --depth 8 --files 16
    stop_shoal; start_shoal
    run randread disk --workload randread --clients 4 --threads 16 --depth 1 --files 16 --duration "${RANDOM_S}s"
    stop_shoal
    rm -rf "$DIR/devs"
done
