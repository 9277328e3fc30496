#!/usr/bin/env bash
# What this disk rewards: one asynchronous submitter or blocking reads from many
# threads (shoal's read-ahead is the second kind: each job a blocking preadv on a
# worker thread, several jobs of one stream in flight at once), and buffers in
# scattered 4 KiB pages or in huge pages (a request is cut at the device's segment
# limit, 254 physically contiguous runs on a virtio disk, so a 1 MiB or 4 MiB read into
# scattered pages reaches it as several requests). fio reads one 8 GiB file on the
# bench file system (O_DIRECT, sequential) in interleaved rounds:
#
#   libaio-4Mx8         one thread, libaio, 4 MiB reads, 8 in flight
#   libaio-4Mx8-huge    the same into buffers in huge pages (fio --mem=shmhuge)
#   io_uring-4Mx8       one thread, io_uring, 4 MiB reads, 8 in flight
#   psync-4Mx8          8 threads, one blocking 4 MiB read each, taking turns along one
#                       stream (thread k reads blocks k, k+8, k+16, ...), as read-ahead does
#   psync-4Mx8-huge     the same into buffers in huge pages
#   libaio-1Mx32        one thread, libaio, 1 MiB reads, 32 in flight
#   libaio-1Mx32-huge   the same into buffers in huge pages (from-disk.sh's raw disk)
#
# Prints JSON: per shape, MB/s, mean completion latency (ms) and the device's own
# count of what it was sent (/proc/diskstats: KiB per request, requests in flight),
# medians with min-max.
#   BENCH_DIR=/work/bench-data ROUNDS=5 bench/disk-submission.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${BENCH_DIR:-/var/tmp/shoal-bench}/disk-submission
ROUNDS=${ROUNDS:-5}
SECONDS_RUN=${SECONDS_RUN:-6}
. bench/lib.sh
need fio
cleanup() {
    rm -rf "$DIR"
    restore_hugepages
}
trap cleanup EXIT
mkdir -p "$DIR"
# 8 threads x 4 MiB of buffers, each in its own segment, with room to spare.
reserve_hugepages 64
# The device under the file system, as /proc/diskstats names it (major, minor).
read -r MAJOR MINOR < <(findmnt -no MAJ:MIN -T "$DIR" | tr ':' ' ')
disk_counters() { awk -v a="$MAJOR" -v b="$MINOR" '$1 == a && $2 == b { print $4, $6, $7, $13 }' /proc/diskstats; }
fio --name=fill --filename="$DIR/f" --size=8G --rw=write --bs=4M --direct=1 --ioengine=libaio \
    --iodepth=8 --output-format=json >/dev/null \
    || { echo "disk-submission.sh: fio could not write 8 GiB to $DIR (is the file system full?)" >&2; exit 1; }
OUT=$(mktemp)
shape() { # NAME fio-args... -> one JSON line
    local name=$1 before after
    shift
    before=$(disk_counters)
    fio --name="$name" --filename="$DIR/f" --direct=1 --rw=read --time_based --runtime="$SECONDS_RUN" \
        --size=8G --group_reporting --output-format=json --output="$OUT.fio" "$@"
    after=$(disk_counters)
    python3 - "$name" "$OUT.fio" "$before" "$after" <<'PY'
import json, sys
name, path, before, after = sys.argv[1:]
r = json.load(open(path))["jobs"][0]["read"]
# reads completed, sectors read, ms spent reading, ms with I/O in flight
(n0, s0, t0, io0), (n1, s1, t1, io1) = (list(map(int, x.split())) for x in (before, after))
reqs = max(n1 - n0, 1)
print(json.dumps({"shape": name, "mb_per_s": r["bw_bytes"] / 1e6, "ms": r["clat_ns"]["mean"] / 1e6,
                  "kib_per_request": (s1 - s0) * 512 / 1024 / reqs, "in_flight": (t1 - t0) / max(io1 - io0, 1)}))
PY
}
for round in $(seq "$ROUNDS"); do
    echo "disk-submission.sh: round $round of $ROUNDS" >&2
    {
        shape libaio-4Mx8 --ioengine=libaio --iodepth=8 --bs=4M
        shape libaio-4Mx8-huge --ioengine=libaio --iodepth=8 --bs=4M --mem=shmhuge
        shape io_uring-4Mx8 --ioengine=io_uring --iodepth=8 --bs=4M
        shape psync-4Mx8 --ioengine=psync --numjobs=8 --bs=4M --offset_increment=4M --rw=read:28M
        shape psync-4Mx8-huge --ioengine=psync --numjobs=8 --bs=4M --offset_increment=4M --rw=read:28M --mem=shmhuge
        shape libaio-1Mx32 --ioengine=libaio --iodepth=32 --bs=1M
        shape libaio-1Mx32-huge --ioengine=libaio --iodepth=32 --bs=1M --mem=shmhuge
    } | tee -a "$OUT" >&2
done
python3 - "$OUT" "$ROUNDS" "$(git rev-parse --short HEAD)" <<'PY'
import json, statistics, sys
path, rounds, commit = sys.argv[1:]
runs = [json.loads(l) for l in open(path)]
def spread(xs):
    return {"median": round(statistics.median(xs), 1), "min": round(min(xs), 1), "max": round(max(xs), 1)}
shapes = list(dict.fromkeys(r["shape"] for r in runs))
out = {"bench": "disk-submission", "commit": commit, "rounds": int(rounds),
       "setup": "fio, one 8 GiB file on the bench file system, O_DIRECT, sequential reads, shapes interleaved per round; kib_per_request and requests_in_flight from /proc/diskstats of the device under it",
       "command": "BENCH_DIR=/work/bench-data ROUNDS=%s bench/disk-submission.sh" % rounds}
for s in shapes:
    rs = [r for r in runs if r["shape"] == s]
    out[s] = {key: spread([r[field] for r in rs]) for key, field in
              [("mb_per_s", "mb_per_s"), ("latency_ms", "ms"), ("kib_per_request", "kib_per_request"),
               ("requests_in_flight", "in_flight")]}
print(json.dumps(out, indent=1))
PY
rm -f "$OUT" "$OUT.fio"
