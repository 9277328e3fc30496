#!/bin/bash
# Server side of the kernel-client tests (run by nfsvm's run.sh inside its namespace):
# runs `shoal serve` with the given arguments, and restarts it (with $RESTART_SIGNAL,
# TERM by default; KILL for a crash, which with --simulate-power-loss is a power cut,
# then a fresh process on the same state) each time something connects to TCP port
# 7000, so a guest can restart the server under its own mount with `nc 10.99.0.1
# 7000`. Once the new process runs, port 7001 accepts one connection: the guest waits
# for it to know that what it does next meets the new process. TCP port 7010 takes
# one administrator command per connection (`admin-command.sh`: `snapshot ...` and
# `fs ...` only), so a guest can snapshot or roll back the share under its mounts.
# Usage: serve-restartable.sh SHOAL_BINARY SERVE_ARGS...
set -u
shoal=$1
shift
SHOAL_BIN=$shoal busybox nc -ll -p 7010 -e "$(dirname "$0")/admin-command.sh" &
start() {
    "$shoal" serve "$@" &
    pid=$!
}
start "$@"
while busybox nc -l -p 7000 </dev/null >/dev/null; do
    kill -"${RESTART_SIGNAL:-TERM}" "$pid"
    wait "$pid"
    echo "serve-restartable: shoal serve exited with $?; starting it again" >&2
    start "$@"
    busybox nc -l -p 7001 </dev/null >/dev/null
done
