#!/usr/bin/env bash
# NFSv4.1 beside NFSv3, shoal beside NFS-Ganesha, one client for all: `shoal bench`
# (its own pipelined client, the same code for both protocols: a session per
# connection and COMPOUNDs of SEQUENCE + PUTFH + the operation over v4.1; READ/WRITE
# with the anonymous stateid, creates as OPEN+GETFH+CLOSE in one COMPOUND).
#
# Servers: shoal on a raidz2 of six files (recordsize 128K, compression off, ARC big
# enough for the file set) and Ganesha 'as users run it' (FSAL VFS on the ext4 this
# machine has, Protocols 3 and 4, minor versions 1 and 2), both on loopback.
# Tests on a file set that fits both servers' caches: cached 128K reads, 8K random
# reads, 128K streaming writes, a metadata loop (create, stat, remove of empty
# files) and a small-file loop (create a 4 KiB file on stable storage, stat it,
# open, read and close it, delete it: `--workload smallfiles`, where v4.1 sends the
# create as one OPEN+WRITE+CLOSE COMPOUND and the open as one OPEN+READ+CLOSE, and
# v3 sends CREATE+WRITE and READ), each over v3 and v4.1. Both loops run on two shoal datasets: the
# default (sync=standard: each create and remove is on stable storage when answered,
# as NFS promises) and one with sync=disabled, which promises what Ganesha gives (it
# answers creates and removes without any fsync: the host file system commits them
# later), so one pair compares equal guarantees. Ganesha serves both loops from a
# second export too, a tree of the same ext4 with synchronous directory updates
# (chattr +D, ext4's dirsync): its creates and removes are then on disk when
# answered, as shoal's at sync=standard, the other pair of equal guarantees. Those
# two loops also run on a third shoal pool, `s1disk`: one file on the same ext4
# (sync=standard), so shoal keeps one copy of each log block as ext4 keeps one journal:
# the raidz2 writes and flushes every log block on three of its six files, which on real
# disks run in parallel but here all land on this VM's one disk. shoal-1disk against
# ganesha-dirsync compares equal guarantees on equal redundancy. Reads from disk
# against the raw disk are bench/from-disk.sh's.
# Rounds are interleaved (every test, every server and version, then the next round)
# and figures are medians with their spread (min, max). Each run also records the
# server process's CPU seconds (/proc/PID/stat), so efficiency reads as CPU-seconds
# per GB or per 1,000 operations, which drifts far less on this VM than throughput.
#
#   BENCH_DIR=/work/bench-data REPEAT=3 SECONDS_RUN=8 bench/nfs4.sh > docs/bench/nfs4-DATE.json
# TESTS="metadata smallfiles" runs some tests only.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${BENCH_DIR:-/var/tmp/shoal-bench}/nfs4
REPEAT=${REPEAT:-3}
SECONDS_RUN=${SECONDS_RUN:-8}
SET_MIB=${SET_MIB:-512}
THREADS=${THREADS:-4}
. bench/lib.sh
need nfs-ganesha nfs-ganesha-vfs rpcbind
cargo build --release -q -p shoal
SHOAL=$PWD/target/release/shoal
export SHOAL_STATE_DIR="$DIR/state"
OUT=$(mktemp -d)
LOGS=${BENCH_LOGS:-$PWD/target/bench-logs/nfs4}
rm -rf "$LOGS" && mkdir -p "$LOGS"
SHOAL_PORT=20490
GANESHA_PORT=20590
GANESHA_MNT=20591
log() { echo "nfs4.sh: $*" >&2; }

cleanup() {
    [ -f "$OUT/shoal.pid" ] && kill -TERM "$(cat "$OUT/shoal.pid")" 2>/dev/null || true
    [ -f "$OUT/ganesha.pid" ] && kill "$(cat "$OUT/ganesha.pid")" 2>/dev/null || true
    sleep 1
    [ -f "$OUT/rpcbind.started" ] && pkill -x rpcbind || true
    cp "$OUT"/*.log "$OUT"/*.conf "$LOGS"/ 2>/dev/null || true
    rm -rf "$DIR" "$OUT"
}
trap cleanup EXIT
rm -rf "$DIR"
mkdir -p "$DIR/shoal" "$DIR/ext4" "$DIR/ext4-dirsync"
# The same ext4 with synchronous directory updates (chattr +D, inherited by what is
# made below it: ext4's dirsync for one tree): Ganesha's creates and removes are then
# on disk when answered, as shoal's at sync=standard.
chattr +D "$DIR/ext4-dirsync"

"$SHOAL" pool create --dir "$DIR/shoal" --size 2G sbench raidz2 a b c d e f >/dev/null
"$SHOAL" fs create sbench/fs -o recordsize=128K -o compression=off >/dev/null
"$SHOAL" fs create sbench/nosync -o recordsize=128K -o compression=off -o sync=disabled >/dev/null
"$SHOAL" pool create --dir "$DIR/shoal" --size 2G s1disk one >/dev/null
"$SHOAL" fs create s1disk/fs -o recordsize=128K -o compression=off >/dev/null
SHOAL_LOG=warn "$SHOAL" serve --listen 127.0.0.1:$SHOAL_PORT --api off --arc-max 2G \
    --share 'sbench/fs=127.0.0.1(rw,no_root_squash,insecure)' \
    --share 'sbench/nosync=127.0.0.1(rw,no_root_squash,insecure)' \
    --share 's1disk/fs=127.0.0.1(rw,no_root_squash,insecure)' 2>>"$OUT/shoal.log" &
echo $! > "$OUT/shoal.pid"

pgrep -x rpcbind >/dev/null || { rpcbind -w; touch "$OUT/rpcbind.started"; }
cat > "$OUT/ganesha.conf" <<EOF
NFS_CORE_PARAM {
    NFS_Port = $GANESHA_PORT; MNT_Port = $GANESHA_MNT; NLM_Port = 20592; Rquota_Port = 20593;
    Protocols = 3, 4; Enable_NLM = false; Enable_RQUOTA = false; Bind_addr = 127.0.0.1;
}
NFSV4 { Graceless = true; Minor_Versions = 1, 2; Delegations = true; }
EXPORT { Export_Id = 1; Path = $DIR/ext4; Pseudo = /ext4; Access_Type = RW; Squash = No_Root_Squash;
         SecType = sys; Protocols = 3, 4; Transports = TCP; Delegations = readwrite; FSAL { Name = VFS; } }
EXPORT { Export_Id = 2; Path = $DIR/ext4-dirsync; Pseudo = /ext4-dirsync; Access_Type = RW; Squash = No_Root_Squash;
         SecType = sys; Protocols = 3, 4; Transports = TCP; Delegations = readwrite; FSAL { Name = VFS; } }
EOF
ganesha.nfsd -F -L "$OUT/ganesha.log" -f "$OUT/ganesha.conf" -p "$OUT/ganesha.pid.unused" &
echo $! > "$OUT/ganesha.pid"
for port in $SHOAL_PORT $GANESHA_PORT; do
    for _ in $(seq 100); do ss -ltn | grep -q ":$port " && break; sleep 0.1; done
    ss -ltn | grep -q ":$port " || { log "a server did not start on $port"; cat "$OUT"/*.log >&2; exit 1; }
done

endpoint() { # SERVER VERSION -> shoal bench arguments
    case "$1" in
        shoal) echo "--server 127.0.0.1:$SHOAL_PORT --export /sbench/fs" ;;
        shoal-nosync) echo "--server 127.0.0.1:$SHOAL_PORT --export /sbench/nosync" ;;
        shoal-1disk) echo "--server 127.0.0.1:$SHOAL_PORT --export /s1disk/fs" ;;
        ganesha) if [ "$2" = 3 ]; then echo "--server 127.0.0.1:$GANESHA_PORT --mount-port $GANESHA_MNT --export $DIR/ext4";
                 else echo "--server 127.0.0.1:$GANESHA_PORT --export /ext4"; fi ;;
        ganesha-dirsync) if [ "$2" = 3 ]; then echo "--server 127.0.0.1:$GANESHA_PORT --mount-port $GANESHA_MNT --export $DIR/ext4-dirsync";
                 else echo "--server 127.0.0.1:$GANESHA_PORT --export /ext4-dirsync"; fi ;;
    esac
}
pid_of() { cat "$OUT/${1%%-*}.pid"; } # shoal-nosync, shoal-1disk -> shoal; ganesha-dirsync -> ganesha
cpu_s() { # PID -> user+system CPU seconds of the process so far
    awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"
}
FILES=8
FILE_SIZE=$(( SET_MIB / FILES ))M
run() { # SERVER VERSION TEST -> one JSON line
    local server=$1 version=$2 test=$3 args
    case "$test" in
        read_cached_128k) args="--workload read --io-size 128K --depth 8 --files $FILES --file-size $FILE_SIZE --duration ${SECONDS_RUN}s" ;;
        randread_8k) args="--workload randread --io-size 8K --depth 8 --files $FILES --file-size $FILE_SIZE --duration ${SECONDS_RUN}s" ;;
        write_128k) args="--workload write --io-size 128K --depth 8 --files $FILES --file-size $FILE_SIZE --dir shoal-bench-w --duration ${SECONDS_RUN}s" ;;
        metadata) args="--workload metadata --duration ${SECONDS_RUN}s" ;;
        smallfiles) args="--workload smallfiles --io-size 4K --duration ${SECONDS_RUN}s" ;;
    esac
    local pid before after proto=$version
    # 4.1d: NFSv4.1 with the client taking the delegations the server offers.
    [ "$version" = 4.1d ] && { proto=4.1; args="$args --delegations"; }
    pid=$(pid_of "$server")
    before=$(cpu_s "$pid")
    # shellcheck disable=SC2086
    "$SHOAL" bench run --json --nfs-version "$proto" --threads "$THREADS" $(endpoint "$server" "$version") $args \
        > "$OUT/run.json" 2>>"$OUT/bench.log" || { log "$server v$version $test failed"; tail -5 "$OUT/bench.log" >&2; }
    after=$(cpu_s "$pid")
    python3 - "$server" "$version" "$test" "$before" "$after" "$OUT/run.json" <<'PY'
import json, sys
server, version, test, before, after, path = sys.argv[1:]
try:
    a = json.load(open(path))["aggregate"]
    s = a["stonewall"]
    print(json.dumps({"server": server, "version": version, "test": test,
                      "mb_per_s": s["mb_per_s"], "iops": s["iops"], "errors": a["errors"],
                      "ops": a["ops"], "bytes": a["read_bytes"] + a["write_bytes"],
                      "delegated_ops": sum(v["ops"] for k, v in a["per_op"].items() if k.endswith("_delegated")),
                      "server_cpu_s": float(after) - float(before)}))
except Exception as e:
    print(json.dumps({"server": server, "version": version, "test": test, "error": str(e)}))
PY
}

# Prepare the file sets (and warm both servers' caches) once per server and version.
for server in shoal ganesha; do
    for version in 3 4.1; do
        # shellcheck disable=SC2086
        "$SHOAL" bench run --nfs-version "$version" --threads "$THREADS" $(endpoint "$server" "$version") \
            --workload read --files $FILES --file-size "$FILE_SIZE" >/dev/null 2>>"$OUT/bench.log"
    done
done

TESTS=${TESTS:-"read_cached_128k randread_8k write_128k metadata smallfiles"}
for round in $(seq "$REPEAT"); do
    log "round $round of $REPEAT"
    for test in $TESTS; do
        servers="shoal ganesha"
        case "$test" in metadata|smallfiles) servers="shoal shoal-nosync shoal-1disk ganesha ganesha-dirsync" ;; esac
        for server in $servers; do
            versions="3 4.1"
            [ "$test" = smallfiles ] && versions="3 4.1 4.1d"
            for version in $versions; do
                run "$server" "$version" "$test" | tee -a "$OUT/results.jsonl" >&2
            done
        done
    done
done

python3 - "$OUT/results.jsonl" "$REPEAT" "$SECONDS_RUN" "$SET_MIB" "$THREADS" "$(git rev-parse --short HEAD)" <<'PY'
import json, statistics, sys, datetime
path, repeat, seconds, set_mib, threads, commit = sys.argv[1:]
rows = [json.loads(l) for l in open(path)]
def series(server, version, test, key):
    return [r[key] for r in rows if r["server"] == server and r["version"] == version
            and r["test"] == test and "error" not in r]
def summary(v):
    return {"median": statistics.median(v), "min": min(v), "max": max(v), "n": len(v)} if v else None
figures = {}
for r in rows:
    k = f'{r["server"]} v{r["version"]} {r["test"]}'
    if k in figures:
        continue
    s, v, t = r["server"], r["version"], r["test"]
    mbps, iops = series(s, v, t, "mb_per_s"), series(s, v, t, "iops")
    cpu, ops, byts = series(s, v, t, "server_cpu_s"), series(s, v, t, "ops"), series(s, v, t, "bytes")
    figures[k] = {
        "mb_per_s": summary(mbps), "iops": summary(iops),
        "server_cpu_s_per_gb": summary([c / (b / 1e9) for c, b in zip(cpu, byts) if b]),
        "server_cpu_s_per_1000_ops": summary([c / (o / 1e3) for c, o in zip(cpu, ops) if o]),
        "errors": sum(series(s, v, t, "errors")),
        "delegated_ops": summary(series(s, v, t, "delegated_ops")),
    }
def med(k, key):
    f = figures.get(k, {}).get(key)
    return f["median"] if f else None
def ratio(a, b, key):
    x, y = med(a, key), med(b, key)
    return round(x / y, 3) if x and y else None
ratios = {}
for t, key in [("read_cached_128k", "mb_per_s"), ("randread_8k", "iops"), ("write_128k", "mb_per_s"), ("metadata", "iops"), ("smallfiles", "iops")]:
    ratios[f"{t}: shoal v4.1 / shoal v3"] = ratio(f"shoal v4.1 {t}", f"shoal v3 {t}", key)
    ratios[f"{t}: shoal v4.1 / ganesha v4.1"] = ratio(f"shoal v4.1 {t}", f"ganesha v4.1 {t}", key)
    ratios[f"{t}: ganesha v4.1 / ganesha v3"] = ratio(f"ganesha v4.1 {t}", f"ganesha v3 {t}", key)
ratios["metadata: shoal-nosync v4.1 / shoal-nosync v3"] = ratio("shoal-nosync v4.1 metadata", "shoal-nosync v3 metadata", "iops")
ratios["metadata: shoal-nosync v4.1 / ganesha v4.1"] = ratio("shoal-nosync v4.1 metadata", "ganesha v4.1 metadata", "iops")
ratios["smallfiles: shoal-nosync v4.1 / shoal-nosync v3"] = ratio("shoal-nosync v4.1 smallfiles", "shoal-nosync v3 smallfiles", "iops")
ratios["smallfiles: shoal-nosync v4.1 / ganesha v4.1"] = ratio("shoal-nosync v4.1 smallfiles", "ganesha v4.1 smallfiles", "iops")
for s in ("shoal", "shoal-1disk", "shoal-nosync", "ganesha", "ganesha-dirsync"):
    ratios[f"smallfiles: {s} v4.1 with delegations / own v4.1"] = ratio(f"{s} v4.1d smallfiles", f"{s} v4.1 smallfiles", "iops")
ratios["smallfiles: shoal v4.1 with delegations / shoal v3"] = ratio("shoal v4.1d smallfiles", "shoal v3 smallfiles", "iops")
ratios["smallfiles: shoal-1disk v4.1 with delegations / shoal-1disk v3"] = ratio("shoal-1disk v4.1d smallfiles", "shoal-1disk v3 smallfiles", "iops")
for s in ("shoal", "shoal-1disk"):
    ratios[f"smallfiles: {s} v4.1 with delegations / ganesha-dirsync v4.1 with delegations"] = ratio(f"{s} v4.1d smallfiles", "ganesha-dirsync v4.1d smallfiles", "iops")
    ratios[f"smallfiles: {s} v4.1 with delegations / ganesha-dirsync v4.1"] = ratio(f"{s} v4.1d smallfiles", "ganesha-dirsync v4.1 smallfiles", "iops")
for t in ("metadata", "smallfiles"):
    ratios[f"{t}: shoal v4.1 / ganesha-dirsync v4.1"] = ratio(f"shoal v4.1 {t}", f"ganesha-dirsync v4.1 {t}", "iops")
    ratios[f"{t}: shoal-1disk v4.1 / ganesha-dirsync v4.1"] = ratio(f"shoal-1disk v4.1 {t}", f"ganesha-dirsync v4.1 {t}", "iops")
    ratios[f"{t}: shoal-1disk v4.1 / shoal-1disk v3"] = ratio(f"shoal-1disk v4.1 {t}", f"shoal-1disk v3 {t}", "iops")
print(json.dumps({
    "benchmark": "bench/nfs4.sh", "date": datetime.date.today().isoformat(), "commit": commit,
    "setup": {"rounds": int(repeat), "seconds_per_run": int(seconds), "set_mib": int(set_mib),
              "threads": int(threads), "depth": 8, "client": "shoal bench (one process, loopback)",
              "shoal": "raidz2 of six files, recordsize 128K, compression off, ARC 2G; shoal-1disk: a pool of one file on the same ext4",
              "ganesha": "FSAL VFS on ext4, Protocols 3 and 4, Minor_Versions 1, 2, Delegations on (NFSV4 and per export, readwrite)",
              "v4.1d": "NFSv4.1 with the client taking delegations (shoal bench --delegations): the connection is the back channel; under a write delegation the stat and open/read/close of the file it just wrote are answered by the client (delegated_ops counts them)"},
    "targets (issue 23)": {"read cached >= 1.2x ganesha": ratios["read_cached_128k: shoal v4.1 / ganesha v4.1"],
                           "randread 8K >= 1.5x ganesha": ratios["randread_8k: shoal v4.1 / ganesha v4.1"],
                           "metadata >= 1.0x own v3 (sync=standard)": ratios["metadata: shoal v4.1 / shoal v3"],
                           "metadata >= 1.0x own v3 (sync=disabled)": ratios["metadata: shoal-nosync v4.1 / shoal-nosync v3"],
                           "metadata >= 1.5x ganesha v4.1 (equal guarantees: shoal sync=disabled)": ratios["metadata: shoal-nosync v4.1 / ganesha v4.1"],
                           "metadata, shoal durable (sync=standard) / ganesha v4.1 (not durable)": ratios["metadata: shoal v4.1 / ganesha v4.1"],
                           "small files (create/stat/open/read/close/delete) >= 1.0x own v3 (sync=standard)": ratios["smallfiles: shoal v4.1 / shoal v3"],
                           "small files >= 1.0x own v3 (sync=disabled)": ratios["smallfiles: shoal-nosync v4.1 / shoal-nosync v3"],
                           "small files >= 1.5x ganesha v4.1 (shoal sync=standard: creates, data and removes durable; ganesha: data durable by FILE_SYNC, removes not)": ratios["smallfiles: shoal v4.1 / ganesha v4.1"],
                           "small files, shoal sync=disabled / ganesha v4.1": ratios["smallfiles: shoal-nosync v4.1 / ganesha v4.1"],
                           "small files >= 1.5x ganesha v4.1 (equal guarantees: shoal sync=standard, ganesha on ext4 with synchronous directories)": ratios["smallfiles: shoal v4.1 / ganesha-dirsync v4.1"],
                           "metadata >= 1.5x ganesha v4.1 (equal guarantees: shoal sync=standard, ganesha on ext4 with synchronous directories)": ratios["metadata: shoal v4.1 / ganesha-dirsync v4.1"],
                           "small files >= 1.5x ganesha v4.1 (equal guarantees, equal redundancy: shoal sync=standard on one file, ganesha-dirsync on the same ext4)": ratios["smallfiles: shoal-1disk v4.1 / ganesha-dirsync v4.1"],
                           "small files with delegations >= 1.5x ganesha v4.1 with delegations (equal guarantees, equal redundancy)": ratios["smallfiles: shoal-1disk v4.1 with delegations / ganesha-dirsync v4.1 with delegations"],
                           "small files with delegations >= 1.5x ganesha v4.1 with delegations (equal guarantees; shoal on raidz2 of six)": ratios["smallfiles: shoal v4.1 with delegations / ganesha-dirsync v4.1 with delegations"],
                           "small files with delegations >= 1.0x own v3 (sync=standard)": ratios["smallfiles: shoal v4.1 with delegations / shoal v3"],
                           "metadata >= 1.5x ganesha v4.1 (equal guarantees, equal redundancy: shoal sync=standard on one file, ganesha-dirsync on the same ext4)": ratios["metadata: shoal-1disk v4.1 / ganesha-dirsync v4.1"]},
    "ratios": ratios, "figures": figures, "runs": rows}, indent=1))
PY
