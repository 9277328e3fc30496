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

drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }

# The replication benchmarks' data in DIR: a file "big" of SIZE_MIB random MiB and
# FILES small files (1 B to 64 KiB, seeded) in 20 directories under "small".
replication_data() { # dir size-mib files
    mkdir -p "$1"
    head -c "$(($2 << 20))" /dev/urandom > "$1/big"
    python3 - "$1/small" "$3" <<'PY'
import os, sys, random
d, n = sys.argv[1], int(sys.argv[2])
os.makedirs(d)
r = random.Random(7)
for i in range(n):
    sub = os.path.join(d, f"d{i % 20:02d}")
    os.makedirs(sub, exist_ok=True)
    with open(os.path.join(sub, f"f{i:05d}"), "wb") as f:
        f.write(r.randbytes(r.randrange(1, 64 << 10)))
PY
}
