# Helpers shared by the benchmark scripts (sourced, never run): packages, zfs-fuse
# installed for the run only, and dropping the kernel's caches.

installed() { for p in "$@"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || return 1; done; }
need() { installed "$@" || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null; }; }

# zfs-fuse brings the fuse package, whose mount.fuse helper takes over mount(8)
# remounts of every FUSE file system (the FUSE tests' EROFS run needs it absent), so
# what a run installs it removes again: need_zfs_fuse at the start, and
# remove_zfs_fuse_if_installed in the script's exit trap.
INSTALLED_ZFS_FUSE=0
need_zfs_fuse() {
    if ! command -v zfs-fuse >/dev/null; then
        need zfs-fuse
        INSTALLED_ZFS_FUSE=1
    fi
}
remove_zfs_fuse_if_installed() {
    if [ "$INSTALLED_ZFS_FUSE" = 1 ]; then
        apt-get remove -y -qq zfs-fuse fuse >/dev/null 2>&1 || true
    fi
}

# Huge pages for fio's buffers (`--mem=shmhuge`): reserve_hugepages N makes sure at
# least N are reserved (or fails), restore_hugepages (for an exit trap) puts back the
# count there was before.
HUGEPAGES_BEFORE=
reserve_hugepages() { # count
    HUGEPAGES_BEFORE=$(cat /proc/sys/vm/nr_hugepages)
    [ "$HUGEPAGES_BEFORE" -ge "$1" ] || echo "$1" > /proc/sys/vm/nr_hugepages
    [ "$(cat /proc/sys/vm/nr_hugepages)" -ge "$1" ] || { echo "could not reserve $1 huge pages" >&2; return 1; }
}
restore_hugepages() { if [ -n "$HUGEPAGES_BEFORE" ]; then echo "$HUGEPAGES_BEFORE" > /proc/sys/vm/nr_hugepages; fi; }

proc_cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; } # PID -> utime+stime, clock ticks
# PID -> run time of its analytics collector thread in ns (schedstat): the collector
# takes about a hundredth of a CPU, a dozen clock ticks in a 10 s run, too coarse to
# compare builds.
collector_ns() { local t=0; for f in /proc/"$1"/task/*; do [ "$(cat "$f/comm" 2>/dev/null)" = analytics ] && t=$(( t + $(awk '{ print $1 }' "$f/schedstat") )); done; echo "$t"; }
# PIN=1 (the default on a machine of 2 or more CPUs): SERVER_CPUS and CLIENT_CPUS are
# `taskset` prefixes putting daemons on CPU 0 and load generators on CPU 1; PIN=0
# leaves both empty, for the scheduler to place them.
pin_cpus() {
    PIN=${PIN:-$([ "$(nproc)" -ge 2 ] && echo 1 || echo 0)}
    SERVER_CPUS=() CLIENT_CPUS=()
    if [ "$PIN" = 1 ]; then SERVER_CPUS=(taskset -c 0) CLIENT_CPUS=(taskset -c 1); fi
}
# Waits up to 10 s for a TCP listener on PORT; on none, prints LOG and fails.
wait_listening() { # port log
    for _ in $(seq 100); do ss -ltn | grep -q ":$1 " && return 0; sleep 0.1; done
    echo "nothing listens on port $1" >&2; cat "$2" >&2; return 1
}
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }

# The replication benchmarks' data in DIR: a file "big" of SIZE_MIB MiB and FILES
# small files (1 B to 64 KiB, seeded) in 20 directories under "small". KIND=random
# (the default) makes incompressible bytes; KIND=text makes log-like lines of words,
# numbers and hex ids that compress about 2x with lz4 or lzjb and 3x with gzip, as
# logs, source and documents do.
replication_data() { # dir size-mib files [kind]
    mkdir -p "$1"
    python3 - "$1" "$2" "$3" "${4:-random}" <<'PY'
import os, sys, random
d, mib, n, kind = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
r = random.Random(7)
words = ["".join(r.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(r.randrange(2, 10)))
         for _ in range(400)]
weights = [1 / (i + 1) for i in range(len(words))]  # Zipf, as words in text are
def text(size):
    lines, total = [], 0
    while total < size:
        line = "%d-%02d-%02dT%02d:%02d:%02d %s %08x %s\n" % (
            2026, r.randrange(1, 13), r.randrange(1, 29), r.randrange(24),
            r.randrange(60), r.randrange(60), r.choice(["INFO", "WARN", "DEBUG"]),
            r.getrandbits(32), " ".join(r.choices(words, weights, k=r.randrange(4, 16))))
        lines.append(line)
        total += len(line)
    return "".join(lines).encode()[:size]
# Text is cut from 16 MiB made once: every compressor here looks back 64 KiB at most,
# so the repeats are invisible to them.
base = text(16 << 20) if kind == "text" else b""
def data(size):
    if kind == "random":
        return r.randbytes(size)
    at = r.randrange(0, len(base) - size)
    return base[at:at + size]
with open(os.path.join(d, "big"), "wb") as f:
    for _ in range(mib):
        f.write(os.urandom(1 << 20) if kind == "random" else data(1 << 20))
small = os.path.join(d, "small")
os.makedirs(small)
for i in range(n):
    sub = os.path.join(small, f"d{i % 20:02d}")
    os.makedirs(sub, exist_ok=True)
    with open(os.path.join(sub, f"f{i:05d}"), "wb") as f:
        f.write(data(r.randrange(1, 64 << 10)))
PY
}

# An NFS-Ganesha configuration serving NFSv3 only, on 127.0.0.1, NFS on PORT and MOUNT
# on MNT_PORT (NLM and RQUOTA, disabled, get PORT+2 and PORT+3), with one FSAL VFS
# export of each PATH (Export_Id and Pseudo /export1, /export2... in order): as the
# benchmarks run it. On stdout.
ganesha_v3_conf() { # port mnt-port path...
    local port=$1 mnt=$2 id=0 path
    shift 2
    cat <<EOC
NFS_CORE_PARAM {
    NFS_Port = $port; MNT_Port = $mnt; NLM_Port = $((port + 2)); Rquota_Port = $((port + 3));
    Protocols = 3; Enable_NLM = false; Enable_RQUOTA = false; Bind_addr = 127.0.0.1;
}
NFSV4 { Graceless = true; }
EOC
    for path in "$@"; do
        id=$((id + 1))
        echo "EXPORT { Export_Id = $id; Path = $path; Pseudo = /export$id; Access_Type = RW; Squash = No_Root_Squash;"
        echo "         SecType = sys; Protocols = 3; Transports = TCP; FSAL { Name = VFS; } }"
    done
}

# One timed full `send | receive` of ssrc/fs@s1 into sdst/fs by shoal binary BIN (the
# copy of an earlier round destroyed first, the kernel's caches dropped, the clock
# stopped after sync(1)); TMP is a scratch directory. Prints "seconds cpu_seconds"
# (user + system of the pipeline). For bench/replication.sh and replication-ab.sh.
shoal_send_receive_round() { # BIN TMP
    "$1" snapshot destroy sdst/fs@s1 >/dev/null 2>&1 || true
    "$1" fs destroy sdst/fs >/dev/null 2>&1 || true
    drop_caches
    /usr/bin/time -f "%e %U %S" -o "$2/time" bash -c \
        "'$1' send ssrc/fs@s1 2>/dev/null | '$1' receive sdst/fs >/dev/null 2>&1; sync"
    local e u s
    read -r e u s < "$2/time"
    echo "$e $(echo "$u $s" | awk '{print $1 + $2}')"
}
