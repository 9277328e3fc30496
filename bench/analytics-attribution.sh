#!/usr/bin/env bash
# Analytics' cost, attributed within one daemon: where `analytics-interleaved.sh`
# compares two daemons (on and off) and so carries the drift between them, this runs
# one daemon with analytics on under 8K random reads from the ARC and splits its own
# CPU into analytics' parts, which no drift between runs can move:
#
#   collector  the collector thread's run time (schedstat, exact) over the daemon's CPU
#              (utime+stime);
#   record     perf samples of the I/O threads in analytics' code (`analytics::`
#              symbols: putting the event into the thread's buffer) over all samples;
#   clock      half of the I/O threads' samples in user-space clock reads: a v3 call
#              reads the clock twice, once when its record arrives (with analytics on
#              or off) and once for the event's time and latency.
#
# What it cannot see: the few stores that fill the event, inlined into the procedure
# that sends the reply, and what analytics' memory traffic costs the code around it
# (the interleaved benchmark's A/B includes both). perf samples the CPU clock
# (`-e cpu-clock`, which works in a VM without hardware counters).
# Prints one JSON object: every run and the median and range of each share.
# Pins the daemon to CPU 0 and the load generator to CPU 1 as the interleaved
# benchmark does (PIN=0 to let the scheduler place them). A benchmark, never a test.
#
#   BENCH_DIR=/work/bench-data bench/analytics-attribution.sh
#   RUNS=10 WINDOW_S=10 BENCH_DIR=/work/bench-data bench/analytics-attribution.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${BENCH_DIR:-$PWD/target/bench-data}/analytics-attribution
RUNS=${RUNS:-10}
WINDOW_S=${WINDOW_S:-10}
FILE_MIB=${FILE_MIB:-512}
STREAMS=${STREAMS:-8}
PORT=${PORT:-20494}
. bench/lib.sh
pin_cpus
command -v perf >/dev/null || need linux-perf
cargo build --release -q -p shoal -p nfs-bench
SHOAL=$PWD/target/release/shoal
NB=$PWD/target/release/nfs-bench
OUT=$(mktemp -d)
PID=
stop() { [ -n "$PID" ] && kill -TERM "$PID" 2>/dev/null && while kill -0 "$PID" 2>/dev/null; do sleep 0.1; done; return 0; }
trap 'stop; rm -rf "$OUT"' EXIT
rm -rf "$DIR" && mkdir -p "$DIR"
DEV_MIB=$(( FILE_MIB * STREAMS * 2 / 4 + 512 ))
export SHOAL_STATE_DIR="$DIR/state"
"$SHOAL" pool create --dir "$DIR" --size "${DEV_MIB}M" attr raidz2 a b c d e f >/dev/null
"$SHOAL" fs create attr/fs -o recordsize=128K -o compression=off >/dev/null
SHOAL_LOG=warn "${SERVER_CPUS[@]}" "$SHOAL" serve --listen "127.0.0.1:$PORT" --api off --analytics on \
    --share "attr/fs=127.0.0.1(rw,no_root_squash,insecure)" 2>>"$OUT/shoal.log" &
PID=$!
wait_listening "$PORT" "$OUT/shoal.log"
nb() { "${CLIENT_CPUS[@]}" "$NB" --server "127.0.0.1:$PORT" --export /attr/fs --streams "$STREAMS" --file-mib "$FILE_MIB" "$@"; }
nb --test write --block 131072 --depth 16 >/dev/null
nb --test read --block 131072 --depth 16 >/dev/null # into the ARC
HZ=$(getconf CLK_TCK)
: > "$OUT/runs.jsonl"
for i in $(seq "$RUNS"); do
    # The load runs a second longer on each side than perf and the counters, so
    # both see only the steady state.
    nb --test randread --block 8192 --depth 16 --seconds $(( WINDOW_S + 2 )) > "$OUT/nb.json" &
    NBP=$!
    sleep 1
    cpu0=$(proc_cpu_ticks "$PID") col0=$(collector_ns "$PID")
    perf record -q -e cpu-clock -F 1999 -p "$PID" -o "$OUT/perf.data" -- sleep "$WINDOW_S" >/dev/null 2>&1
    cpu1=$(proc_cpu_ticks "$PID") col1=$(collector_ns "$PID")
    wait "$NBP"
    # comm, then symbol, one line per sample weight: "<percent> <comm> <symbol>".
    perf report -i "$OUT/perf.data" --no-children --sort comm,sym --stdio -g none 2>/dev/null \
        | awk '/^ +[0-9.]+%/ { sub("%", "", $1); comm = $2; $2 = ""; $3 = ""; print $1 "\t" comm "\t" $0 }' > "$OUT/flat.tsv"
    cp "$OUT/flat.tsv" "$DIR/profile-$i.tsv"
    python3 - "$OUT/flat.tsv" "$OUT/nb.json" "$i" "$cpu0" "$cpu1" "$col0" "$col1" "$HZ" >> "$OUT/runs.jsonl" <<'PY'
import json, sys
flat, nbj, run = sys.argv[1], sys.argv[2], int(sys.argv[3])
cpu0, cpu1, col0, col1, hz = (float(x) for x in sys.argv[4:9])
collector_perf = record = clock = 0.0
for line in open(flat):
    pct, comm, sym = line.rstrip("\n").split("\t", 2)
    pct = float(pct)
    if comm == "analytics":
        collector_perf += pct
    elif "analytics::" in sym:
        record += pct
    elif any(k in sym for k in ("clock_gettime", "Instant>::now", "saturating_duration_since")):
        clock += pct
cpu_s = (cpu1 - cpu0) / hz
collector_s = (col1 - col0) / 1e9
print(json.dumps({
    "run": run,
    "calls": json.load(open(nbj))["calls"],
    "cpu_s": round(cpu_s, 3),
    "collector_share": round(collector_s / cpu_s, 5),
    "collector_share_perf": round(collector_perf / 100, 5),
    "record_share": round(record / 100, 5),
    "clock_share": round(clock / 2 / 100, 5),
}))
PY
    echo "analytics-attribution.sh: run $i of $RUNS done" >&2
done
python3 - "$OUT/runs.jsonl" "$WINDOW_S" "$STREAMS" "$PIN" "$(git rev-parse --short HEAD)" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
for r in runs:
    r["analytics_share"] = round(r["collector_share"] + r["record_share"] + r["clock_share"], 5)
def spread(k):
    v = sorted(r[k] for r in runs)
    return {"median": round(statistics.median(v), 5), "min": v[0], "max": v[-1]}
print(json.dumps({
    "benchmark": "analytics overhead, attributed within one daemon",
    "commit": sys.argv[5],
    "test": "randread 8K, %s streams, depth 16, %s s windows, from the ARC" % (sys.argv[3], sys.argv[2]),
    "pinned_server_cpu0_client_cpu1": sys.argv[4] == "1",
    "runs": runs,
    "cpu_us_per_call_median": round(statistics.median(r["cpu_s"] * 1e6 / r["calls"] for r in runs), 3),
    "collector_share": spread("collector_share"),
    "collector_share_perf": spread("collector_share_perf"),
    "record_share": spread("record_share"),
    "clock_share": spread("clock_share"),
    "analytics_share": spread("analytics_share"),
}, indent=1))
PY
