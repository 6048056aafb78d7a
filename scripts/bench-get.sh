#!/usr/bin/env bash
# Measures, side by side in one run on loopback:
#   - SHA-256 merkle hashing throughput (stampede manifest) on one core and all;
#   - `stampede get` from `stampede serve` vs `curl -o` from the same server,
#     same file, alternating, REPS times each: throughput ratio;
#   - peak memory (max RSS) of `stampede get` and curl.
# Usage: scripts/bench-get.sh [SIZE_MiB (default 1024)] [REPS (default 3)]
set -euo pipefail
cd "$(dirname "$0")/.."
size_mib=${1:-1024}
reps=${2:-3}
bin=$PWD/bin/stampede
go build -o "$bin" ./cmd/stampede
if ! [ -x /usr/bin/time ] || ! command -v curl >/dev/null; then
	echo "need /usr/bin/time and curl: install them with sudo scripts/install-bench-deps.sh"; exit 1
fi

work=$(mktemp -d -p "${BENCH_DIR:-$PWD}" .bench.XXXXXX)
server_pid=
cleanup() {
	[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT INT TERM
mkdir -p "$work/www"
dd if=/dev/urandom of="$work/www/file.bin" bs=1M count="$size_mib" status=none

echo "== hashing ${size_mib} MiB (file in page cache)"
cat "$work/www/file.bin" >/dev/null
"$bin" manifest --workers 1 --stats --root "$work/www/file.bin" 2>&1 >/dev/null | sed 's/^/1 core:    /'
"$bin" manifest --workers 0 --stats --root "$work/www/file.bin" 2>&1 >/dev/null | sed 's/^/all cores: /'

"$bin" serve "$work/www" --listen 127.0.0.1:0 --cache-dir "$work/cache" 2>"$work/serve.log" &
server_pid=$!
for _ in $(seq 100); do
	addr=$(grep -o 'http://[0-9.:]*' "$work/serve.log" | head -1 || true)
	[ -n "$addr" ] && break
	sleep 0.1
done
[ -n "$addr" ] || { cat "$work/serve.log"; exit 1; }
url=$addr/file.bin
curl -sf -o /dev/null "$addr/.well-known/stampede/manifest/file.bin" # warm the manifest cache

measure() { # name cmd... ; prints "seconds maxrss_kib"
	local out=$work/out.$1; shift
	rm -f "$out"
	/usr/bin/time -f '%e %M' -o "$work/time" "$@" "$out" >/dev/null 2>"$work/err" || { cat "$work/err"; exit 1; }
	cmp -s "$out" "$work/www/file.bin" || { echo "$out differs from the source"; exit 1; }
	rm -f "$out"
	cat "$work/time"
}
echo "== get vs curl, ${size_mib} MiB over loopback, $reps runs each, alternating"
: >"$work/results"
for i in $(seq "$reps"); do
	echo "curl $(measure curl curl -sf "$url" -o)" | tee -a "$work/results"
	echo "get  $(measure get "$bin" get -q "$url" -o)" | tee -a "$work/results"
done
python3 - "$work/results" "$size_mib" <<'PY'
import sys, statistics
rows = [l.split() for l in open(sys.argv[1])]
mib = float(sys.argv[2])
def stats(name):
    t = sorted(float(r[1]) for r in rows if r[0] == name)
    rss = max(int(r[2]) for r in rows if r[0] == name)
    return statistics.median(t), t[0], t[-1], rss
c, g = stats("curl"), stats("get")
for name, s in (("curl -o", c), ("stampede get", g)):
    print(f"{name:13s} median {mib/s[0]:7.0f} MiB/s  (times {s[1]:.2f}-{s[2]:.2f} s)  max RSS {s[3]/1024:.0f} MiB")
print(f"throughput ratio get/curl (median times): {c[0]/g[0]:.2f}")
PY
