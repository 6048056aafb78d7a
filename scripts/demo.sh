#!/usr/bin/env bash
# The quickstart demo: serve a generated file on loopback with `stampede serve`
# and download it with `stampede get`, verified piece by piece. Needs no root.
# (The flash-crowd demo, `stampede demo`, replaces this once the swarm lands.)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$PWD/bin/stampede
[ -x "$bin" ] || go build -o "$bin" ./cmd/stampede
size=${SIZE:-256M}

work=$(mktemp -d)
server_pid=
cleanup() {
	[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT INT TERM

mkdir -p "$work/www" "$work/dl"
echo "== generating a $size file"
head -c "$size" /dev/urandom >"$work/www/big.bin" 2>/dev/null || \
	dd if=/dev/urandom of="$work/www/big.bin" bs=1M count="${size%M}" status=none

echo "== stampede serve $work/www --listen 127.0.0.1:0"
"$bin" serve "$work/www" --listen 127.0.0.1:0 2>"$work/serve.log" &
server_pid=$!
for _ in $(seq 100); do
	addr=$(grep -o 'http://[0-9.:]*' "$work/serve.log" | head -1 || true)
	[ -n "$addr" ] && break
	sleep 0.1
done
[ -n "$addr" ] || { echo "server did not start:"; cat "$work/serve.log"; exit 1; }

echo "== stampede get $addr/big.bin"
"$bin" get "$addr/big.bin" -o "$work/dl/big.bin" --json >"$work/get.json"
cat "$work/get.json"

echo "== checking the copy"
a=$(sha256sum <"$work/www/big.bin" | cut -d' ' -f1)
b=$(sha256sum <"$work/dl/big.bin" | cut -d' ' -f1)
[ "$a" = "$b" ] && echo "identical: sha256 $a" || { echo "MISMATCH"; exit 1; }

echo "== origin metrics"
curl -s "$addr/metrics" | grep -v '^#' || true
