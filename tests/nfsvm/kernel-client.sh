#!/bin/sh
# Guest side of crates/shoal/tests/nfs_kernel.rs: the Linux kernel's NFSv3 client against
# `shoal serve` (tests/nfsvm/serve-restartable.sh) at 10.99.0.1, sharing $EXPORT.
# Prints "ok: <step>" after each step; any failure ends the script with a nonzero status.
set -eu
E=${EXPORT:?}
M=/mnt/share
mkdir -p $M
fail() { echo "FAILED: $*"; exit 1; }
step() { echo "ok: $*"; }
same() { [ "$(md5sum < "$1")" = "$(md5sum < "$2")" ] || fail "$1 and $2 differ"; }
# Busybox has no mount.nfs: the kernel parses the options, and without a portmapper
# it needs both ports (NFS and MOUNT share one).
mount -t nfs -o vers=3,proto=tcp,addr=10.99.0.1,port=2049,mountproto=tcp,mountport=2049,nolock,timeo=20 10.99.0.1:$E $M
grep -q " $M nfs " /proc/mounts || fail "not mounted"
step "mount v3 with port options"

# Write, read back after dropping the client's caches, checksum.
dd if=/dev/urandom of=/tmp/big bs=1M count=24 2>/dev/null
cp /tmp/big $M/big
sync
echo 3 > /proc/sys/vm/drop_caches
same /tmp/big $M/big
[ "$(stat -c %s $M/big)" = 25165824 ] || fail "size of big"
step "write 24 MiB, read back, checksum"

# Namespace operations and attributes.
echo hello > $M/f
mv $M/f $M/g
[ ! -e $M/f ] && [ "$(cat $M/g)" = hello ] || fail rename
ln $M/g $M/h
[ "$(stat -c %h $M/g)" = 2 ] && [ "$(stat -c %i $M/g)" = "$(stat -c %i $M/h)" ] || fail link
ln -s g $M/s
[ "$(readlink $M/s)" = g ] && [ "$(cat $M/s)" = hello ] || fail symlink
chmod 640 $M/g
[ "$(stat -c %a $M/h)" = 640 ] || fail chmod
truncate -s 3 $M/g
[ "$(cat $M/h)" = hel ] || fail "truncate down"
truncate -s 100000 $M/g
[ "$(stat -c %s $M/h)" = 100000 ] || fail "truncate up"
mkdir -p $M/d/e
rmdir $M/d/e
rm $M/h
[ "$(stat -c %h $M/g)" = 1 ] || fail "link count after remove"
mknod $M/fifo p
[ "$(stat -c %F $M/fifo)" = "fifo" ] || fail mknod
rm $M/fifo
echo 3 > /proc/sys/vm/drop_caches
[ "$(stat -c %a:%s $M/g)" = 640:100000 ] || fail "attributes after dropping caches"
step "create, rename, link, symlink, chmod, truncate, mknod, remove"

# A tree of real files through tar, compared with the original by content and metadata.
mkdir -p /tmp/src/links
cp -a /lib/modules /bin /sbin /tmp/src/
for i in 1 2 3; do ln -s ../modules "/tmp/src/links/dir$i"; ln -s "missing-$i" "/tmp/src/links/dangling$i"; done
ln /tmp/src/modules/* /tmp/src/links/ 2>/dev/null || true
chmod 750 /tmp/src/links
tar -C /tmp/src -cf /tmp/tree.tar .
mkdir $M/tree
tar -C $M/tree -xf /tmp/tree.tar
sync
echo 3 > /proc/sys/vm/drop_caches
# Name, type, mode, link target, link count, and size (but not of directories, whose
# size is the file system's own).
listing() {
    (cd "$1" && find . | sort | while read -r p; do
        if [ -d "$p" ] && [ ! -L "$p" ]; then stat -c '%N %F %a %h' "$p"; else stat -c '%N %F %a %h %s' "$p"; fi
    done)
}
listing /tmp/src > /tmp/l1
listing $M/tree > /tmp/l2
diff /tmp/l1 /tmp/l2 || fail "unpacked metadata differs"
(cd /tmp/src && find . -type f | sort | while read -r p; do cmp "$p" "$M/tree/$p" || echo "$p"; done) > /tmp/differ
[ -s /tmp/differ ] && fail "contents differ: $(cat /tmp/differ)"
step "tar unpack of $(wc -l < /tmp/l1) entries compares equal"

# Restart the server under the mount: an open file, the working directory and new
# operations carry on with the handles the client already holds.
cd $M/tree
exec 3< $M/big
nc 10.99.0.1 7000 < /dev/null || fail "asking for a restart"
tries=0
until nc 10.99.0.1 7001 < /dev/null 2>/dev/null; do
    tries=$((tries + 1))
    [ $tries -lt 300 ] || fail "the server did not come back"
    sleep 0.1
done
echo after-restart > ./new-file
[ "$(cat ./new-file)" = after-restart ] || fail "write after restart"
same /tmp/big /proc/self/fd/3
exec 3<&-
echo 3 > /proc/sys/vm/drop_caches
same /tmp/big $M/big
cd /
step "server restarted under the mount; handles still valid"

umount $M
grep -q " $M nfs " /proc/mounts && fail "still mounted"
step "unmount"

# Through the portmapper: no port options at all.
mount -t nfs -o vers=3,proto=tcp,addr=10.99.0.1,nolock 10.99.0.1:$E $M
same /tmp/big $M/big
[ "$(cat $M/tree/new-file)" = after-restart ] || fail "new-file after remount"
rm -r $M/tree $M/big $M/g $M/s
rmdir $M/d
[ -z "$(ls -A $M)" ] || fail "export not empty: $(ls -A $M)"
umount $M
step "mount v3 through the portmapper"
echo "kernel client: all steps passed"
