#!/bin/sh
# Guest side of crates/shoal/tests/nfs_kernel.rs: pjdfstest (the Rust POSIX test suite,
# copied into the guest at $PJDFSTEST) on the kernel's NFS mount ($NFS_VERSION: 3, the
# default, or 4.1) of $EXPORT served by
# `shoal serve` at 10.99.0.1. Exclusions are listed and justified in docs/pjdfstest.md.
set -eu
M=/mnt/share
mkdir -p $M /mnt/other /etc
# The initramfs root is private (0700): the unprivileged users must reach the mount.
chmod 755 / /mnt
chmod 1777 /tmp
if [ "${NFS_VERSION:-3}" = 3 ]; then
    mount -t nfs -o vers=3,proto=tcp,addr=10.99.0.1,port=2049,mountproto=tcp,mountport=2049,nolock \
        "10.99.0.1:${EXPORT:?}" $M
else
    mount -t nfs4 -o "vers=$NFS_VERSION,addr=10.99.0.1,clientaddr=10.99.0.2" "10.99.0.1:${EXPORT:?}" $M
fi
chmod 777 $M
# EXDEV tests need a second file system.
mount -t tmpfs -o size=16m pjd-secondary /mnt/other
chmod 777 /mnt/other
# The unprivileged users pjdfstest switches to.
cat > /etc/passwd <<'USERS'
root:x:0:0:root:/:/bin/sh
nobody:x:65534:65534:nobody:/:/bin/false
tests:x:1000:1000:tests:/:/bin/false
USERS
cat > /etc/group <<'GROUPS'
root:x:0:
nogroup:x:65534:
tests:x:1000:
GROUPS
# Two runs, as on FUSE: every test with remounts off, then the EROFS tests, which
# remount the file system read-only (the client enforces that mount flag).
config() {
    cat <<CONFIG
[features]
posix_fallocate = {}
rename_ctime = {}
utime_now = {}
utimensat = {}

[settings]
naptime = 0.001
allow_remount = $1

[dummy_auth]
entries = [
  ["nobody", "nogroup"],
  ["tests", "tests"],
]
CONFIG
}
config false > /tmp/nfs.toml
config true > /tmp/nfs-erofs.toml
cd $M
for run in main erofs; do
    if [ $run = main ]; then
        "${PJDFSTEST:?}" -c /tmp/nfs.toml -p $M -s /mnt/other ${PJDFSTEST_PATTERN:-} > /tmp/pjd.out 2>&1 || true
    else
        "$PJDFSTEST" -c /tmp/nfs-erofs.toml -p $M -s /mnt/other erofs > /tmp/pjd.out 2>&1 || true
    fi
    echo "== pjdfstest run: $run"
    if [ -n "${PJDFSTEST_VERBOSE:-}" ]; then
        cat /tmp/pjd.out
    else
        # The failures with their reasons (indented lines), skips and the summary.
        awk '/FAILED *$/ {show = 1; print; next} /^[^ \t]/ {show = 0} /skipped *$|^Summary/ {print; next} show' /tmp/pjd.out
    fi
    grep -q "^Summary" /tmp/pjd.out || { echo "pjdfstest did not finish"; cat /tmp/pjd.out; exit 1; }
done
cd /
umount $M
