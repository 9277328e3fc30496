#!/bin/sh
# Guest side of crates/shoal/tests/nfs_kernel.rs: the Linux kernel's NFSv4.0 client (the
# minor version macOS and older clients speak: SETCLIENTID, RENEW, open and lock owner
# sequence numbers, no sessions) against `shoal serve`
# (tests/nfsvm/serve-restartable.sh) at 10.99.0.1, sharing $EXPORT. mount.nfs and
# flock come from the host (EXTRA_BINS), and $FCNTL_LOCK is tests/nfsvm/fcntl-lock.c
# built statically. Prints "ok: <step>" after each step; any failure ends the script
# with a nonzero status.
set -eu
E=${EXPORT:?}
LK=${FCNTL_LOCK:?}
M=/mnt/share
M2=/mnt/share2
mkdir -p $M $M2 /mnt/v3
fail() { echo "FAILED: $*"; exit 1; }
step() { echo "ok: $*"; }
same() { [ "$(md5sum < "$1")" = "$(md5sum < "$2")" ] || fail "$1 and $2 differ"; }
vers() { sed -n "s|^[^ ]* $1 nfs4 .*vers=\([0-9.]*\).*|\1|p" /proc/mounts; }

mount.nfs 10.99.0.1:$E $M -o vers=4.0,clientaddr=10.99.0.2
[ "$(vers $M)" = 4.0 ] || fail "not 4.0: $(grep $M /proc/mounts)"
step "mount vers=4.0"

dd if=/dev/urandom of=/tmp/big bs=1M count=16 2>/dev/null
cp /tmp/big $M/big
sync
echo 3 > /proc/sys/vm/drop_caches
same /tmp/big $M/big
step "write 16 MiB, read back, checksum"

echo hello > $M/f
mv $M/f $M/g
[ ! -e $M/f ] && [ "$(cat $M/g)" = hello ] || fail rename
ln $M/g $M/h
[ "$(stat -c %h $M/g)" = 2 ] || fail link
ln -s g $M/s
[ "$(readlink $M/s)" = g ] && [ "$(cat $M/s)" = hello ] || fail symlink
chmod 640 $M/g
chown 1234:5678 $M/g
[ "$(stat -c %a:%u:%g $M/h)" = 640:1234:5678 ] || fail "chmod, chown: $(stat -c %a:%u:%g $M/h)"
truncate -s 3 $M/g
[ "$(cat $M/h)" = hel ] || fail "truncate"
mkdir -p $M/d/e
rmdir $M/d/e
rm $M/h $M/s
echo 3 > /proc/sys/vm/drop_caches
[ "$(stat -c %a:%s $M/g)" = 640:3 ] || fail "attributes after dropping caches"
step "create, rename, link, symlink, chmod, chown, truncate, remove"

# A tree of real files through tar and back, compared by content and metadata.
mkdir -p /tmp/src/links
cp -a /lib/modules /bin /sbin /tmp/src/
for i in 1 2 3; do ln -s ../modules "/tmp/src/links/dir$i"; done
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
mkdir /tmp/back
tar -C $M/tree -cf - . | tar -C /tmp/back -xf -
listing /tmp/back > /tmp/l3
diff /tmp/l1 /tmp/l3 || fail "tar back out differs"
step "tar round trip of $(wc -l < /tmp/l1) entries compares equal"

# Locks between two mounts (nosharecache: two superblocks, so only the server can see
# the conflict), released at close.
mount.nfs 10.99.0.1:$E $M2 -o vers=4.0,nosharecache,clientaddr=10.99.0.2
echo data > $M/lockfile
$LK $M/lockfile w 0 100 4 > /tmp/holder &
holder=$!
sleep 1
[ "$(cat /tmp/holder)" = locked ] || fail "first fcntl lock: $(cat /tmp/holder)"
out=$($LK $M2/lockfile w 50 10 0) && fail "conflicting fcntl lock granted"
[ "$out" = "busy w 0 100" ] || fail "conflict reported as '$out'"
out=$($LK $M2/lockfile r 200 10 0) || fail "lock beyond the held range refused: $out"
wait $holder
out=$($LK $M2/lockfile w 50 10 0) || fail "lock still held after close: $out"
flock -x $M/lockfile sleep 4 &
holder=$!
sleep 1
flock -n -x $M2/lockfile true && fail "conflicting flock granted"
wait $holder
flock -n -x $M2/lockfile true || fail "flock still held after its holder exited"
step "fcntl and flock locks conflict between mounts at the server and go at close"

# A read delegation (the server probed the client's callback service at mount), then
# a write over NFSv3 to the same file: the server recalls the delegation on a
# connection of its own to the guest's callback service, the v3 write waits
# (JUKEBOX) until it is returned, and the 4.0 client sees the new data.
mount -t nfs -o vers=3,proto=tcp,addr=10.99.0.1,port=2049,mountproto=tcp,mountport=2049,nolock \
    10.99.0.1:$E /mnt/v3
echo before > $M/dfile
sleep 1
[ "$(cat $M/dfile)" = before ] || fail "dfile before"
exec 5< $M/dfile
echo after > /mnt/v3/dfile
exec 5<&-
[ "$(cat $M/dfile)" = after ] || fail "the 4.0 client kept stale data: $(cat $M/dfile)"
umount /mnt/v3
rm $M/dfile
step "read delegation recalled over the callback path for an NFSv3 write"

# Restart the server under the mount with a file open and a lock held: the client
# finds its client ID stale, sets itself up again and reclaims both in the grace period.
exec 4< $M/big
$LK $M/lockfile w 0 10 120 > /tmp/holder &
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
echo after-restart > $M/new-file
[ "$(cat $M/new-file)" = after-restart ] || fail "write after restart"
same /tmp/big /proc/self/fd/4
exec 4<&-
out=$($LK $M2/lockfile w 5 1 0) && fail "the lock was lost in the restart"
[ "$out" = "busy w 0 10" ] || fail "after restart the conflict reads '$out'"
kill $holder
wait $holder || true
sleep 1
out=$($LK $M2/lockfile w 5 1 0) || fail "lock still held after its holder died: $out"
step "server restarted under the mount; open file and lock reclaimed"

rm -r $M/tree $M/big $M/g $M/lockfile $M/new-file
rmdir $M/d
[ -z "$(ls -A $M | grep -v '^\.nfs')" ] || fail "export not empty: $(ls -A $M)"
umount $M $M2
step "unmount"
echo "kernel client v4.0: all steps passed"
