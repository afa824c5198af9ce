#!/usr/bin/env bash
# Starts moto's S3 server on 127.0.0.1 for docfs's tests, waits until it answers, creates the
# buckets named on the command line, and prints `PORT PID` on stdout. Stop it with
#   Tests/support/start-moto.sh stop PID
# which kills that PID only. moto comes from `python3 -m pip install 'moto[server]'`.
#
#   Tests/support/start-moto.sh [--port N] [--log FILE] [BUCKET...]
#
# Exits non-zero with a message on stderr when moto is missing or does not start: a test that
# uses this must fail, not skip.
set -euo pipefail

if [[ "${1:-}" == "stop" ]]; then
    pid="${2:?usage: start-moto.sh stop PID}"
    kill -TERM "$pid" 2>/dev/null || exit 0
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || exit 0; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    exit 0
fi

port=""
log="/dev/null"
buckets=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --port) port="$2"; shift 2 ;;
        --log) log="$2"; shift 2 ;;
        *) buckets+=("$1"); shift ;;
    esac
done

if ! python3 -c 'import moto.server' 2>/dev/null; then
    echo "moto's server is not installed: run python3 -m pip install 'moto[server]'" >&2
    exit 1
fi
# moto_server, with each key write's If-Match check and the write one step (see the script).
moto=(python3 "$(dirname "$0")/moto_server_atomic.py")
if [[ -z "$port" ]]; then
    port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')"
fi

"${moto[@]}" -H 127.0.0.1 -p "$port" >"$log" 2>&1 &
pid=$!

for _ in $(seq 300); do
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "moto_server exited before answering (see $log)" >&2
        exit 1
    fi
    if python3 - "$port" <<'EOF' 2>/dev/null; then
import sys, urllib.request
urllib.request.urlopen("http://127.0.0.1:%s/moto-api/" % sys.argv[1], timeout=1)
EOF
        break
    fi
    sleep 0.1
done
if ! python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 1)" "$port" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    echo "moto_server did not answer on port $port within 30 s" >&2
    exit 1
fi

if [[ ${#buckets[@]} -gt 0 ]]; then
    if ! python3 - "$port" "${buckets[@]}" <<'EOF'; then
import sys, boto3
s3 = boto3.client("s3", endpoint_url="http://127.0.0.1:%s" % sys.argv[1], region_name="us-east-1",
                  aws_access_key_id="testing", aws_secret_access_key="testing")
for bucket in sys.argv[2:]:
    s3.create_bucket(Bucket=bucket)
EOF
        kill -TERM "$pid" 2>/dev/null || true
        echo "could not create the buckets (is boto3 installed?)" >&2
        exit 1
    fi
fi

echo "$port $pid"
