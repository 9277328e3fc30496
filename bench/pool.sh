#!/usr/bin/env bash
# Pool engine benchmark: the raw disk (fio, O_DIRECT) against the pool engine on device
# files in the same directory, in the same run. Prints one JSON object with the figures
# and the ratios the pool-engine issue asks for. A benchmark, never a test.
#
# A VM's disk moves by tens of percent from minute to minute, so the script runs
# ROUNDS rounds, each measuring the raw disk and then the pool right after it, and
# reports per figure the median with its min and max; each ratio is the median of the
# per-round ratios (raw and pool measured minutes apart, not across the whole run).
#
#   bench/pool.sh                       # 4 GiB per workload under target/bench-data
#   BENCH_DIR=/mnt/disk DATA_MIB=8192 ROUNDS=5 bench/pool.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${BENCH_DIR:-$PWD/target/bench-data}
DATA_MIB=${DATA_MIB:-4096}
ARC_MIB=${ARC_MIB:-256}
RAND_MIB=${RAND_MIB:-1024}
SECONDS_RAND=${SECONDS_RAND:-20}
ROUNDS=${ROUNDS:-3}
command -v fio >/dev/null || { apt-get update -qq && apt-get install -y -qq fio >/dev/null; }
cargo build --release -q -p pool-bench
B=target/release/pool-bench
mkdir -p "$DIR"
OUT=$(mktemp -d)
trap 'rm -rf "$OUT" "$DIR"/raw.img "$DIR"/rz "$DIR"/mir "$DIR"/rnd' EXIT
rm -rf "$DIR"/raw.img "$DIR"/rz "$DIR"/mir "$DIR"/rnd

fio_run() { # out size rw bs iodepth [extra]: bytes/s and iops as JSON
    fio --name=raw --filename="$DIR/raw.img" --size="$2" --rw="$3" --bs="$4" \
        --direct=1 --ioengine=libaio --iodepth="$5" --output-format=json ${6:-} > "$OUT/fio.json"
    python3 - "$OUT/fio.json" "$3" > "$1" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
side = "write" if "write" in sys.argv[2] else "read"
print(json.dumps({"bw_bytes": j[side]["bw_bytes"], "iops": j[side]["iops"]}))
PY
}

DEV_MIB=$(( DATA_MIB * 6 / 4 / 6 + 512 ))
MDEV_MIB=$(( DATA_MIB + 512 ))
# The pool's 8K records of RAND_MIB occupy about 2 x RAND_MIB of disk in both layouts
# (mirror: two copies; raidz2 of 6: two data plus two parity sectors per record), so
# the raw random-read baseline reads a file of that size: the same span of the disk.
RAW_RAND_MIB=$(( RAND_MIB * 2 ))

for r in $(seq 1 "$ROUNDS"); do
    echo "round $r/$ROUNDS: streaming, raw disk then raidz2 of 6..." >&2
    fio_run "$OUT/raw_write.$r" "${DATA_MIB}M" write 128k 4
    fio_run "$OUT/raw_read.$r" "${DATA_MIB}M" read 128k 4
    rm -f "$DIR/raw.img"
    $B --dir "$DIR/rz" --layout raidz2:6 --dev-mib "$DEV_MIB" --workload seqwrite --data-mib "$DATA_MIB" > "$OUT/rz_write.$r"
    $B --dir "$DIR/rz" --layout raidz2:6 --dev-mib "$DEV_MIB" --workload seqread --data-mib "$DATA_MIB" --arc-mib "$ARC_MIB" > "$OUT/rz_read.$r"
    $B --dir "$DIR/rz" --layout raidz2:6 --dev-mib "$DEV_MIB" --workload arcread --data-mib 512 --arc-mib 2048 > "$OUT/rz_arc.$r"
    rm -rf "$DIR/rz"
    echo "round $r/$ROUNDS: 2-way mirror write..." >&2
    $B --dir "$DIR/mir" --layout mirror:2 --dev-mib "$MDEV_MIB" --workload seqwrite --data-mib "$DATA_MIB" > "$OUT/mir_write.$r"
    rm -rf "$DIR/mir"
    echo "round $r/$ROUNDS: 8K random reads, raw then mirror and raidz2..." >&2
    fio_run "$OUT/raw_rand.$r" "${RAW_RAND_MIB}M" randread 8k 32 "--runtime=$SECONDS_RAND --time_based"
    rm -f "$DIR/raw.img"
    $B --dir "$DIR/rnd" --layout mirror:2 --dev-mib $(( RAND_MIB + 512 )) --workload randread \
       --data-mib "$RAND_MIB" --arc-mib 64 --threads 32 --seconds "$SECONDS_RAND" > "$OUT/rnd_mirror.$r"
    rm -rf "$DIR/rnd"
    $B --dir "$DIR/rnd" --layout raidz2:6 --dev-mib $(( RAND_MIB * 2 / 4 + 512 )) --workload randread \
       --data-mib "$RAND_MIB" --arc-mib 64 --threads 32 --seconds "$SECONDS_RAND" > "$OUT/rnd.$r"
    rm -rf "$DIR/rnd"
done

python3 - "$OUT" "$DATA_MIB" "$ROUNDS" "$RAND_MIB" <<'PY'
import json, os, sys, platform, statistics
d, rounds = sys.argv[1], int(sys.argv[3])
def runs(name, key, scale=1.0):
    return [json.load(open(os.path.join(d, f"{name}.{r}")))[key] * scale for r in range(1, rounds + 1)]
def summary(values, digits=1):
    return {"median": round(statistics.median(values), digits),
            "min": round(min(values), digits), "max": round(max(values), digits)}
def ratio(pool, raw):
    return summary([p / q for p, q in zip(pool, raw)], 3)
raw_w = runs("raw_write", "bw_bytes", 1e-6)
raw_r = runs("raw_read", "bw_bytes", 1e-6)
raw_x = runs("raw_rand", "iops")
rz_w, rz_r = runs("rz_write", "mb_per_s"), runs("rz_read", "mb_per_s")
rz_arc, rz_arc_cpu = runs("rz_arc", "mb_per_s"), runs("rz_arc", "cpu_seconds_per_gb")
m_w = runs("mir_write", "mb_per_s")
rnd, rnd_m = runs("rnd", "iops"), runs("rnd_mirror", "iops")
print(json.dumps({
  "data_mib": int(sys.argv[2]), "rand_mib": int(sys.argv[4]), "rounds": rounds,
  "host": {"cpus": os.cpu_count(), "kernel": platform.release()},
  "raw": {"seq_write_mb_s": summary(raw_w), "seq_read_mb_s": summary(raw_r),
          "rand_read_8k_iops": summary(raw_x, 0)},
  "raidz2_6": {"seq_write_mb_s": summary(rz_w), "seq_read_mb_s": summary(rz_r),
               "arc_read_mb_s": summary(rz_arc), "arc_read_cpu_s_per_gb": summary(rz_arc_cpu, 3),
               "rand_read_8k_iops": summary(rnd, 0)},
  "mirror_2": {"seq_write_mb_s": summary(m_w), "rand_read_8k_iops": summary(rnd_m, 0)},
  "ratios": {
    "raidz2_seq_write_vs_raw": ratio(rz_w, raw_w),
    "mirror_seq_write_vs_raw": ratio(m_w, raw_w),
    "raidz2_seq_read_vs_raw": ratio(rz_r, raw_r),
    "mirror_rand_read_8k_vs_raw": ratio(rnd_m, raw_x),
    "raidz2_rand_read_8k_vs_raw": ratio(rnd, raw_x),
  },
  "targets": {"raidz2_seq_write_vs_raw": 0.55, "mirror_seq_write_vs_raw": 0.42,
              "raidz2_seq_read_vs_raw": 0.85, "rand_read_8k_vs_raw": 0.70},
  "notes": "medians of per-round ratios; raidz2 reads an 8K record as two 4K data columns on two device files, so its random-read IOPS ceiling on one shared disk is about half the raw IOPS; the mirror reads one 8K piece per op",
}, indent=2))
PY
