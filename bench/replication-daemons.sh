#!/usr/bin/env bash
# Replication between two shoal daemons on one machine: a full run of an action
# (HTTPS on loopback, the target's certificate pinned) against `shoal send | shoal
# receive` of the same snapshot between the same two pools with the daemons stopped.
# Prints one JSON object.
#
# Same data, same state: one file of random bytes (SIZE_MIB) plus FILES small files in
# a filesystem (recordsize 128K, compression off) of pool ssrc (state directory P);
# every round receives it anew into pool sdst (state directory R), each pool on one
# device file in the same directory. Each round starts with the kernel's caches
# dropped and the daemons started afresh (their ARCs empty); daemon and pipe rounds
# alternate, ROUNDS each; medians and spreads are reported, and CPU seconds per GiB of
# all the shoal processes involved (both daemons, or both ends of the pipe). Each
# timed transfer ends with sync(1). The last received copy is compared with the data.
# A benchmark, never a test. Needs root and /dev/fuse (to fill and check the pools).
#
#   bench/replication-daemons.sh                 # 2 GiB under target/bench-data
#   BENCH_DIR=/mnt/disk SIZE_MIB=4096 ROUNDS=5 bench/replication-daemons.sh
#   PROFILE=/tmp/repl.perf ROUNDS=1 bench/replication-daemons.sh   # perf record the daemons
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${BENCH_DIR:-$PWD/target/bench-data}/replication-daemons
SIZE_MIB=${SIZE_MIB:-2048}
FILES=${FILES:-2000}
ROUNDS=${ROUNDS:-3}
# Room for both received copies at once (the daemon's and the pipe's).
DEV_MIB=$(( SIZE_MIB * 3 + 1024 ))
. bench/lib.sh
cargo build --release -q -p shoal
SHOAL=$PWD/target/release/shoal
P=$DIR/p
R=$DIR/r
OUT=$(mktemp -d)
cleanup() {
    for s in "$P" "$R"; do
        [ -f "$s/serve.pid" ] && kill "$(cat "$s/serve.pid")" 2>/dev/null || true
    done
    SHOAL_STATE_DIR=$P "$SHOAL" unmount "$DIR/mnt" 2>/dev/null || true
    SHOAL_STATE_DIR=$R "$SHOAL" unmount "$DIR/mnt" 2>/dev/null || true
    sleep 1
    rm -rf "$DIR" "$OUT"
}
trap cleanup EXIT
rm -rf "$DIR"
mkdir -p "$DIR/data" "$DIR/mnt" "$P" "$R"
sp() { SHOAL_STATE_DIR=$P "$SHOAL" "$@"; }
sr() { SHOAL_STATE_DIR=$R "$SHOAL" "$@"; }

echo "data: ${SIZE_MIB} MiB of random bytes and $FILES small files..." >&2
replication_data "$DIR/data" "$SIZE_MIB" "$FILES"
DATA_BYTES=$(du -sb "$DIR/data" | cut -f1)

mount_fs() { # state-dir dataset
    SHOAL_STATE_DIR=$1 "$SHOAL" mount "$2" "$DIR/mnt" 2>>"$OUT/mount.log" &
    for _ in $(seq 100); do mountpoint -q "$DIR/mnt" && return; sleep 0.1; done
    echo "shoal mount did not come up" >&2; exit 1
}
unmount_fs() { # state-dir
    SHOAL_STATE_DIR=$1 "$SHOAL" unmount "$DIR/mnt"
    while mountpoint -q "$DIR/mnt" || pgrep -f "shoal mount" >/dev/null; do sleep 0.1; done
}
sp pool create --dir "$DIR/devs" --size "${DEV_MIB}M" ssrc a >&2
sr pool create --dir "$DIR/devs" --size "${DEV_MIB}M" sdst b >&2
sp fs create ssrc/fs -o recordsize=128K -o compression=off >&2
echo "filling..." >&2
mount_fs "$P" ssrc/fs
cp -r "$DIR/data/." "$DIR/mnt/"
unmount_fs "$P"
sp snapshot create ssrc/fs@s1 >&2

openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost \
    -addext subjectAltName=DNS:localhost -addext basicConstraints=critical,CA:FALSE \
    -keyout "$DIR/key.pem" -out "$DIR/cert.pem" 2>/dev/null

# Fixed API ports, so the target's address holds across restarts.
read -r P_API R_API < <(python3 -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1", 0)) for x in s]
print(*[x.getsockname()[1] for x in s])')
start() { # state-dir api-port [serve args...]
    local s=$1 port=$2; shift 2
    rm -f "$s/daemon.json"
    SHOAL_STATE_DIR=$s SHOAL_LOG=warn "$SHOAL" serve --listen 127.0.0.1:0 --api "127.0.0.1:$port" "$@" \
        2>>"$s/serve.log" &
    echo $! > "$s/serve.pid"
    for _ in $(seq 300); do
        [ -f "$s/daemon.json" ] && grep -q '"api": "' "$s/daemon.json" && return
        sleep 0.1
    done
    echo "shoal serve did not start: $(tail -5 "$s/serve.log")" >&2; exit 1
}
stop() { # state-dir
    local pid; pid=$(cat "$1/serve.pid")
    kill "$pid"; while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    rm -f "$1/serve.pid"
}
cpu_of() { # pid: utime + stime, seconds
    awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$1/stat"
}

# Pairing, once.
start "$R" "$R_API" --tls-cert "$DIR/cert.pem" --tls-key "$DIR/key.pem"
start "$P" "$P_API"
TOKEN=$(sr replication credential create bench --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
sp replication target add r --address "localhost:$R_API" --credential "$TOKEN" \
    --certificate "$DIR/cert.pem" >&2
ID=$(sp replication add ssrc/fs --target r --remote sdst/copy --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
stop "$P"; stop "$R"

forget_copy() { # state-dir dataset: its snapshots, then it (if it exists)
    local s=$1 d=$2 list
    list=$(SHOAL_STATE_DIR=$s "$SHOAL" snapshot list "$d" --json 2>/dev/null) || return 0
    for snap in $(echo "$list" | python3 -c 'import json,sys; [print(x["name"]) for x in json.load(sys.stdin)]'); do
        SHOAL_STATE_DIR=$s "$SHOAL" snapshot destroy "$snap" >/dev/null
    done
    SHOAL_STATE_DIR=$s "$SHOAL" fs destroy "$d" >/dev/null
}

daemon_round() {
    forget_copy "$R" sdst/copy
    drop_caches
    start "$R" "$R_API" --tls-cert "$DIR/cert.pem" --tls-key "$DIR/key.pem"
    start "$P" "$P_API"
    local pp pr c0 c1 t0 t1
    pp=$(cat "$P/serve.pid"); pr=$(cat "$R/serve.pid")
    c0=$(echo "$(cpu_of "$pp") $(cpu_of "$pr")" | awk '{print $1 + $2}')
    if [ -n "${PROFILE:-}" ]; then # PROFILE=FILE: perf record both daemons' run
        perf record -q -F 199 --call-graph dwarf,16384 -p "$pp,$pr" -o "$PROFILE" 2>/dev/null &
        echo $! > "$OUT/perf.pid"; sleep 0.5
    fi
    t0=$(date +%s.%N)
    sp replication run "$ID" --json > "$OUT/run.json" || { cat "$OUT/run.json" >&2; exit 1; }
    sync
    t1=$(date +%s.%N)
    c1=$(echo "$(cpu_of "$pp") $(cpu_of "$pr")" | awk '{print $1 + $2}')
    if [ -n "${PROFILE:-}" ]; then kill -INT "$(cat "$OUT/perf.pid")"; sleep 2; fi
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["ok"], r' "$OUT/run.json"
    stop "$P"; stop "$R"
    echo "$t0 $t1 $c0 $c1" | awk '{print $2 - $1, $4 - $3}'
}
pipe_round() {
    forget_copy "$R" sdst/pipe
    drop_caches
    /usr/bin/time -f "%e %U %S" -o "$OUT/time" bash -c \
        "set -o pipefail; SHOAL_STATE_DIR='$P' '$SHOAL' send ssrc/fs@s1 2>/dev/null | SHOAL_STATE_DIR='$R' '$SHOAL' receive sdst/pipe >/dev/null && sync" ||
        { echo "the pipe round failed" >&2; exit 1; }
    read -r e u s < "$OUT/time"
    echo "$e $(echo "$u $s" | awk '{print $1 + $2}')"
}
for r in $(seq "$ROUNDS"); do
    echo "round $r: daemon to daemon over HTTPS..." >&2
    daemon_round >> "$OUT/daemons"
    echo "round $r: send | receive..." >&2
    pipe_round >> "$OUT/pipe"
done
STREAM_BYTES=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["bytes"])' "$OUT/run.json")

mount_fs "$R" sdst/copy
diff -r "$DIR/data" "$DIR/mnt" >&2 || { echo "the replica differs from the data" >&2; exit 1; }
unmount_fs "$R"

python3 - "$OUT" "$DATA_BYTES" "$STREAM_BYTES" <<'PY'
import json, statistics, sys
out, data_bytes, stream_bytes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def rows(name):
    return [list(map(float, l.split())) for l in open(f"{out}/{name}") if l.strip()]
def summary(rs):
    mbs = [data_bytes / r[0] / 1e6 for r in rs]
    cpu = [r[1] / (data_bytes / 2**30) for r in rs]
    return {"mb_s_median": round(statistics.median(mbs), 1), "mb_s_min": round(min(mbs), 1),
            "mb_s_max": round(max(mbs), 1), "cpu_s_per_gib_median": round(statistics.median(cpu), 2),
            "cpu_s_per_gib_min": round(min(cpu), 2), "cpu_s_per_gib_max": round(max(cpu), 2),
            "rounds": len(rs)}
d, p = summary(rows("daemons")), summary(rows("pipe"))
print(json.dumps({
    "benchmark": "replication-daemons",
    "data_bytes": data_bytes,
    "stream_bytes": stream_bytes,
    "daemon_to_daemon_https": d,
    "send_receive_pipe": p,
    "daemons_vs_pipe": round(d["mb_s_median"] / p["mb_s_median"], 2),
}, indent=2))
PY
