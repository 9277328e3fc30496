#!/bin/sh
# Guest side of crates/shoal/tests/nfs_kernel.rs: the Linux kernel's NFSv4.1 and 4.2
# client against `shoal serve` (tests/nfsvm/serve-restartable.sh) at 10.99.0.1, sharing
# $EXPORT. mount.nfs and flock come from the host (EXTRA_BINS), and $FCNTL_LOCK is
# tests/nfsvm/fcntl-lock.c built statically. Prints "ok: <step>" after each step; any failure ends the
# script with a nonzero status.
set -eu
E=${EXPORT:?}
LK=${FCNTL_LOCK:?}
M=/mnt/share
R=/mnt/root
mkdir -p $M $R
fail() { echo "FAILED: $*"; exit 1; }
step() { echo "ok: $*"; }
same() { [ "$(md5sum < "$1")" = "$(md5sum < "$2")" ] || fail "$1 and $2 differ"; }
vers() { sed -n "s|^[^ ]* $1 nfs4 .*vers=\([0-9.]*\).*|\1|p" /proc/mounts; }

# The mount a user types: mount.nfs negotiates the version itself (4.2 first).
mount.nfs 10.99.0.1:$E $M -o clientaddr=10.99.0.2
[ "$(vers $M)" = 4.2 ] || fail "negotiated $(vers $M), not 4.2: $(grep $M /proc/mounts)"
umount $M
step "mount.nfs with no version option negotiates 4.2"

# The pseudo-filesystem: / shows the path down to the share.
mount -t nfs4 -o vers=4.1,addr=10.99.0.1,clientaddr=10.99.0.2 10.99.0.1:/ $R
first=$(echo "$E" | cut -d/ -f2)
ls $R | grep -qx "$first" || fail "/ does not list $first: $(ls $R)"
[ -d "$R$E" ] || fail "$E not reachable from /"
step "pseudo-filesystem root lists the export"

mount -t nfs4 -o vers=4.1,addr=10.99.0.1,clientaddr=10.99.0.2 10.99.0.1:$E $M
[ "$(vers $M)" = 4.1 ] || fail "not 4.1"
dd if=/dev/urandom of=/tmp/big bs=1M count=24 2>/dev/null
cp /tmp/big $M/big
sync
echo 3 > /proc/sys/vm/drop_caches
same /tmp/big $M/big
same /tmp/big "$R$E/big"
step "vers=4.1: write 24 MiB, read back, checksum"

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
chown 1234:5678 $M/g
[ "$(stat -c %u:%g $M/h)" = 1234:5678 ] || fail "chown: $(stat -c %u:%g $M/h)"
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
step "create, rename, link, symlink, chmod, chown, truncate, mknod, remove"

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
tar -C $M/tree -cf /tmp/back.tar .
mkdir /tmp/back
tar -C /tmp/back -xf /tmp/back.tar
listing /tmp/back > /tmp/l3
diff /tmp/l1 /tmp/l3 || fail "tar back out differs"
step "tar round trip of $(wc -l < /tmp/l1) entries compares equal"

# Locks. The same export mounted a second time (4.2, nosharecache) is another superblock, so
# the client's own lock table cannot see the first mount's locks: a conflict between
# the two mounts is found by the server or not at all.
M2=/mnt/share2
mkdir -p $M2
mount -t nfs4 -o vers=4.2,nosharecache,addr=10.99.0.1,clientaddr=10.99.0.2 10.99.0.1:$E $M2
echo data > $M/lockfile
$LK $M/lockfile w 0 100 4 > /tmp/holder &
holder=$!
sleep 1
[ "$(cat /tmp/holder)" = locked ] || fail "first fcntl lock: $(cat /tmp/holder)"
out=$($LK $M2/lockfile w 50 10 0) && fail "conflicting fcntl lock granted"
[ "$out" = "busy w 0 100" ] || fail "conflict reported as '$out'"
out=$($LK $M2/lockfile r 200 10 0) || fail "lock beyond the held range refused: $out"
out=$($LK $M/lockfile w 50 10 0) && fail "conflicting fcntl lock granted on the same mount"
wait $holder
out=$($LK $M2/lockfile w 50 10 0) || fail "lock still held after close: $out"
flock -x $M/lockfile sleep 4 &
holder=$!
sleep 1
flock -n -x $M2/lockfile true && fail "conflicting flock granted"
wait $holder
flock -n -x $M2/lockfile true || fail "flock still held after its holder exited"
step "fcntl and flock locks conflict between mounts at the server and go at close"

# An open file survives its unlink, without a silly-rename, until its last close.
dd if=/dev/urandom of=$M/doomed bs=1k count=64 2>/dev/null
cp $M/doomed /tmp/doomed
exec 3< $M/doomed
rm $M/doomed
[ -e $M/doomed ] && fail "name still there after rm"
ls -A $M | grep -q '^\.nfs' && fail "client silly-renamed: $(ls -A $M)"
same /tmp/doomed /proc/self/fd/3
exec 3<&-
step "open file survives its unlink until close"

umount $M
umount $R
step "unmount"

# NFSv4.2: SEEK, DEALLOCATE (punch hole) and COPY (copy_file_range) reach the server.
mount -t nfs4 -o vers=4.2,addr=10.99.0.1,clientaddr=10.99.0.2 10.99.0.1:$E $M
[ "$(vers $M)" = 4.2 ] || fail "not 4.2"
same /tmp/big $M/big
cp $M/big $M/big2
same /tmp/big $M/big2
fallocate -p -o 0 -l 1048576 $M/big2 2>/dev/null || true
[ "$(stat -c %s $M/big2)" = 25165824 ] || fail "size after punch"
rm $M/big2
step "vers=4.2: read, copy, punch hole"

# Restart the server under the mount with a file open and a lock held: the client
# reclaims both in the grace period, the handles it holds stay valid, and the lock
# still excludes the other mount afterwards.
cd $M/tree
exec 4< $M/big
$LK $M/lockfile w 0 10 60 > /tmp/holder &
holder=$!
sleep 1
[ "$(cat /tmp/holder)" = locked ] || fail "lock before restart: $(cat /tmp/holder)"
nc 10.99.0.1 7000 < /dev/null || fail "asking for a restart"
tries=0
until nc 10.99.0.1 7001 < /dev/null 2>/dev/null; do
    tries=$((tries + 1))
    [ $tries -lt 300 ] || fail "the server did not come back"
    sleep 0.1
done
echo after-restart > ./new-file
[ "$(cat ./new-file)" = after-restart ] || fail "write after restart"
same /tmp/big /proc/self/fd/4
exec 4<&-
out=$($LK $M2/lockfile w 5 1 0) && fail "the lock was lost in the restart"
[ "$out" = "busy w 0 10" ] || fail "after restart the conflict reads '$out'"
kill $holder
wait $holder || true
out=$($LK $M2/lockfile w 5 1 0) || fail "lock still held after its holder died: $out"
echo 3 > /proc/sys/vm/drop_caches
same /tmp/big $M/big
cd /
step "server restarted under the mount; open file and lock reclaimed"

rm -r $M/tree $M/big $M/g $M/s $M/lockfile
rmdir $M/d
[ -z "$(ls -A $M)" ] || fail "export not empty: $(ls -A $M)"
umount $M $M2
step "clean up and unmount"
echo "kernel client v4: all steps passed"
