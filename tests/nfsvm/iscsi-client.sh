#!/bin/sh
# Guest side of crates/shoal/tests/iscsi_kernel.rs: the Linux kernel's iSCSI initiator
# (iscsi_tcp and sd_mod; open-iscsi's iscsid and iscsiadm, mkfs.ext4, e2fsck, fstrim and
# fio carried in from the host) against `shoal serve` at 10.99.0.1 serving $TARGET with
# mutual CHAP. Logs in with CRC32C header and data digests, makes an ext4 filesystem on
# the LUN, runs fio with verification, restarts the server (kill -9, and with the
# daemon's simulated power loss when the host asks for it) under fsync'ed writes and
# verifies them after, checks the filesystem, then deletes a large file and trims it
# (the host checks the pool gave the space back). Prints "ok: <step>" after each step;
# any failure ends the script with a nonzero status.
set -eu
T=${TARGET:?}
P=10.99.0.1:3260
fail() { echo "FAILED: $*"; cat /tmp/iscsid.log; iscsiadm -m session -P 3 2>&1 | tail -20; dmesg | tail -30; exit 1; }
step() { echo "ok: $*"; }

mkdir -p /etc/iscsi /var/lib/iscsi/nodes /var/lib/iscsi/send_targets /var/lib/iscsi/ifaces \
    /run/lock/iscsi /var/lock /mnt/vol
# iscsid serves only root, whom it looks up by name.
echo "root:x:0:0:root:/root:/bin/sh" > /etc/passwd
echo "root:x:0:" > /etc/group
echo "InitiatorName=iqn.2026-12.org.shoal:guest" > /etc/iscsi/initiatorname.iscsi
cat > /etc/iscsi/iscsid.conf <<CONF
node.startup = manual
node.session.timeo.replacement_timeout = 180
node.conn[0].timeo.noop_out_interval = 5
node.conn[0].timeo.noop_out_timeout = 10
node.session.auth.authmethod = CHAP
node.session.auth.username = $CHAP_USER
node.session.auth.password = $CHAP_SECRET
node.session.auth.username_in = $MUTUAL_USER
node.session.auth.password_in = $MUTUAL_SECRET
node.conn[0].iscsi.HeaderDigest = CRC32C
node.conn[0].iscsi.DataDigest = CRC32C
CONF
iscsid -f > /tmp/iscsid.log 2>&1 &
sleep 1

iscsiadm -m discovery -t sendtargets -p $P > /tmp/disc || fail "discovery"
grep -q "$T" /tmp/disc || fail "discovery does not list $T: $(cat /tmp/disc)"
step "discovery lists the target"

iscsiadm -m node -T "$T" -p $P --login > /dev/null || fail "login"
for _ in $(seq 100); do [ -b /dev/sda ] && break; sleep 0.2; done
[ -b /dev/sda ] || fail "no /dev/sda after login"
iscsiadm -m session -P 2 > /tmp/session
grep -q "HeaderDigest: CRC32C" /tmp/session || fail "header digest: $(cat /tmp/session)"
grep -q "DataDigest: CRC32C" /tmp/session || fail "data digest"
step "login with mutual CHAP and CRC32C header and data digests"

grep -qx 1 /sys/block/sda/queue/discard_granularity 2>/dev/null || true
[ "$(cat /sys/block/sda/queue/discard_max_bytes)" -gt 0 ] || fail "the disk offers no discard"
mkfs.ext4 -q -F -E nodiscard /dev/sda || fail mkfs
mount -t ext4 /dev/sda /mnt/vol || fail mount
step "mkfs.ext4 and mount"

fio --name=verify --filename=/mnt/vol/fio --size=24M --bs=4k --rw=randwrite --iodepth=8 \
    --ioengine=libaio --direct=1 --verify=crc32c --do_verify=1 --verify_fatal=1 \
    --output=/tmp/fio1 > /dev/null || fail "fio verify: $(cat /tmp/fio1)"
step "fio random writes at depth 8 read back and verify"

# fsync'ed writes while the server is restarted (kill -9, maybe with power loss).
fio --name=durable --filename=/mnt/vol/durable --size=24M --bs=64k --rw=write \
    --ioengine=psync --fsync=1 --verify=crc32c --do_verify=0 --output=/tmp/fio2 > /dev/null &
fio_pid=$!
sleep 4
nc 10.99.0.1 7000 < /dev/null || fail "asking for a restart"
n=0
until nc 10.99.0.1 7001 < /dev/null 2>/dev/null; do
    n=$((n + 1)); [ $n -lt 300 ] || fail "the server did not come back"; sleep 0.2
done
wait $fio_pid || fail "fio under the restart: $(cat /tmp/fio2)"
fio --name=durable --filename=/mnt/vol/durable --size=24M --bs=64k --rw=write \
    --ioengine=psync --verify=crc32c --verify_only --verify_fatal=1 --output=/tmp/fio3 \
    > /dev/null || fail "verify after the restart: $(cat /tmp/fio3)"
step "fsync'ed writes survive a server restart under I/O"

umount /mnt/vol
e2fsck -fn /dev/sda > /tmp/fsck 2>&1 || fail "e2fsck: $(cat /tmp/fsck)"
step "the filesystem checks clean"

mount -t ext4 /dev/sda /mnt/vol
rm -f /mnt/vol/fio /mnt/vol/durable
dd if=/dev/urandom of=/mnt/vol/big bs=1M count=96 2>/dev/null
sync
echo "big written"
rm /mnt/vol/big
sync
fstrim -v /mnt/vol > /tmp/trim || fail "fstrim: $(cat /tmp/trim)"
step "fstrim: $(cat /tmp/trim)"
umount /mnt/vol

iscsiadm -m node -T "$T" -p $P --logout > /dev/null || fail logout
step "logout"
echo "iSCSI kernel client: all steps passed"
