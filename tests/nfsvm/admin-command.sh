#!/bin/sh
# Server side of the kernel-client tests: one administrator command a guest asks for
# over TCP port 7010 (serve-restartable.sh listens there and runs this per
# connection). Reads one line, runs `shoal LINE` against the running daemon if LINE
# is a `snapshot` or `fs` command, and answers with its output and "exit N".
# Word splitting of LINE is on purpose: it is the command's argument list.
read -r line
case "$line" in
snapshot\ * | fs\ *)
    # shellcheck disable=SC2086
    "${SHOAL_BIN:?}" $line 2>&1
    echo "exit $?"
    ;;
*)
    echo "refused: only snapshot and fs commands"
    echo "exit 2"
    ;;
esac
