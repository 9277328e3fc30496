#!/bin/sh
# Guest side of crates/shoal/tests/nfs_kernel.rs: a rollback of the share while the
# kernel's NFSv4.1 and NFSv3 clients have it mounted and files open. The server side
# (serve-restartable.sh) runs `shoal snapshot ...` for the guest on port 7010. Prints
# "ok: <step>" after each step; any failure ends the script with a nonzero status.
set -eu
E=${EXPORT:?}
M4=/mnt/v4
M3=/mnt/v3
mkdir -p $M4 $M3
fail() { echo "FAILED: $*"; exit 1; }
step() { echo "ok: $*"; }
# Runs `shoal ARGS` on the server; fails unless it exits 0.
admin() {
    out=$(echo "$*" | nc 10.99.0.1 7010)
    echo "$out" | grep -qx "exit 0" || fail "shoal $*: $out"
}
# Waits up to 20 s for `$1` to print `$2` (a client revalidates its caches within
# its attribute timeout, and after a revoked delegation once it has recovered).
eventually() {
    for _ in $(seq 40); do
        [ "$(cat "$1" 2>/dev/null)" = "$2" ] && return 0
        ls -la "$(dirname "$1")" > /dev/null 2>&1 || true
        sleep 0.5
    done
    fail "$1 reads '$(cat "$1" 2>&1)', not '$2'"
}

mount -t nfs4 -o vers=4.1,addr=10.99.0.1,clientaddr=10.99.0.2 10.99.0.1:$E $M4
mount -t nfs -o vers=3,proto=tcp,addr=10.99.0.1,port=2049,mountproto=tcp,mountport=2049,nolock 10.99.0.1:$E $M3
echo "as in the snapshot" > $M4/kept
mkdir $M4/dir
echo inside > $M4/dir/file
sync
admin snapshot create "${E#/}@before"
step "snapshot taken under the mounts"

echo "changed after the snapshot" > $M4/kept
echo "born after the snapshot" > $M4/new
rm $M4/dir/file
sync
# Open files: one that survives the rollback, one that vanishes, on each mount.
exec 3< $M4/kept
exec 4< $M4/new
exec 5< $M3/new
[ "$(cat $M3/new)" = "born after the snapshot" ] || fail "v3 reads new"
admin snapshot rollback "${E#/}@before"
step "rolled back while mounted over v4.1 and v3 with files open"

eventually $M4/kept "as in the snapshot"
eventually $M3/kept "as in the snapshot"
eventually $M4/dir/file inside
eventually $M3/dir/file inside
[ ! -e $M4/new ] || fail "v4: new still exists"
[ ! -e $M3/new ] || fail "v3: new still exists"
step "both clients see the snapshot's files"

# Handles of files in both stay good: the open survivor reads the old contents
# through its handle; the vanished file's handle is stale.
echo 3 > /proc/sys/vm/drop_caches
[ "$(cat <&3)" = "as in the snapshot" ] || fail "the open survivor reads '$(cat <&3)'"
if cat <&4 > /dev/null 2>&1; then fail "v4: the vanished file's open still reads"; fi
if cat <&5 > /dev/null 2>&1; then fail "v3: the vanished file's handle still reads"; fi
exec 3<&- 4<&- 5<&-
step "a survivor keeps its handle, a vanished file's answers stale"

# The share goes on: writes and reads after the rollback, on both.
echo after > $M4/after
[ "$(cat $M3/after 2>/dev/null || true)" = after ] || eventually $M3/after after
rm $M4/after $M4/kept $M4/dir/file
rmdir $M4/dir
[ -z "$(ls -A $M4)" ] || fail "export not empty: $(ls -A $M4)"
umount $M4 $M3
step "the share works after it; clean up and unmount"
echo "kernel client rollback: all steps passed"
