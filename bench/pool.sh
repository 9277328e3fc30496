#!/usr/bin/env bash
# Pool engine benchmark: the raw disk (fio, O_DIRECT) against the pool engine on device
# files in the same directory, in the same run. Prints one JSON object with the figures
# and the ratios the pool-engine issue asks for. A benchmark, never a test.
#
#   bench/pool.sh                       # 4 GiB per workload under target/bench-data
#   BENCH_DIR=/mnt/disk DATA_MIB=8192 bench/pool.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${BENCH_DIR:-$PWD/target/bench-data}
DATA_MIB=${DATA_MIB:-4096}
ARC_MIB=${ARC_MIB:-256}
RAND_MIB=${RAND_MIB:-1024}
SECONDS_RAND=${SECONDS_RAND:-20}
command -v fio >/dev/null || { apt-get update -qq && apt-get install -y -qq fio >/dev/null; }
cargo build --release -q -p pool-bench
B=target/release/pool-bench
mkdir -p "$DIR"
OUT=$(mktemp -d)
trap 'rm -rf "$OUT" "$DIR"/raw.img "$DIR"/rz "$DIR"/mir "$DIR"/rnd' EXIT
rm -rf "$DIR"/raw.img "$DIR"/rz "$DIR"/mir "$DIR"/rnd

fio_bw() { # rw bs iodepth -> bytes/s or iops
    fio --name=raw --filename="$DIR/raw.img" --size="${DATA_MIB}M" --rw="$1" --bs="$2" \
        --direct=1 --ioengine=libaio --iodepth="$3" --output-format=json ${4:-} > "$OUT/fio.json"
    python3 - "$OUT/fio.json" "$1" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
side = "write" if "write" in sys.argv[2] else "read"
print(json.dumps({"bw_bytes": j[side]["bw_bytes"], "iops": j[side]["iops"]}))
PY
}

echo "raw disk (fio)..." >&2
fio_bw write 128k 4 > "$OUT/raw_write"
fio_bw read 128k 4 > "$OUT/raw_read"
fio_bw randread 8k 32 "--runtime=$SECONDS_RAND --time_based" > "$OUT/raw_rand"
rm -f "$DIR/raw.img"

DEV_MIB=$(( DATA_MIB * 6 / 4 / 6 + 512 ))
echo "pool raidz2 of 6..." >&2
$B --dir "$DIR/rz" --layout raidz2:6 --dev-mib "$DEV_MIB" --workload seqwrite --data-mib "$DATA_MIB" > "$OUT/rz_write"
$B --dir "$DIR/rz" --layout raidz2:6 --dev-mib "$DEV_MIB" --workload seqread --data-mib "$DATA_MIB" --arc-mib "$ARC_MIB" > "$OUT/rz_read"
$B --dir "$DIR/rz" --layout raidz2:6 --dev-mib "$DEV_MIB" --workload arcread --data-mib 512 --arc-mib 2048 > "$OUT/rz_arc"
rm -rf "$DIR/rz"
echo "pool 2-way mirror..." >&2
MDEV_MIB=$(( DATA_MIB + 512 ))
$B --dir "$DIR/mir" --layout mirror:2 --dev-mib "$MDEV_MIB" --workload seqwrite --data-mib "$DATA_MIB" > "$OUT/mir_write"
rm -rf "$DIR/mir"
echo "pool 8K random reads..." >&2
$B --dir "$DIR/rnd" --layout raidz2:6 --dev-mib $(( RAND_MIB * 6 / 4 / 6 * 2 + 512 )) --workload randread \
   --data-mib "$RAND_MIB" --arc-mib 64 --threads 32 --seconds "$SECONDS_RAND" > "$OUT/rnd"

echo "pool 8K random reads, 2-way mirror..." >&2
rm -rf "$DIR/rnd"
$B --dir "$DIR/rnd" --layout mirror:2 --dev-mib $(( RAND_MIB * 2 + 512 )) --workload randread \
   --data-mib "$RAND_MIB" --arc-mib 64 --threads 32 --seconds "$SECONDS_RAND" > "$OUT/rnd_mirror"

python3 - "$OUT" "$DATA_MIB" <<'PY'
import json, os, sys, platform
d = sys.argv[1]
r = lambda n: json.load(open(os.path.join(d, n)))
raw_w, raw_r, raw_x = r("raw_write"), r("raw_read"), r("raw_rand")
rzw, rzr, rza, mw, rnd, rndm = r("rz_write"), r("rz_read"), r("rz_arc"), r("mir_write"), r("rnd"), r("rnd_mirror")
mb = lambda b: round(b / 1e6, 1)
print(json.dumps({
  "data_mib": int(sys.argv[2]),
  "host": {"cpus": os.cpu_count(), "kernel": platform.release()},
  "raw": {"seq_write_mb_s": mb(raw_w["bw_bytes"]), "seq_read_mb_s": mb(raw_r["bw_bytes"]),
          "rand_read_8k_iops": round(raw_x["iops"])},
  "raidz2_6": {"seq_write_mb_s": round(rzw["mb_per_s"], 1), "seq_read_mb_s": round(rzr["mb_per_s"], 1),
               "arc_read_mb_s": round(rza["mb_per_s"], 1), "arc_read_cpu_s_per_gb": round(rza["cpu_seconds_per_gb"], 3),
               "rand_read_8k_iops": round(rnd["iops"])},
  "mirror_2": {"seq_write_mb_s": round(mw["mb_per_s"], 1), "rand_read_8k_iops": round(rndm["iops"])},
  "ratios": {
    "raidz2_seq_write_vs_raw": round(rzw["mb_per_s"] * 1e6 / raw_w["bw_bytes"], 3),
    "mirror_seq_write_vs_raw": round(mw["mb_per_s"] * 1e6 / raw_w["bw_bytes"], 3),
    "raidz2_seq_read_vs_raw": round(rzr["mb_per_s"] * 1e6 / raw_r["bw_bytes"], 3),
    "raidz2_rand_read_8k_vs_raw": round(rnd["iops"] / raw_x["iops"], 3),
    "mirror_rand_read_8k_vs_raw": round(rndm["iops"] / raw_x["iops"], 3),
  },
  "targets": {"raidz2_seq_write_vs_raw": 0.55, "mirror_seq_write_vs_raw": 0.42,
              "raidz2_seq_read_vs_raw": 0.85, "rand_read_8k_vs_raw": 0.70},
  "notes": "raidz2 reads an 8K record as two 4K data columns, so its random-read IOPS ceiling on one shared disk is about half the raw IOPS; the mirror reads one 8K piece per op",
}, indent=2))
PY
