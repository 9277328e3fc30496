#!/usr/bin/env bash
# 8K FILE_SYNC writes, the database and VM workload, side by side with the physical
# limit: the raw disk's 8K write+fdatasync rate (fio, O_DIRECT, on the same file
# system as every server's files), `shoal serve` on a raidz2 of six files with and
# without a log device and with 128K and 8K records, and NFS-Ganesha (FSAL VFS) on an
# ext4 directory of the same disk. 1 and 8 streams, one call in flight per stream
# (`nfs-bench --test syncwrite`: random 8K writes with stable=FILE_SYNC).
#
# Fair by construction: every server writes into files it holds already (written in
# full by the same client, then left to settle), the same client drives all of them,
# and rounds interleave (every system once per round, ROUNDS rounds) so this VM's
# drift falls on all alike. Each figure is the median of the rounds with its min-max;
# for every server the CPU it spent per operation (utime+stime of the server process
# from /proc, over the timed run) is recorded too: it drifts far less than IOPS.
#
#   BENCH_DIR=/work/bench-data ROUNDS=3 SECONDS_RUN=5 bench/syncwrite.sh > out.json
#
# Needs root (Ganesha), fio, nfs-ganesha and nfs-ganesha-vfs. Prints one JSON object.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
DIR=${BENCH_DIR:-/tmp/shoal-bench}/syncwrite
ROUNDS=${ROUNDS:-3}
SECONDS_RUN=${SECONDS_RUN:-5}
FILE_MIB=${FILE_MIB:-64}
SHOAL_PORT=${SHOAL_PORT:-20977}
GANESHA_PORT=${GANESHA_PORT:-20990}
GANESHA_MNT=$((GANESHA_PORT + 1))
log() { echo "syncwrite.sh: $*" >&2; }
for tool in fio ganesha.nfsd; do
    command -v $tool >/dev/null || { log "needs $tool (apt-get install fio nfs-ganesha nfs-ganesha-vfs)"; exit 1; }
done
cargo build --release -q -p shoal -p nfs-bench
SHOAL=$PWD/target/release/shoal
NB=$PWD/target/release/nfs-bench
rm -rf "$DIR"; mkdir -p "$DIR"/{devs,ext4,fio,state}
OUT=$DIR/results.jsonl; : > "$OUT"
export SHOAL_STATE_DIR=$DIR/state

cleanup() {
    [ -f "$DIR/shoal.pid" ] && kill -TERM "$(cat "$DIR/shoal.pid")" 2>/dev/null || true
    [ -f "$DIR/ganesha.pid" ] && kill -TERM "$(cat "$DIR/ganesha.pid")" 2>/dev/null || true
    sleep 1
}
trap cleanup EXIT

# shoal: pool p without, pool q with a log device; 128K and 8K records on each.
"$SHOAL" pool create --dir "$DIR/devs" --size 1G p raidz2 a b c d e f >/dev/null
"$SHOAL" pool create --dir "$DIR/devs" --size 1G q raidz2 g h i j k l log m >/dev/null
for p in p q; do
    "$SHOAL" fs create $p/r128k -o recordsize=128K -o compression=off >/dev/null
    "$SHOAL" fs create $p/r8k -o recordsize=8K -o compression=off >/dev/null
done
SHOAL_LOG=warn "$SHOAL" serve --listen 127.0.0.1:$SHOAL_PORT --api off --arc-max 1G \
    --share 'p/r128k=127.0.0.1(rw,no_root_squash,insecure)' --share 'p/r8k=127.0.0.1(rw,no_root_squash,insecure)' \
    --share 'q/r128k=127.0.0.1(rw,no_root_squash,insecure)' --share 'q/r8k=127.0.0.1(rw,no_root_squash,insecure)' \
    2> "$DIR/shoal.log" &
echo $! > "$DIR/shoal.pid"

pgrep -x rpcbind >/dev/null || rpcbind -w
ganesha_v3_conf $GANESHA_PORT $GANESHA_MNT "$DIR/ext4" > "$DIR/ganesha.conf"
ganesha.nfsd -F -L "$DIR/ganesha.log" -f "$DIR/ganesha.conf" -p "$DIR/ganesha.pid.unused" &
echo $! > "$DIR/ganesha.pid"
for port in $SHOAL_PORT $GANESHA_PORT; do
    for _ in $(seq 100); do ss -ltn | grep -q ":$port " && break; sleep 0.1; done
done

endpoint() {
    case $1 in
        shoal-128k) echo "--server 127.0.0.1:$SHOAL_PORT --export /p/r128k" ;;
        shoal-128k-log) echo "--server 127.0.0.1:$SHOAL_PORT --export /q/r128k" ;;
        shoal-8k) echo "--server 127.0.0.1:$SHOAL_PORT --export /p/r8k" ;;
        shoal-8k-log) echo "--server 127.0.0.1:$SHOAL_PORT --export /q/r8k" ;;
        ganesha-ext4) echo "--server 127.0.0.1:$GANESHA_PORT --mount-port $GANESHA_MNT --export $DIR/ext4" ;;
    esac
}
pid_of() { case $1 in shoal*) cat "$DIR/shoal.pid" ;; ganesha*) cat "$DIR/ganesha.pid" ;; esac; }
cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
SYSTEMS="shoal-128k shoal-128k-log shoal-8k shoal-8k-log ganesha-ext4"

# The same files for every round: each stream's file written in full once, up front.
for sys in $SYSTEMS; do
    for streams in 1 8; do
        # shellcheck disable=SC2046
        "$NB" $(endpoint $sys) --test write --streams $streams --file-mib $((FILE_MIB / streams)) \
            --block 131072 --depth 16 > /dev/null
    done
done
sleep 12 # every server has written its dirty data

for round in $(seq "$ROUNDS"); do
    for streams in 1 8; do
        log "round $round of $ROUNDS, $streams streams"
        fio --name=raw --directory="$DIR/fio" --size=$((FILE_MIB / streams))m --bs=8k --rw=randwrite \
            --ioengine=psync --direct=1 --fdatasync=1 --numjobs=$streams --time_based \
            --runtime="$SECONDS_RUN" --group_reporting --output-format=json 2>/dev/null \
            | python3 -c 'import json,sys; w=json.load(sys.stdin)["jobs"][0]["write"]; print(json.dumps({"system": "raw-fdatasync", "streams": int(sys.argv[1]), "iops": w["iops"]}))' "$streams" >> "$OUT"
        for sys in $SYSTEMS; do
            pid=$(pid_of $sys)
            t0=$(cpu_ticks "$pid")
            # shellcheck disable=SC2046
            r=$("$NB" $(endpoint $sys) --test syncwrite --streams $streams --file-mib $((FILE_MIB / streams)) \
                --block 8192 --depth 1 --seconds "$SECONDS_RUN")
            t1=$(cpu_ticks "$pid")
            python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print(json.dumps({"system": sys.argv[2], "streams": int(sys.argv[3]), "iops": r["iops"], "server_cpu_us_per_op": (int(sys.argv[5]) - int(sys.argv[4])) / 100 / max(r["calls"], 1) * 1e6}))' \
                "$r" "$sys" "$streams" "$t0" "$t1" >> "$OUT"
        done
    done
done

python3 - "$OUT" "$ROUNDS" "$SECONDS_RUN" "$FILE_MIB" <<'EOF'
import json, statistics, sys, subprocess
rows = [json.loads(l) for l in open(sys.argv[1])]
def fig(system, streams, key):
    v = [r[key] for r in rows if r["system"] == system and r["streams"] == streams and key in r]
    return {"median": round(statistics.median(v), 1), "min": round(min(v), 1), "max": round(max(v), 1)} if v else None
systems = sorted({r["system"] for r in rows})
out = {"rounds": int(sys.argv[2]), "seconds_per_run": int(sys.argv[3]), "file_mib": int(sys.argv[4]),
       "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip(),
       "iops": {}, "server_cpu_us_per_op": {}, "ratios": {}}
for s in systems:
    for st in (1, 8):
        out["iops"][f"{s}_s{st}"] = fig(s, st, "iops")
        c = fig(s, st, "server_cpu_us_per_op")
        if c:
            out["server_cpu_us_per_op"][f"{s}_s{st}"] = c
def ratio(a, b, st):
    x, y = out["iops"].get(f"{a}_s{st}"), out["iops"].get(f"{b}_s{st}")
    return round(x["median"] / y["median"], 2) if x and y and y["median"] else None
for st in (1, 8):
    out["ratios"][f"s{st}_128k_log_vs_ganesha_ext4"] = ratio("shoal-128k-log", "ganesha-ext4", st)
    out["ratios"][f"s{st}_128k_no_log_vs_ganesha_ext4"] = ratio("shoal-128k", "ganesha-ext4", st)
    out["ratios"][f"s{st}_8k_log_vs_ganesha_ext4"] = ratio("shoal-8k-log", "ganesha-ext4", st)
    out["ratios"][f"s{st}_8k_log_vs_raw_fdatasync"] = ratio("shoal-8k-log", "raw-fdatasync", st)
    out["ratios"][f"s{st}_ganesha_ext4_vs_raw_fdatasync"] = ratio("ganesha-ext4", "raw-fdatasync", st)
print(json.dumps(out, indent=1))
EOF
