#!/usr/bin/env bash
# Analytics overhead: the same NFS load against `shoal serve` with analytics on (the
# default statistics) and off, alternating REPEAT times, on a raidz2 pool of 6 file
# devices. Prints one JSON object with every run, the medians and on/off ratios of
# throughput and of the daemon's CPU per call (its utime+stime over the run, from
# /proc, which drifts far less than throughput on a shared VM): the target is a cost
# under 2%. "on" is the default statistics, the host's CPUs and interfaces included.
# Because runs of one mode spread more than 2%, it also reports the collector
# thread's share of the daemon's CPU in "on" runs (read from /proc per thread): the
# off-path cost, measured within one run; the on-path cost is one queue push per
# event.
# A benchmark, never a test.
#
#   bench/analytics.sh
#   BENCH_DIR=/work/bench-data SECONDS_RUN=10 REPEAT=5 bench/analytics.sh
#
# The loads are the ones where per-operation cost shows most: 8K random reads and
# 128K streaming reads from the ARC (no disk noise), and 128K streaming writes.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${BENCH_DIR:-$PWD/target/bench-data}/analytics
SECONDS_RUN=${SECONDS_RUN:-10}
REPEAT=${REPEAT:-5}
FILE_MIB=${FILE_MIB:-512}
STREAMS=${STREAMS:-8}
. bench/lib.sh
cargo build --release -q -p shoal -p nfs-bench
SHOAL=$PWD/target/release/shoal
NB=$PWD/target/release/nfs-bench
PORT=20490
export SHOAL_STATE_DIR="$DIR/state"
OUT=$(mktemp -d)
stop() { [ -f "$OUT/pid" ] && kill -TERM "$(cat "$OUT/pid")" 2>/dev/null && while kill -0 "$(cat "$OUT/pid")" 2>/dev/null; do sleep 0.1; done; rm -f "$OUT/pid"; }
trap 'stop; rm -rf "$OUT"' EXIT
rm -rf "$DIR" && mkdir -p "$DIR"
DEV_MIB=$(( FILE_MIB * STREAMS * 2 / 4 + 512 ))
"$SHOAL" pool create --dir "$DIR" --size "${DEV_MIB}M" abench raidz2 a b c d e f >/dev/null
"$SHOAL" fs create abench/fs -o recordsize=128K -o compression=off >/dev/null
start() { # on|off
    SHOAL_LOG=warn "$SHOAL" serve --listen 127.0.0.1:$PORT --api off --analytics "$1" \
        --share 'abench/fs=127.0.0.1(rw,no_root_squash,insecure)' 2>>"$OUT/shoal.log" &
    echo $! > "$OUT/pid"
    for _ in $(seq 100); do ss -ltn | grep -q ":$PORT " && return; sleep 0.1; done
    echo "shoal did not start" >&2; cat "$OUT/shoal.log" >&2; exit 1
}
# The analytics collector thread's run time (`collector_ns`; it also runs the
# once-a-second samplers) is the part of analytics' cost that is not on the I/O
# path, measured directly rather than as a difference of two noisy runs.
nb() { "$NB" --server 127.0.0.1:$PORT --export /abench/fs --streams "$STREAMS" --file-mib "$FILE_MIB" "$@"; }
start on
nb --test write --block 131072 --depth 16 >/dev/null
stop
: > "$OUT/runs.jsonl"
for i in $(seq "$REPEAT"); do
    # Alternate which mode goes first, so drift in the machine falls on both.
    modes="on off"; [ $(( i % 2 )) -eq 0 ] && modes="off on"
    for mode in $modes; do
        start "$mode"
        nb --test read --block 131072 --depth 16 >/dev/null # warm the ARC
        for t in "randread 8192" "read 131072" "write 131072"; do
            set -- $t
            pid=$(cat "$OUT/pid")
            cpu0=$(proc_cpu_ticks "$pid"); col0=$(collector_ns "$pid")
            r=$(nb --test "$1" --block "$2" --depth 16 --seconds "$SECONDS_RUN")
            cpu1=$(proc_cpu_ticks "$pid"); col1=$(collector_ns "$pid")
            echo "{\"mode\":\"$mode\",\"run\":$i,\"test\":\"$1\",\"server_cpu_s\":$(awk -v a="$cpu0" -v b="$cpu1" -v hz="$(getconf CLK_TCK)" 'BEGIN { print (b - a) / hz }'),\"collector_cpu_s\":$(awk -v a="$col0" -v b="$col1" 'BEGIN { print (b - a) / 1e9 }'),\"result\":$r}" >> "$OUT/runs.jsonl"
        done
        stop
    done
    echo "analytics.sh: round $i of $REPEAT done" >&2
done
python3 - "$OUT/runs.jsonl" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
out = {"benchmark": "analytics overhead", "runs": runs, "tests": {}}
for test in sorted({r["test"] for r in runs}):
    fig = {}
    for mode in ("on", "off"):
        rs = [r for r in runs if r["test"] == test and r["mode"] == mode]
        key = "iops" if test == "randread" else "mb_per_s"
        fig[mode] = statistics.median(x["result"][key] for x in rs)
        fig["unit"] = key
        per_call = [x["server_cpu_s"] * 1e6 / x["result"]["calls"] for x in rs]
        fig["cpu_us_per_call_" + mode] = round(statistics.median(per_call), 2)
        fig["cpu_us_per_call_" + mode + "_runs"] = [round(v, 2) for v in per_call]
    on = [r for r in runs if r["test"] == test and r["mode"] == "on"]
    share = [r["collector_cpu_s"] / r["server_cpu_s"] for r in on if r["server_cpu_s"] > 0]
    fig["collector_share_of_daemon_cpu_on"] = round(statistics.median(share), 4)
    fig["collector_share_runs"] = [round(v, 4) for v in share]
    fig["on_over_off"] = round(fig["on"] / fig["off"], 4)
    fig["cpu_on_over_off"] = round(fig["cpu_us_per_call_on"] / fig["cpu_us_per_call_off"], 4)
    # Each round ran both modes back to back: the ratio within a round cancels the
    # drift between rounds.
    per_run = {(r["run"], r["mode"]): r["server_cpu_s"] / r["result"]["calls"] for r in runs if r["test"] == test}
    paired = sorted(per_run[(i, "on")] / per_run[(i, "off")] for i in {r["run"] for r in runs} if (i, "on") in per_run and (i, "off") in per_run)
    fig["cpu_on_over_off_paired_median"] = round(statistics.median(paired), 4)
    fig["cpu_on_over_off_paired_runs"] = [round(v, 4) for v in paired]
    out["tests"][test] = fig
print(json.dumps(out, indent=1))
PY
