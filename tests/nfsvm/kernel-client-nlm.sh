#!/bin/sh
# Guest side of crates/shoal/tests/nfs_kernel.rs: the Linux kernel's NFSv3 client with
# locks (no `nolock`: the kernel's lock manager speaks NLM to the server, and the
# guest runs rpcbind and rpc.statd as a stock client machine does) against `shoal
# serve` (tests/nfsvm/serve-restartable.sh) at 10.99.0.1, sharing $EXPORT.
# mount.nfs, rpcbind, rpc.statd and flock come from the host (EXTRA_BINS), and
# $FCNTL_LOCK is tests/nfsvm/fcntl-lock.c built statically. Prints "ok: <step>" after
# each step; any failure ends the script with a nonzero status.
set -eu
E=${EXPORT:?}
LK=${FCNTL_LOCK:?}
M=/mnt/v3
M2=/mnt/v3b
M4=/mnt/v4
mkdir -p $M $M2 $M4
fail() { echo "FAILED: $*"; exit 1; }
step() { echo "ok: $*"; }

# What a client machine runs for NFSv3 locks: rpcbind, then rpc.statd.
cat > /etc/passwd <<EOF
root:x:0:0:root:/root:/bin/sh
_rpc:x:100:65534::/run/rpcbind:/bin/false
statd:x:101:65534::/var/lib/nfs:/bin/false
EOF
printf 'root:x:0:\nnogroup:x:65534:\n' > /etc/group
printf '127.0.0.1 localhost\n10.99.0.2 guest\n10.99.0.1 server\n' > /etc/hosts
hostname guest
# The guest's root directory is 0700: statd, which drops to its own user, must reach
# /etc/netconfig and /var/lib/nfs.
chmod 755 /
mkdir -p /var/lib/nfs/sm /var/lib/nfs/sm.bak /run/rpcbind
chown statd /var/lib/nfs /var/lib/nfs/sm /var/lib/nfs/sm.bak
rpcbind -w || fail "rpcbind did not start"
rpc.statd || fail "rpc.statd did not start"
step "rpcbind and rpc.statd running"

# The mount a user types, without nolock: mount.nfs finds MOUNT and NFS through the
# server's portmapper on 111, and the kernel's lock manager finds NLM there.
mount.nfs 10.99.0.1:$E $M -o vers=3
grep " $M nfs " /proc/mounts | grep -q nolock && fail "mounted with nolock"
grep " $M nfs " /proc/mounts | grep -q "local_lock=none" || fail "locks are not sent to the server: $(grep " $M " /proc/mounts)"
# A second mount of the export is another superblock: a conflict between the two is
# found by the server or not at all.
mount.nfs 10.99.0.1:$E $M2 -o vers=3,nosharecache
step "mount vers=3 without nolock through the portmapper"

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
step "fcntl and flock locks conflict between processes and mounts at the server and go at close"

# A waiting lock (F_SETLKW): the server answers BLOCKED, and when the holder lets go
# it takes the lock for the waiter and calls the guest's lock manager back (GRANTED).
$LK $M/lockfile w 0 100 3 > /tmp/holder &
holder=$!
sleep 1
[ "$(cat /tmp/holder)" = locked ] || fail "holder: $(cat /tmp/holder)"
$LK $M2/lockfile W 10 10 1 > /tmp/waiter &
waiter=$!
sleep 1
[ -z "$(cat /tmp/waiter)" ] || fail "the waiter got the lock while it was held: $(cat /tmp/waiter)"
wait $holder
wait $waiter || fail "the waiter failed: $(cat /tmp/waiter)"
[ "$(cat /tmp/waiter)" = locked ] || fail "waiter: $(cat /tmp/waiter)"
step "a waiting lock is granted when its holder lets go"

# NFSv3 and NFSv4 locks on the same file see each other.
mount -t nfs4 -o vers=4.1,addr=10.99.0.1,clientaddr=10.99.0.2 10.99.0.1:$E $M4
$LK $M/lockfile w 0 100 3 > /tmp/holder &
holder=$!
sleep 1
[ "$(cat /tmp/holder)" = locked ] || fail "v3 holder: $(cat /tmp/holder)"
out=$($LK $M4/lockfile w 50 10 0) && fail "a v4 lock was granted over a v3 lock"
[ "$out" = "busy w 0 100" ] || fail "v4 sees the v3 lock as '$out'"
wait $holder
$LK $M4/lockfile w 0 100 3 > /tmp/holder &
holder=$!
sleep 1
[ "$(cat /tmp/holder)" = locked ] || fail "v4 holder: $(cat /tmp/holder)"
out=$($LK $M2/lockfile r 50 10 0) && fail "a v3 lock was granted over a v4 lock"
[ "$out" = "busy w 0 100" ] || fail "v3 sees the v4 lock as '$out'"
wait $holder
out=$($LK $M2/lockfile w 0 0 0) || fail "whole file still locked: $out"
umount $M4
step "v3 (NLM) and v4 locks conflict both ways"

# Restart the server under the mount with a lock held: the server tells the guest's
# status monitor (SM_NOTIFY), the kernel reclaims the lock in the grace period, and
# the lock still excludes the other mount afterwards.
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
# A new lock waits out the grace period (the kernel retries it), then meets the
# reclaimed lock.
out=$($LK $M2/lockfile w 5 1 0) && fail "the lock was lost in the restart"
[ "$out" = "busy w 0 10" ] || fail "after restart the conflict reads '$out'"
kill $holder
wait $holder || true
sleep 1
out=$($LK $M2/lockfile w 5 1 0) || fail "lock still held after its holder died: $out"
step "server restarted under the mount; the lock was reclaimed after SM_NOTIFY"

rm $M/lockfile
umount $M $M2
step "unmount"
echo "kernel client nlm: all steps passed"
