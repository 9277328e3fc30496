#!/usr/bin/env bash
# NFSv3 benchmark: `shoal serve` against NFS-Ganesha (Debian, FSAL VFS) exporting
# (a) an ext4 directory on the same disk and (b) a zfs-fuse raidz2 pool of the same
# layout as shoal's (6 file devices, recordsize 128K, compression off), in one run,
# with the same clients: the project's pipelined client (bench/nfs-bench, 1 and 8
# streams) and libnfs's nfs-cp/nfs-cat. Prints one JSON object: every figure and the
# ratios the NFS issue names. shoal's 8K FILE_SYNC writes also run on 8K-record
# filesystems (`shoal-db`, `shoal-log-db`), as a database share would be set up. A
# benchmark, never a test. Needs root (rpcbind for Ganesha, dropping caches, zfs-fuse,
# the disk's read-ahead).
#
# Fair by construction, figure by figure:
# - every figure carries the CPU the server spent on it (utime+stime from /proc of the
#   server's processes: shoal; Ganesha; Ganesha plus zfs-fuse), as seconds per GB
#   moved and microseconds per call: it drifts far less than throughput on this VM.
#   A kernel file system's writeback threads are nobody's process, so each figure
#   also has the host's CPU over the run less the client's own (`host_cpu_...`):
#   server, kernel threads and interrupts, the same account for every server;
# - reads from disk are proved so: the disk's own sectors read (/proc/diskstats)
#   against the bytes the client read, for every server, and for shoal its device
#   counters from the API (on, as users run it) and whether its devices ran O_DIRECT;
# - Ganesha on ext4 reads from disk twice a round: at the disk's read-ahead as found
#   (`ganesha-ext4`) and at RA_OTHER_KB (`ganesha-ext4-ra`): 8 MiB, as a user tuning a
#   streaming server would set it, where the disk came with less, else the kernel's
#   usual 128 KiB (shoal reads ahead on its own, up to 32 MiB). The two alternate
#   which goes first from round to round, as the host may cache what was just read;
# - 8K FILE_SYNC writes go, for every server and every shoal variant, into files of
#   SYNC_FILE_MIB written in full beforehand by the same client and left to settle,
#   in REPEAT interleaved rounds, each round also timing the raw disk's 8K
#   O_DIRECT write+fdatasync rate (fio) at the same number of writers: the physical
#   limit. Every repeated figure is a median with each run's value beside it.
#
#   bench/nfs.sh                                   # 4 GiB per test under target/bench-data
#   BENCH_DIR=/work/bench-data TOTAL_MIB=2048 SECONDS_RUN=10 REPEAT=3 bench/nfs.sh
#   SERVERS="shoal ganesha-ext4" bench/nfs.sh       # a subset of shoal ganesha-ext4 ganesha-zfs
#
# "From disk" means the server restarted (shoal: empty ARC; zfs-fuse: pool re-imported)
# and the kernel's caches dropped before the read; "cached" is the same read again.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${BENCH_DIR:-$PWD/target/bench-data}/nfs
TOTAL_MIB=${TOTAL_MIB:-4096}
SECONDS_RUN=${SECONDS_RUN:-10}
SERVERS=${SERVERS:-shoal ganesha-ext4 ganesha-zfs}
REPEAT=${REPEAT:-3}
# Each stream count's sync-write files, all streams together.
SYNC_FILE_MIB=${SYNC_FILE_MIB:-64}
# shoal's ARC is bounded below the data so "from disk" reads are (the issue's "data
# larger than the ARC"); cached reads and random reads use the first CACHED_MIB of the
# files, which fits every server's cache.
ARC_MIB=${ARC_MIB:-1024}
CACHED_MIB=${CACHED_MIB:-$(( ARC_MIB / 2 ))}
# Each cached read goes over those files this many times, so it moves as much as a read
# from disk does (one pass of 512 MiB lasted a fifth of a second on 8 streams).
CACHED_PASSES=${CACHED_PASSES:-$(( (TOTAL_MIB + CACHED_MIB - 1) / CACHED_MIB ))}
DEV_MIB=${DEV_MIB:-$(( TOTAL_MIB * 6 / 4 / 6 + 1024 ))}
. bench/lib.sh
need nfs-ganesha nfs-ganesha-vfs rpcbind libnfs-utils fio
need_zfs_fuse
cargo build --release -q -p shoal -p nfs-bench
SHOAL=$PWD/target/release/shoal
NB=$PWD/target/release/nfs-bench
export SHOAL_STATE_DIR="$DIR/state"
OUT=$(mktemp -d)
# Logs (servers, nfs-bench's stderr) outlive the run here.
LOGS=${BENCH_LOGS:-$PWD/target/bench-logs/nfs}
rm -rf "$LOGS" && mkdir -p "$LOGS"
SHOAL_PORT=20490
SHOAL_API=127.0.0.1:20480
GANESHA_PORT=20590
GANESHA_MNT=20591
HZ=$(getconf CLK_TCK)

stop_shoal() { [ -f "$OUT/shoal.pid" ] && kill -TERM "$(cat "$OUT/shoal.pid")" 2>/dev/null && while kill -0 "$(cat "$OUT/shoal.pid")" 2>/dev/null; do sleep 0.1; done; rm -f "$OUT/shoal.pid"; }
stop_ganesha() { [ -f "$OUT/ganesha.pid" ] && kill "$(cat "$OUT/ganesha.pid")" 2>/dev/null && while kill -0 "$(cat "$OUT/ganesha.pid")" 2>/dev/null; do sleep 0.1; done; rm -f "$OUT/ganesha.pid"; }
stop_zfs() {
    zpool export zbench 2>/dev/null || true
    # A new zfs-fuse cannot start while the old one still holds its socket.
    [ -f "$OUT/zfs.pid" ] && kill "$(cat "$OUT/zfs.pid")" 2>/dev/null && while kill -0 "$(cat "$OUT/zfs.pid")" 2>/dev/null; do sleep 0.1; done
    rm -f "$OUT/zfs.pid"
}
cleanup() {
    # A run that stops early still shows what it measured.
    [ -s "$OUT/results.jsonl" ] && [ ! -f "$OUT/done" ] && { log "partial results:"; cat "$OUT/results.jsonl" >&2; }
    stop_shoal || true
    stop_ganesha || true
    zpool destroy -f zbench 2>/dev/null || true
    stop_zfs || true
    [ -f "$OUT/rpcbind.started" ] && pkill -x rpcbind || true
    [ -n "${RA_FILE:-}" ] && echo "$RA_DEFAULT" > "$RA_FILE" || true
    cp "$OUT"/*.log "$OUT"/*.err "$OUT"/*.conf "$LOGS"/ 2>/dev/null || true
    rm -rf "$DIR" "$OUT"
    remove_zfs_fuse_if_installed
}
trap cleanup EXIT
rm -rf "$DIR"
mkdir -p "$DIR"
log() { echo "nfs.sh: $*" >&2; }
# The disk under DIR (its whole-disk queue when DIR is on a partition): its read-ahead
# for Ganesha's tuned runs, its sectors read to prove "from disk".
DISK=$(basename "$(findmnt -no SOURCE -T "$DIR")")
[ -e "/sys/class/block/$DISK/queue" ] || DISK=$(basename "$(readlink -f "/sys/class/block/$DISK/..")")
RA_FILE=/sys/class/block/$DISK/queue/read_ahead_kb
if [ -w "$RA_FILE" ]; then RA_DEFAULT=$(cat "$RA_FILE"); else log "no read-ahead setting for $DIR's disk: ganesha-ext4-ra left out"; RA_FILE=; fi
if [ -z "${RA_OTHER_KB:-}" ]; then
    if [ "${RA_DEFAULT:-0}" -lt 8192 ]; then RA_OTHER_KB=8192; else RA_OTHER_KB=128; fi
fi
host_busy_ticks() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }
disk_read_bytes() { awk -v d="$DISK" '$3 == d { printf "%.0f\n", $6 * 512 }' /proc/diskstats; }
# Every server's files exist at once (about 5x TOTAL_MIB: shoal's and zfs-fuse's with
# RAID-Z2 parity, ext4's, the raw-disk file), and libnfs's round trip keeps two copies
# under $OUT: a disk that fills up mid-run fails a server's writes and leaves its
# figures out, so check first.
free_mib() { df -Pm "$1" | awk 'NR == 2 { print $4 }'; }
need_dir=$(( TOTAL_MIB * 5 )); need_out=$(( TOTAL_MIB * 2 ))
if [ "$(stat -c %d "$DIR")" = "$(stat -c %d "$OUT")" ]; then
    need_dir=$(( TOTAL_MIB * 6 )); need_out=0 # one file system: the libnfs copies come when the ext4 and raw files are gone
fi
if [ "$(free_mib "$DIR")" -lt "$need_dir" ] || [ "$(free_mib "$OUT")" -lt "$need_out" ]; then
    log "needs $need_dir MiB free under $DIR (has $(free_mib "$DIR")) and $need_out MiB under $OUT (has $(free_mib "$OUT")); lower TOTAL_MIB or set BENCH_DIR"
    exit 1
fi

# The disk of a shared machine is noisy (the same fio job varies by 2x from one run to
# the next), so each read figure is the median of REPEAT runs.
median() { # [KEY] one JSON result a line on stdin -> the median run by KEY (default
    # mb_per_s), with every run's KEY and server CPU beside it
    python3 -c '
import json, sys
key = sys.argv[1]
runs = [json.loads(l) for l in sys.stdin if l.strip()]
ok = sorted((r for r in runs if key in r), key=lambda r: r[key])
if not ok:
    print(json.dumps(runs[-1] if runs else {"error": "no run"}))
    sys.exit()
m = dict(ok[len(ok) // 2])
m["runs_" + key] = [round(r[key], 1) for r in ok]
for k in ("server_cpu_s_per_gb", "server_cpu_us_per_op", "host_cpu_less_client_s_per_gb", "host_cpu_less_client_us_per_op"):
    if all(k in r for r in ok):
        m["runs_" + k] = sorted(r[k] for r in ok)
m["failed_runs"] = len(runs) - len(ok)
print(json.dumps(m))' "${1:-mb_per_s}"
}

# --- the raw disk, for the "85% of the raw read rate" target: the file system's own
# file read with O_DIRECT, 1 MiB requests, 32 in flight (the best this disk gives). It
# is read once in every from-disk round below, beside the servers. ---
fio --name=raw --filename="$DIR/raw" --size="${TOTAL_MIB}M" --rw=write --bs=1M --direct=1 \
    --ioengine=psync --output-format=json > /dev/null
raw_read() {
    drop_caches
    fio --name=raw --filename="$DIR/raw" --size="${TOTAL_MIB}M" --rw=read --bs=1M --direct=1 \
        --ioengine=libaio --iodepth=32 --output-format=json \
        | python3 -c 'import json,sys; print(json.dumps({"mb_per_s": json.load(sys.stdin)["jobs"][0]["read"]["bw_bytes"]/1e6}))'
}

# --- shoal: two pools, raidz2 of six files, one with a log device ---
mkdir -p "$DIR/shoal"
"$SHOAL" pool create --dir "$DIR/shoal" --size "${DEV_MIB}M" sbench raidz2 a b c d e f >/dev/null
"$SHOAL" pool create --dir "$DIR/shoal" --size "${DEV_MIB}M" slog raidz2 g h i j k l log m >/dev/null
make_shoal_filesystems() {
    for p in sbench slog; do
        "$SHOAL" fs create "$p/fs" -o recordsize=128K -o compression=off >/dev/null
        # What a database share gets: records the size of its writes (8K FILE_SYNC
        # writes into 128K records rewrite 128K at every txg, as on ZFS).
        "$SHOAL" fs create "$p/db" -o recordsize=8K -o compression=off >/dev/null
    done
}
make_shoal_filesystems
start_shoal() {
    SHOAL_LOG=warn "$SHOAL" serve --listen 127.0.0.1:$SHOAL_PORT --api "$SHOAL_API" --arc-max "${ARC_MIB}M" \
        --share 'sbench/fs=127.0.0.1(rw,no_root_squash,insecure)' \
        --share 'slog/fs=127.0.0.1(rw,no_root_squash,insecure)' \
        --share 'sbench/db=127.0.0.1(rw,no_root_squash,insecure)' \
        --share 'slog/db=127.0.0.1(rw,no_root_squash,insecure)' 2>>"$OUT/shoal.log" &
    echo $! > "$OUT/shoal.pid"
    for _ in $(seq 100); do
        ss -ltn | grep -q ":$SHOAL_PORT " && ss -ltn | grep -q " $SHOAL_API " && return; sleep 0.1
    done
    log "shoal did not start"; cat "$OUT/shoal.log" >&2; exit 1
}
shoal_read_bytes() { # "device-bytes nfs-bytes" read so far, from shoal's API
    curl -sf "http://$SHOAL_API/metrics" | awk '
        /^shoal_device_bytes_total\{.*op="read"/ { d += $NF }
        /^shoal_nfs_payload_bytes_total\{.*op="read"/ { n += $NF }
        END { printf "%.0f %.0f\n", d, n }'
}

# --- zfs-fuse: the same layout ---
mkdir -p "$DIR/zfs" "$DIR/zfs-mnt"
start_zfs() {
    zfs-fuse --no-kstat-mount -p "$OUT/zfs.pid" || { log "zfs-fuse did not start"; exit 1; }
    for _ in $(seq 50); do zpool list >/dev/null 2>&1 && return; sleep 0.2; done
}
start_zfs
for d in a b c d e f; do truncate -s "${DEV_MIB}M" "$DIR/zfs/$d"; done
zpool create -f -m "$DIR/zfs-mnt" zbench raidz2 "$DIR"/zfs/{a,b,c,d,e,f}
zfs set recordsize=128K zbench
zfs set compression=off zbench

# --- Ganesha: VFS exports of the ext4 directory and of the zfs-fuse mount ---
mkdir -p "$DIR/ext4"
pgrep -x rpcbind >/dev/null || { rpcbind -w; touch "$OUT/rpcbind.started"; }
ganesha_v3_conf $GANESHA_PORT $GANESHA_MNT "$DIR/ext4" "$DIR/zfs-mnt" > "$OUT/ganesha.conf"
start_ganesha() {
    ganesha.nfsd -F -L "$OUT/ganesha.log" -f "$OUT/ganesha.conf" -p "$OUT/ganesha.pid.unused" &
    echo $! > "$OUT/ganesha.pid"
    for _ in $(seq 100); do ss -ltn | grep -q ":$GANESHA_PORT " && return; sleep 0.1; done
    log "ganesha did not start"; cat "$OUT/ganesha.log" >&2; exit 1
}

# restart_for_disk SERVER: whatever makes the next read come from the disk.
restart_for_disk() {
    case $1 in
        shoal*) stop_shoal; drop_caches; start_shoal ;;
        ganesha-ext4*) drop_caches ;;
        ganesha-zfs) stop_ganesha; stop_zfs; drop_caches; start_zfs
                     zpool import -d "$DIR/zfs" zbench || log "zfs-fuse: re-importing zbench failed"
                     start_ganesha ;;
    esac
}
endpoint() { # SERVER -> "nfs-bench arguments"
    case $1 in
        shoal) echo "--server 127.0.0.1:$SHOAL_PORT --export /sbench/fs" ;;
        shoal-log) echo "--server 127.0.0.1:$SHOAL_PORT --export /slog/fs" ;;
        shoal-db) echo "--server 127.0.0.1:$SHOAL_PORT --export /sbench/db" ;;
        shoal-log-db) echo "--server 127.0.0.1:$SHOAL_PORT --export /slog/db" ;;
        ganesha-ext4*) echo "--server 127.0.0.1:$GANESHA_PORT --mount-port $GANESHA_MNT --export $DIR/ext4" ;;
        ganesha-zfs) echo "--server 127.0.0.1:$GANESHA_PORT --mount-port $GANESHA_MNT --export $DIR/zfs-mnt" ;;
    esac
}
server_pids() { # SERVER -> the processes whose CPU is the server's
    case $1 in
        shoal*) cat "$OUT/shoal.pid" ;;
        ganesha-ext4*) cat "$OUT/ganesha.pid" ;;
        ganesha-zfs) cat "$OUT/ganesha.pid" "$OUT/zfs.pid" ;;
    esac
}
cpu_ticks() { # SERVER -> utime+stime of its processes, in clock ticks
    local t=0 p
    for p in $(server_pids "$1"); do t=$(( t + $(awk '{ print $14 + $15 }' "/proc/$p/stat") )); done
    echo $t
}
url() { # SERVER FILE -> libnfs URL
    case $1 in
        shoal) echo "nfs://127.0.0.1/sbench/fs/$2?version=3&nfsport=$SHOAL_PORT&mountport=$SHOAL_PORT" ;;
        ganesha-ext4) echo "nfs://127.0.0.1$DIR/ext4/$2?version=3&nfsport=$GANESHA_PORT&mountport=$GANESHA_MNT" ;;
        ganesha-zfs) echo "nfs://127.0.0.1$DIR/zfs-mnt/$2?version=3&nfsport=$GANESHA_PORT&mountport=$GANESHA_MNT" ;;
    esac
}
nb() { # SERVER TEST STREAMS [--file-mib TOTAL] extra... -> JSON
    local server=$1 test=$2 streams=$3 mib=$TOTAL_MIB
    shift 3
    [ "${1:-}" = --file-mib ] && { mib=$2; shift 2; }
    # A server that cannot run a test gets an error entry (with nfs-bench's last
    # words), and the run goes on.
    local t0 t1 h0 h1 r
    t0=$(cpu_ticks "$server")
    h0=$(host_busy_ticks)
    # shellcheck disable=SC2046
    r=$("$NB" $(endpoint "$server") --test "$test" --streams "$streams" \
        --file-mib $(( mib / streams )) --seconds "$SECONDS_RUN" "$@" 2>"$OUT/nb.last.err") \
        || r=$(python3 -c 'import json,sys; print(json.dumps({"error": f"nfs-bench {sys.argv[1]} failed against {sys.argv[2]}", "stderr": open(sys.argv[3]).read()[-600:]}))' "$test" "$server" "$OUT/nb.last.err")
    t1=$(cpu_ticks "$server")
    h1=$(host_busy_ticks)
    { echo "== $server $test $streams streams"; cat "$OUT/nb.last.err"; } >> "$OUT/nb.err"
    python3 -c '
import json, sys
r = json.loads(sys.argv[1])
hz = int(sys.argv[4])
cpu = (int(sys.argv[3]) - int(sys.argv[2])) / hz
host = (int(sys.argv[6]) - int(sys.argv[5])) / hz - r.get("client_cpu_s", 0)
if r.get("calls"):
    r["server_cpu_s"] = round(cpu, 2)
    r["server_cpu_us_per_op"] = round(cpu / r["calls"] * 1e6, 1)
    r["server_cpu_s_per_gb"] = round(cpu / (r["bytes"] / 1e9), 3)
    r["host_cpu_less_client_s_per_gb"] = round(host / (r["bytes"] / 1e9), 3)
    r["host_cpu_less_client_us_per_op"] = round(host / r["calls"] * 1e6, 1)
print(json.dumps(r))' "$r" "$t0" "$t1" "$HZ" "$h0" "$h1"
}
# read_from_disk SERVER STREAMS: one read of the files just after restart_for_disk,
# with the proof that the disk served it: its sectors read per byte the client read
# (1.0 or more when every byte came from the disk; parity can add) and, for shoal,
# its own device counters and I/O mode.
read_from_disk() {
    local server=$1 streams=$2 d0 d1 s0 s1 r
    d0=$(disk_read_bytes)
    case $server in shoal*) s0=$(shoal_read_bytes) ;; *) s0="0 0" ;; esac
    r=$(nb "$server" read "$streams" --block 131072 --depth 16)
    d1=$(disk_read_bytes)
    case $server in shoal*) sleep 2; s1=$(shoal_read_bytes) ;; *) s1="0 0" ;; esac
    python3 -c '
import json, sys
r = json.loads(sys.argv[1])
d0, d1 = int(sys.argv[2]), int(sys.argv[3])
s0, s1 = [int(x) for x in sys.argv[4].split()], [int(x) for x in sys.argv[5].split()]
if r.get("bytes"):
    r["disk_bytes_read_per_byte"] = round((d1 - d0) / r["bytes"], 3)
    if s1[1] > s0[1]:
        r["shoal_device_bytes_per_nfs_byte"] = round((s1[0] - s0[0]) / (s1[1] - s0[1]), 3)
        r["shoal_io_modes"] = sys.argv[6].split()
print(json.dumps(r))' "$r" "$d0" "$d1" "$s0" "$s1" "${SHOAL_IO_MODES:-}"
}
remove_files() { # SERVER: delete what nfs-bench made, through the server
    nb "$1" remove 8 >/dev/null
}

start_shoal
start_ganesha
# How shoal's devices do I/O (direct, or buffered where the file system refuses
# O_DIRECT), recorded with every read from disk.
SHOAL_IO_MODES=$(curl -sf "http://$SHOAL_API/api/v1/pools/sbench" | grep -o '"io_mode": *"[a-z]*"' | sed 's/.*"\([a-z]*\)"$/\1/' | sort | uniq -c | awk '{ printf "%s:%s ", $2, $1 }')
log "shoal's devices: $SHOAL_IO_MODES"
RESULTS="$OUT/results.jsonl"
: > "$RESULTS"
record() { echo "{\"server\": \"$1\", \"what\": \"$2\", \"result\": $3}" >> "$RESULTS"; }
# Every server's from-disk reads; Ganesha on ext4 also at the tuned read-ahead.
DISK_SERVERS=""
for server in $SERVERS; do
    DISK_SERVERS="$DISK_SERVERS $server"
    [ "$server" = ganesha-ext4 ] && [ -n "$RA_FILE" ] && DISK_SERVERS="$DISK_SERVERS ganesha-ext4-ra"
done
# Every system that takes sync writes: shoal in its four set-ups.
SYNC_SYSTEMS=""
for server in $SERVERS; do
    case $server in
        shoal) SYNC_SYSTEMS="$SYNC_SYSTEMS shoal shoal-log shoal-db shoal-log-db" ;;
        *) SYNC_SYSTEMS="$SYNC_SYSTEMS $server" ;;
    esac
done

for streams in 1 8; do
    for server in $SERVERS; do
        log "$server, $streams streams: write"
        record "$server" "write_128k_s$streams" "$(nb "$server" write "$streams" --block 131072 --depth 16)"
    done
    # From disk, in REPEAT rounds: each round reads the raw disk and then every server
    # once, so the disk's drift over the run (2x between runs here) falls on all of them
    # alike. Line k of each file is round k; the ratios below are per round.
    for round in $(seq "$REPEAT"); do
        log "from disk, $streams streams, round $round of $REPEAT"
        raw_read >> "$OUT/disk.raw.s$streams"
        order=$DISK_SERVERS
        [ $(( round % 2 )) = 0 ] && order=$(echo "$DISK_SERVERS" | sed 's/ganesha-ext4 ganesha-ext4-ra/ganesha-ext4-ra ganesha-ext4/')
        for server in $order; do
            restart_for_disk "$server" >&2
            [ -n "$RA_FILE" ] && case $server in
                ganesha-ext4-ra) echo "$RA_OTHER_KB" > "$RA_FILE" ;;
                *) echo "$RA_DEFAULT" > "$RA_FILE" ;;
            esac
            read_from_disk "$server" "$streams" >> "$OUT/disk.$server.s$streams"
        done
        [ -n "$RA_FILE" ] && echo "$RA_DEFAULT" > "$RA_FILE"
    done
    record raw "read_disk_1m_s$streams" "$(median < "$OUT/disk.raw.s$streams")"
    for server in $DISK_SERVERS; do
        record "$server" "read_disk_128k_s$streams" "$(median < "$OUT/disk.$server.s$streams")"
    done
    for server in $SERVERS; do
        log "$server, $streams streams: cached and random reads"
        nb "$server" read "$streams" --file-mib "$CACHED_MIB" --block 131072 --depth 16 >/dev/null # warm
        record "$server" "read_cached_128k_s$streams" "$(for _ in $(seq "$REPEAT"); do
            nb "$server" read "$streams" --file-mib "$CACHED_MIB" --block 131072 --depth 16 \
                --passes "$CACHED_PASSES"; done | median)"
        record "$server" "randread_8k_cached_s$streams" "$(for _ in $(seq "$REPEAT"); do
            nb "$server" randread "$streams" --file-mib "$CACHED_MIB" --block 8192 --depth 32; done | median iops)"
    done
    # 8K FILE_SYNC writes into files every system holds already, in full.
    for sys in $SYNC_SYSTEMS; do
        nb "$sys" write "$streams" --file-mib "$SYNC_FILE_MIB" --block 131072 --depth 16 --name nfs-sync >/dev/null
    done
    sleep 12 # every server has written its dirty data
    mkdir -p "$DIR/fio"
    for round in $(seq "$REPEAT"); do
        log "8K sync writes, $streams streams, round $round of $REPEAT"
        fio --name=raw --directory="$DIR/fio" --size=$(( SYNC_FILE_MIB / streams ))m --bs=8k --rw=randwrite \
            --ioengine=psync --direct=1 --fdatasync=1 --numjobs="$streams" --time_based \
            --runtime="$SECONDS_RUN" --group_reporting --output-format=json 2>/dev/null \
            | python3 -c 'import json,sys; w=json.load(sys.stdin)["jobs"][0]["write"]; print(json.dumps({"iops": w["iops"]}))' \
            >> "$OUT/sync.raw.s$streams"
        for sys in $SYNC_SYSTEMS; do
            nb "$sys" syncwrite "$streams" --file-mib "$SYNC_FILE_MIB" --block 8192 --depth 1 --name nfs-sync \
                >> "$OUT/sync.$sys.s$streams"
        done
    done
    rm -rf "$DIR/fio"
    record raw-fdatasync "syncwrite_8k_s$streams" "$(median iops < "$OUT/sync.raw.s$streams")"
    for sys in $SYNC_SYSTEMS; do
        record "$sys" "syncwrite_8k_s$streams" "$(median iops < "$OUT/sync.$sys.s$streams")"
    done
    for server in $SERVERS; do
        case $server in
            shoal) stop_shoal
                   for fs in sbench/fs sbench/db slog/fs slog/db; do "$SHOAL" fs destroy "$fs" >/dev/null; done
                   make_shoal_filesystems
                   start_shoal ;;
            *) remove_files "$server"; nb "$server" remove 8 --name nfs-sync >/dev/null ;;
        esac
    done
done
rm -f "$DIR/raw"
for server in $SERVERS; do
    # libnfs's own client, one stream: nfs-cp up, then nfs-cat back from disk.
    log "$server, libnfs"
    echo "== $server" >> "$OUT/libnfs.err"
    head -c $(( TOTAL_MIB << 20 )) /dev/urandom > "$OUT/libnfs-file"
    # Their complaints go to libnfs.err, kept with the logs.
    t0=$(date +%s.%N); nfs-cp "$OUT/libnfs-file" "$(url "$server" libnfs-file)" >/dev/null 2>>"$OUT/libnfs.err" || true; t1=$(date +%s.%N)
    restart_for_disk "$server"
    t2=$(date +%s.%N); nfs-cat "$(url "$server" libnfs-file)" > "$OUT/libnfs-back" 2>>"$OUT/libnfs.err" || true; t3=$(date +%s.%N)
    if ! cmp -s "$OUT/libnfs-file" "$OUT/libnfs-back"; then
        # What the clients said goes into the record: the temporary directory does not
        # outlive the run.
        record "$server" libnfs "$(sed -n "/^== $server\$/,\$p" "$OUT/libnfs.err" | tail -n 20 | python3 -c 'import sys,json; print(json.dumps({"error": "nfs-cp/nfs-cat did not round-trip the file", "sizes": [int(x) for x in sys.argv[1:]], "client_log": sys.stdin.read()}))' "$(stat -c %s "$OUT/libnfs-file")" "$(stat -c %s "$OUT/libnfs-back" 2>/dev/null || echo 0)")"
    else
    record "$server" libnfs "$(python3 -c 'import sys,json; b=int(sys.argv[1])<<20; print(json.dumps({"nfs_cp_mb_per_s": b/1e6/(float(sys.argv[3])-float(sys.argv[2])), "nfs_cat_disk_mb_per_s": b/1e6/(float(sys.argv[5])-float(sys.argv[4]))}))' "$TOTAL_MIB" "$t0" "$t1" "$t2" "$t3")"
    fi
    rm -f "$OUT/libnfs-file" "$OUT/libnfs-back"
done

touch "$OUT/done"
python3 - "$RESULTS" "$OUT" "$TOTAL_MIB" "$SECONDS_RUN" "$ARC_MIB" "$CACHED_MIB" "$REPEAT" "$CACHED_PASSES" \
    "$SYNC_FILE_MIB" "${RA_DEFAULT:-}" "$RA_OTHER_KB" "$SHOAL_IO_MODES" <<'PY'
import json, statistics, subprocess, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
out_dir = sys.argv[2]
r = {}
for row in rows:
    r.setdefault(row["server"], {})[row["what"]] = row["result"]
def mb(s, w): return r.get(s, {}).get(w, {}).get("mb_per_s")
def iops(s, w): return r.get(s, {}).get(w, {}).get("iops")
def cpu_gb(s, w): return r.get(s, {}).get(w, {}).get("server_cpu_s_per_gb")
def cpu_op(s, w): return r.get(s, {}).get(w, {}).get("server_cpu_us_per_op")
def host_gb(s, w): return r.get(s, {}).get(w, {}).get("host_cpu_less_client_s_per_gb")
def ratio(a, b): return round(a / b, 2) if a and b else None
def rounds(name, s):
    try:
        return [json.loads(l).get("mb_per_s") for l in open(f"{out_dir}/disk.{name}.s{s}") if l.strip()]
    except OSError:
        return []
def per_round(a, b, s):
    """The median over rounds of a/b, each round's two reads minutes apart at most."""
    pairs = [x / y for x, y in zip(rounds(a, s), rounds(b, s)) if x and y]
    return {"median": round(statistics.median(pairs), 2), "rounds": [round(p, 2) for p in pairs]} if pairs else None
out = {"commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip(),
       "total_mib": int(sys.argv[3]), "cached_passes": int(sys.argv[8]), "seconds_per_iops_test": int(sys.argv[4]),
       "shoal_arc_mib": int(sys.argv[5]), "cached_mib": int(sys.argv[6]), "repeat": int(sys.argv[7]),
       "sync_file_mib": int(sys.argv[9]), "disk_read_ahead_kb": {"default": sys.argv[10], "ganesha-ext4-ra": int(sys.argv[11])},
       "shoal_io_modes": sys.argv[12].split(),
       "from_disk_ratios": "median over rounds of the two reads' ratio in one round; each round reads the raw disk and every server, one after another",
       "server_cpu": "utime+stime of the server's processes over each run (shoal; Ganesha; Ganesha plus zfs-fuse); kernel writeback threads are nobody's, so ext4's write figures are a lower bound",
       "host_cpu_less_client": "the host's busy CPU over each run (user, nice, system, irq, softirq from /proc/stat) less nfs-bench's own: the server with kernel threads and interrupts",
       "servers": r, "ratios": {}, "cpu_ratios": {}}
for s in (1, 8):
    q = out["ratios"]
    q[f"read_disk_s{s}_vs_ganesha_ext4 (target 1.0)"] = per_round("shoal", "ganesha-ext4", s)
    q[f"read_disk_s{s}_vs_ganesha_zfs (target 4)"] = per_round("shoal", "ganesha-zfs", s)
    q[f"read_disk_s{s}_vs_raw_disk (target 0.85)"] = per_round("shoal", "raw", s)
    q[f"read_disk_s{s}_ganesha_ext4_vs_raw_disk"] = per_round("ganesha-ext4", "raw", s)
    q[f"read_disk_s{s}_vs_ganesha_ext4_tuned_read_ahead"] = per_round("shoal", "ganesha-ext4-ra", s)
    q[f"read_disk_s{s}_ganesha_ext4_tuned_read_ahead_vs_raw_disk"] = per_round("ganesha-ext4-ra", "raw", s)
    # What the 4x-zfs-fuse target asks of the disk: above 1.0, a server would have to
    # read the file faster than the raw disk reads in the same round.
    zfs_raw = per_round("ganesha-zfs", "raw", s)
    q[f"read_disk_s{s}_ganesha_zfs_vs_raw_disk"] = zfs_raw
    q[f"read_disk_s{s}_zfs_target_as_share_of_raw_disk"] = zfs_raw and {
        "median": round(4 * zfs_raw["median"], 2), "rounds": [round(4 * x, 2) for x in zfs_raw["rounds"]]}
    q[f"read_cached_s{s}_vs_ganesha_page_cache (target 1.2)"] = ratio(mb("shoal", f"read_cached_128k_s{s}"), mb("ganesha-ext4", f"read_cached_128k_s{s}"))
    q[f"write_128k_s{s}_vs_ganesha_zfs (target 3)"] = ratio(mb("shoal", f"write_128k_s{s}"), mb("ganesha-zfs", f"write_128k_s{s}"))
    q[f"write_128k_s{s}_vs_ganesha_ext4"] = ratio(mb("shoal", f"write_128k_s{s}"), mb("ganesha-ext4", f"write_128k_s{s}"))
    q[f"randread_8k_s{s}_vs_ganesha_ext4"] = ratio(iops("shoal", f"randread_8k_cached_s{s}"), iops("ganesha-ext4", f"randread_8k_cached_s{s}"))
    sw = f"syncwrite_8k_s{s}"
    q[f"{sw}_log_device_vs_ganesha_ext4 (target 1.0)"] = ratio(iops("shoal-log", sw), iops("ganesha-ext4", sw))
    q[f"{sw}_vs_ganesha_ext4 (target 0.7)"] = ratio(iops("shoal", sw), iops("ganesha-ext4", sw))
    q[f"{sw}_recordsize_8k_log_device_vs_ganesha_ext4 (target 1.3)"] = ratio(iops("shoal-log-db", sw), iops("ganesha-ext4", sw))
    q[f"{sw}_recordsize_8k_vs_ganesha_ext4"] = ratio(iops("shoal-db", sw), iops("ganesha-ext4", sw))
    q[f"{sw}_recordsize_8k_log_device_vs_raw_fdatasync" + (" (target 0.8)" if s == 8 else "")] = ratio(iops("shoal-log-db", sw), iops("raw-fdatasync", sw))
    q[f"{sw}_ganesha_ext4_vs_raw_fdatasync"] = ratio(iops("ganesha-ext4", sw), iops("raw-fdatasync", sw))
    c = out["cpu_ratios"]
    c[f"read_cached_s{s}_cpu_per_gb_vs_ganesha_ext4 (target <= 0.5)"] = ratio(cpu_gb("shoal", f"read_cached_128k_s{s}"), cpu_gb("ganesha-ext4", f"read_cached_128k_s{s}"))
    c[f"read_disk_s{s}_cpu_per_gb_vs_ganesha_ext4 (target <= 0.7)"] = ratio(cpu_gb("shoal", f"read_disk_128k_s{s}"), cpu_gb("ganesha-ext4", f"read_disk_128k_s{s}"))
    c[f"read_disk_s{s}_cpu_per_gb_vs_ganesha_ext4_tuned_read_ahead"] = ratio(cpu_gb("shoal", f"read_disk_128k_s{s}"), cpu_gb("ganesha-ext4-ra", f"read_disk_128k_s{s}"))
    c[f"write_128k_s{s}_cpu_per_gb_vs_ganesha_ext4 (target <= 0.7)"] = ratio(cpu_gb("shoal", f"write_128k_s{s}"), cpu_gb("ganesha-ext4", f"write_128k_s{s}"))
    for w in (f"write_128k_s{s}", f"read_disk_128k_s{s}", f"read_cached_128k_s{s}"):
        c[f"{w}_host_cpu_less_client_per_gb_vs_ganesha_ext4"] = ratio(host_gb("shoal", w), host_gb("ganesha-ext4", w))
    c[f"randread_8k_s{s}_cpu_per_op_vs_ganesha_ext4"] = ratio(cpu_op("shoal", f"randread_8k_cached_s{s}"), cpu_op("ganesha-ext4", f"randread_8k_cached_s{s}"))
    c[f"syncwrite_8k_s{s}_log_device_cpu_per_op_vs_ganesha_ext4"] = ratio(cpu_op("shoal-log", sw), cpu_op("ganesha-ext4", sw))
    for peer in ("ganesha-zfs",):
        c[f"read_cached_s{s}_cpu_per_gb_vs_{peer}"] = ratio(cpu_gb("shoal", f"read_cached_128k_s{s}"), cpu_gb(peer, f"read_cached_128k_s{s}"))
        c[f"read_disk_s{s}_cpu_per_gb_vs_{peer}"] = ratio(cpu_gb("shoal", f"read_disk_128k_s{s}"), cpu_gb(peer, f"read_disk_128k_s{s}"))
        c[f"write_128k_s{s}_cpu_per_gb_vs_{peer}"] = ratio(cpu_gb("shoal", f"write_128k_s{s}"), cpu_gb(peer, f"write_128k_s{s}"))
print(json.dumps(out, indent=2))
PY
