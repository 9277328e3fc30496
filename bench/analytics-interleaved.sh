#!/usr/bin/env bash
# Analytics overhead, interleaved: two `shoal serve` daemons run side by side, one
# with analytics on (the default statistics, host CPUs and interfaces included) and
# one with it off, each on its own raidz2 pool of 6 file devices holding the same
# files written the same way. Short runs of 8K random reads from the ARC go to one
# daemon, then the other, PAIRS times, so both see the machine in nearly the same
# state: on this VM CPU per call drifts by 10% and more between runs a minute apart
# (bench/analytics.sh, which restarts one daemon per mode), which hides a 2% cost.
#
# Each daemon's CPU (utime+stime from /proc, threads that ended included) is read
# at every switch; a pair's ratio is the "on" daemon's CPU per call over the "off"
# daemon's, each over the pair's two windows (its own busy window and its idle one,
# so the collector's catch-up and the once-a-second samplers count where they
# fall). Prints one JSON object: every pair, the median ratio and its spread, the
# ratio of the totals, and the collector thread's share of the "on" daemon's CPU.
# PIN=1 (the default on a machine of 2 or more CPUs) runs both daemons on CPU 0 and
# the load generator on CPU 1 (taskset), so server and client never share a CPU and
# a daemon's threads are not moved between CPUs: on a 2-CPU VM this narrows the
# spread of CPU per call between pairs. PIN=0 lets the scheduler place them.
# TOGETHER=1 loads both daemons at once, in the same windows, instead of one after the
# other: they share CPU 0 (and the load generators CPU 1), so whatever the VM does to
# the CPU in a window it does to both; a pair's ratio is then of two daemons measured
# over the same instants.
# CONTROL=1 runs both daemons with analytics off (an A/A run): its ratio shows what
# the harness itself gives when there is nothing to measure.
# ROUNDS=N (default 1) starts both daemons afresh N times, on new pools, with PAIRS
# pairs each, and alternates which daemon is started and loaded first from round to
# round: two daemon processes differ by a percent or so in CPU per call for reasons of
# their own (where their memory and threads landed), which every pair of one round
# shares, so only fresh daemons average it away. The summary gives each round's
# median and the mean of the rounds' medians with its standard error.
# A benchmark, never a test.
#
#   bench/analytics-interleaved.sh
#   BENCH_DIR=/work/bench-data PAIRS=30 WINDOW_S=3 bench/analytics-interleaved.sh
#   CONTROL=1 BENCH_DIR=/work/bench-data PAIRS=30 bench/analytics-interleaved.sh
#   TOGETHER=1 ROUNDS=6 PAIRS=20 WINDOW_S=4 BENCH_DIR=/work/bench-data bench/analytics-interleaved.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${BENCH_DIR:-$PWD/target/bench-data}/analytics-interleaved
PAIRS=${PAIRS:-30}
WINDOW_S=${WINDOW_S:-3}
FILE_MIB=${FILE_MIB:-512}
STREAMS=${STREAMS:-8}
CONTROL=${CONTROL:-0}
TOGETHER=${TOGETHER:-0}
ROUNDS=${ROUNDS:-1}
. bench/lib.sh
pin_cpus
cargo build --release -q -p shoal -p nfs-bench
SHOAL=$PWD/target/release/shoal
NB=$PWD/target/release/nfs-bench
declare -A PORT=([on]=20492 [off]=20493) PID=()
OUT=$(mktemp -d)
stop_all() {
    for mode in on off; do
        [ -n "${PID[$mode]:-}" ] && kill -TERM "${PID[$mode]}" 2>/dev/null && while kill -0 "${PID[$mode]}" 2>/dev/null; do sleep 0.1; done
    done
    return 0
}
trap 'stop_all; rm -rf "$OUT"' EXIT
DEV_MIB=$(( FILE_MIB * STREAMS * 2 / 4 + 512 ))
# Starts both daemons on new pools and reads their files into the ARC; in even rounds
# the "off" daemon goes first.
start_daemons() { # round
    local modes="on off"
    [ $(( $1 % 2 )) -eq 0 ] && modes="off on"
    rm -rf "$DIR" && mkdir -p "$DIR"
    for mode in $modes; do
        mkdir -p "$DIR/$mode"
        SHOAL_STATE_DIR="$DIR/$mode/state" "$SHOAL" pool create --dir "$DIR/$mode" --size "${DEV_MIB}M" "a$mode" raidz2 a b c d e f >/dev/null
        SHOAL_STATE_DIR="$DIR/$mode/state" "$SHOAL" fs create "a$mode/fs" -o recordsize=128K -o compression=off >/dev/null
        SHOAL_STATE_DIR="$DIR/$mode/state" SHOAL_LOG=warn "${SERVER_CPUS[@]}" "$SHOAL" serve --listen "127.0.0.1:${PORT[$mode]}" --api off --analytics "$( [ "$CONTROL" = 1 ] && echo off || echo "$mode")" \
            --share "a$mode/fs=127.0.0.1(rw,no_root_squash,insecure)" 2>>"$OUT/shoal-$mode.log" &
        PID[$mode]=$!
        wait_listening "${PORT[$mode]}" "$OUT/shoal-$mode.log"
    done
    for mode in $modes; do
        nb "$mode" --test write --block 131072 --depth 16 >/dev/null
        nb "$mode" --test read --block 131072 --depth 16 >/dev/null # into the ARC
    done
}
nb() { local mode=$1; shift; "${CLIENT_CPUS[@]}" "$NB" --server "127.0.0.1:${PORT[$mode]}" --export "/a$mode/fs" --streams "$STREAMS" --file-mib "$FILE_MIB" "$@"; }
cpu() { echo "$(proc_cpu_ticks "${PID[on]}") $(proc_cpu_ticks "${PID[off]}") $(collector_ns "${PID[on]}")"; }
per() { awk -v a="$1" -v b="$2" -v d="$3" 'BEGIN { print (b - a) / d }'; } # FROM TO DIVISOR
HZ=$(getconf CLK_TCK)
: > "$OUT/pairs.jsonl"
for round in $(seq "$ROUNDS"); do
start_daemons "$round"
for i in $(seq "$PAIRS"); do
    # Alternate which daemon goes (or is loaded) first, so a trend within a pair, or
    # the head start of the load launched first, falls on both.
    order="on off"; [ $(( i % 2 )) -eq 0 ] && order="off on"
    read -r on0 off0 col0 <<<"$(cpu)"
    declare -A calls=()
    if [ "$TOGETHER" = 1 ]; then
        loads=()
        for mode in $order; do
            nb "$mode" --test randread --block 8192 --depth 16 --seconds "$WINDOW_S" > "$OUT/nb-$mode.json" &
            loads+=($!)
        done
        wait "${loads[@]}" # not the daemons, which are this shell's jobs too
        for mode in on off; do
            calls[$mode]=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["calls"])' "$OUT/nb-$mode.json")
        done
    else
        for mode in $order; do
            calls[$mode]=$(nb "$mode" --test randread --block 8192 --depth 16 --seconds "$WINDOW_S" | python3 -c 'import json,sys; print(json.load(sys.stdin)["calls"])')
        done
    fi
    read -r on1 off1 col1 <<<"$(cpu)"
    echo "{\"round\":$round,\"pair\":$i,\"first\":\"${order%% *}\",\"calls_on\":${calls[on]},\"calls_off\":${calls[off]},\"cpu_s_on\":$(per "$on0" "$on1" "$HZ"),\"cpu_s_off\":$(per "$off0" "$off1" "$HZ"),\"collector_s\":$(per "$col0" "$col1" 1e9)}" >> "$OUT/pairs.jsonl"
    echo "analytics-interleaved.sh: round $round of $ROUNDS, pair $i of $PAIRS done" >&2
done
stop_all
PID=()
done
python3 - "$OUT/pairs.jsonl" "$WINDOW_S" "$STREAMS" "$CONTROL" "$PIN" "$TOGETHER" <<'PY'
import json, statistics, sys
pairs = [json.loads(l) for l in open(sys.argv[1])]
ratio = lambda p: (p["cpu_s_on"] / p["calls_on"]) / (p["cpu_s_off"] / p["calls_off"])
ratios = sorted(ratio(p) for p in pairs)
q = lambda f: ratios[min(len(ratios) - 1, int(f * len(ratios)))]
tot = lambda k: sum(p[k] for p in pairs)
out = {
    "benchmark": "analytics overhead, interleaved daemons",
    "control_both_off": sys.argv[4] == "1",
    "pinned_server_cpu0_client_cpu1": sys.argv[5] == "1",
    "daemons_loaded_together": sys.argv[6] == "1",
    "test": "randread 8K, %s streams, depth 16, %s s windows, from the ARC" % (sys.argv[3], sys.argv[2]),
    "pairs": pairs,
    "cpu_per_call_on_over_off_median": round(statistics.median(ratios), 4),
    "cpu_per_call_on_over_off_quartiles": [round(q(0.25), 4), round(q(0.75), 4)],
    "cpu_per_call_on_over_off_totals": round((tot("cpu_s_on") / tot("calls_on")) / (tot("cpu_s_off") / tot("calls_off")), 4),
    "cpu_us_per_call_on": round(tot("cpu_s_on") * 1e6 / tot("calls_on"), 3),
    "cpu_us_per_call_off": round(tot("cpu_s_off") * 1e6 / tot("calls_off"), 3),
    "collector_share_of_on_cpu": round(tot("collector_s") / tot("cpu_s_on"), 4),
}
rounds = sorted({p.get("round", 1) for p in pairs})
medians = [statistics.median(ratio(p) for p in pairs if p.get("round", 1) == r) for r in rounds]
out["round_medians"] = [round(m, 4) for m in medians]
out["mean_of_round_medians"] = round(statistics.mean(medians), 4)
if len(medians) > 1:
    out["mean_of_round_medians_standard_error"] = round(statistics.stdev(medians) / len(medians) ** 0.5, 4)
print(json.dumps(out, indent=1))
PY
