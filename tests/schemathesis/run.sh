#!/usr/bin/env bash
# Fuzzes the admin HTTP API from docs/openapi.json with schemathesis against a real
# `shoal serve` (login required, the daemon's bearer token), then checks the daemon is
# still up and its pool consistent. Usage: tests/schemathesis/run.sh [MAX_EXAMPLES]
#
# Checks: no 5xx, every status code and content type documented, every response body
# valid against its schema. Schemathesis's auth checks are left out: they send a valid
# bearer token together with a forged cookie and expect a refusal, while shoal rightly
# accepts any one valid credential (refusals of missing and forged credentials are
# tested in crates/server/tests/admin_ui.rs and here below with curl).
set -euo pipefail
cd "$(dirname "$0")/../.."
examples="${1:-25}"
shoal="$(pwd)/target/release/shoal"
[ -x "$shoal" ] || cargo build --release -p shoal
work="$(mktemp -d)"
export SHOAL_STATE_DIR="$work/state"
"$shoal" pool create --dir "$work/devs" --size 256M tank raidz1 a b c >/dev/null
"$shoal" fs create tank/home >/dev/null
echo -n "schemathesis-pass" | "$shoal" passwd --stdin >/dev/null
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
nfs_port="$(port)"
api_port="$(port)"
"$shoal" serve --listen "127.0.0.1:$nfs_port" --api "127.0.0.1:$api_port" \
    --share 'tank/home=*(rw)' --login-required >"$work/serve.log" 2>&1 &
daemon=$!
trap 'kill $daemon 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$api_port/api/v1/session" && break
    sleep 0.1
done
url="http://127.0.0.1:$api_port"
token="$(cat "$SHOAL_STATE_DIR/api-token")"
# Missing and forged credentials are refused.
for auth in "" "Authorization: Bearer forged" "Cookie: shoal_session=forged"; do
    code="$(curl -s -o /dev/null -w '%{http_code}' ${auth:+-H "$auth"} "$url/api/v1/pools")"
    [ "$code" = 401 ] || { echo "schemathesis: '$auth' got $code, not 401" >&2; exit 1; }
done
st run docs/openapi.json --url "$url" -H "Authorization: Bearer $token" \
    --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance \
    --max-examples "$examples" --workers 1 --no-color --seed 1
kill -0 "$daemon" || { echo "schemathesis: the daemon died" >&2; cat "$work/serve.log" >&2; exit 1; }
if grep -q panicked "$work/serve.log"; then
    echo "schemathesis: the daemon panicked" >&2; cat "$work/serve.log" >&2; exit 1
fi
kill -TERM "$daemon"; wait "$daemon"
"$shoal" pool check tank >/dev/null
echo "schemathesis: the API held, the daemon stayed up, the pool checks clean"
