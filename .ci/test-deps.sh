#!/usr/bin/env bash
# Installs what the test suite needs beyond cargo, on a fresh Debian machine, as root:
# pjdfstest (the Rust POSIX test suite, run against the FUSE mount) with its build
# dependency libacl, the unprivileged users pjdfstest switches to, and libnfs-utils
# (nfs-cp, nfs-cat, nfs-ls: real NFS clients for the daemon's tests), and the kernel
# NFS client harness (qemu, busybox, Debian's kernel unpacked), and for the browser
# UI: Debian's chromium and the UI's npm packages (`npm ci` in ui/), and NFS-Ganesha
# (with rpcbind) for the load generator's test against a second server, and
# schemathesis (pip) to fuzz the admin API from docs/openapi.json, and libiscsi-bin
# (iscsi-test-cu, iscsi-inq) and tgt, the iSCSI conformance suite and the peer target
# it also runs against, and open-iscsi, fio and e2fsprogs for the kernel initiator's
# guest. Idempotent.
set -euo pipefail
PJDFSTEST_VERSION=0.2.2
if ! dpkg -s libacl1-dev libnfs-utils chromium openssl curl nfs-ganesha nfs-ganesha-vfs rpcbind libiscsi-bin tgt open-iscsi fio e2fsprogs >/dev/null 2>&1; then
    apt-get update -qq
    apt-get install -y -qq libacl1-dev acl libnfs-utils chromium openssl curl nfs-ganesha nfs-ganesha-vfs rpcbind libiscsi-bin tgt open-iscsi fio e2fsprogs >/dev/null
fi
command -v node npm >/dev/null || { echo "test-deps: node and npm are needed for the UI" >&2; exit 1; }
(cd "$(dirname "$0")/../ui" && npm ci --no-audit --no-fund --loglevel=error)
command -v nfs-cp nfs-cat nfs-ls ganesha.nfsd rpcbind iscsi-test-cu iscsi-inq tgtd tgtadm iscsid iscsiadm fio mkfs.ext4 fstrim >/dev/null
if ! command -v st >/dev/null 2>&1; then
    pip3 install -q schemathesis==4.32.5 2>/dev/null || pip3 install -q --break-system-packages schemathesis==4.32.5
fi
command -v st >/dev/null
if [ ! -e /dev/fuse ]; then
    echo "test-deps: /dev/fuse is missing; the FUSE tests need it" >&2
    exit 1
fi
getent group nogroup >/dev/null || groupadd nogroup
id tests >/dev/null 2>&1 || useradd -M -U tests
if ! "$HOME/.cargo/bin/pjdfstest" -l >/dev/null 2>&1; then
    cargo install --locked -q pjdfstest --version "$PJDFSTEST_VERSION"
fi
"$HOME/.cargo/bin/pjdfstest" -l >/dev/null
"$(dirname "$0")/../tests/nfsvm/harness/setup.sh"
echo "test-deps: pjdfstest $PJDFSTEST_VERSION, users nobody and tests, libnfs-utils, chromium and ui/node_modules ready"
