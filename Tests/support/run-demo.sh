#!/usr/bin/env bash
# `make run`: serve the demo store with `docfs serve` and mount it on Mount/ in the foreground.
# Ctrl-C (or `docfs unmount Mount` from another terminal) unmounts; then the server is stopped.
#
# Usage: Tests/support/run-demo.sh [DOCFS_BINARY]   (default .build/release/docfs)
set -euo pipefail
cd "$(dirname "$0")/../.."

docfs=${1:-.build/release/docfs}
store=demo-store
mountpoint=Mount

python3 Tests/support/make-demo-store.py "$store"
mkdir -p "$mountpoint"

# A mount left behind by an earlier run (or a killed daemon) is cleaned first.
if grep -qs " $(realpath "$mountpoint") " /proc/mounts; then
    echo "run: $mountpoint is still mounted from an earlier run; unmounting it"
    "$docfs" unmount "$mountpoint" || fusermount3 -uz "$mountpoint" || true
fi

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url="http://127.0.0.1:$port/"
server_log=$(mktemp -t docfs-serve.XXXXXX.log)

"$docfs" serve "$store" --host 127.0.0.1 --port "$port" >"$server_log" 2>&1 &
server_pid=$!
stop_server() {
    if kill -0 "$server_pid" 2>/dev/null; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
        echo "run: stopped docfs serve (pid $server_pid)"
    fi
}
trap stop_server EXIT

for _ in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
    if ! kill -0 "$server_pid" 2>/dev/null; then
        echo "run: docfs serve exited:" >&2
        cat "$server_log" >&2
        exit 1
    fi
    sleep 0.1
done

cat <<MSG

  docfs serve is serving $store/ at $url (pid $server_pid, log: $server_log)
  Mounting it on $mountpoint/ in the foreground. In another terminal, try:

    ls -l $mountpoint                   # every file is a placeholder: real size, no content yet
    du -sh $mountpoint; du -sh --apparent-size $mountpoint
    find $mountpoint
    cat $mountpoint/README.txt          # downloads on open, evicts again on close
    cat "$mountpoint/Notes/meeting notes.md"
    getfattr -n user.docfs.state "$mountpoint/Archive/random 8MiB.bin"
    xdg-open $mountpoint/Pictures/gradient.png

  Stop with Ctrl-C here, or: $docfs unmount $mountpoint

MSG

status=0
"$docfs" mount "$url" "$mountpoint" --foreground || status=$?
exit "$status"
