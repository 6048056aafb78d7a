#!/usr/bin/env bash
# Measures `stampede gateway` on loopback, side by side in one run:
#   - warm cache: curl through the gateway (curl -x) vs curl straight from
#     `stampede serve`, same file, alternating, REPS times each, body to
#     /dev/null: median throughput and their ratio;
#   - cold: time to first byte and total time through the gateway for
#     100 MiB files it has never seen (a fresh file each time; the origin's
#     manifest is computed beforehand), next to curl straight from serve and
#     to `stampede get` (which joins the swarm, as the gateway's node does)
#     of other fresh 100 MiB files;
#   - the gateway's peak RSS (VmHWM) over the whole run.
# Usage: scripts/bench-gateway.sh [SIZE_MiB (default 1024)] [REPS (default 5)]
set -euo pipefail
cd "$(dirname "$0")/.."
size_mib=${1:-1024}
reps=${2:-5}
bin=$PWD/bin/stampede
go build -o "$bin" ./cmd/stampede
command -v curl >/dev/null || { echo "need curl: install it with sudo scripts/install-bench-deps.sh"; exit 1; }

work=$(mktemp -d -p "${BENCH_DIR:-$PWD}" .bench.XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
	rm -rf "$work"
}
trap cleanup EXIT INT TERM
mkdir -p "$work/www"
dd if=/dev/urandom of="$work/www/big.bin" bs=1M count="$size_mib" status=none
for i in $(seq "$reps"); do
	dd if=/dev/urandom of="$work/www/cold$i.bin" bs=1M count=100 status=none
	dd if=/dev/urandom of="$work/www/getcold$i.bin" bs=1M count=100 status=none
done

addr_of() { # log file: waits for "http://ADDR/" in it
	for _ in $(seq 100); do
		a=$(grep -o 'http://[0-9.:]*' "$1" | head -1 || true)
		[ -n "$a" ] && { echo "$a"; return; }
		sleep 0.1
	done
	cat "$1" >&2
	exit 1
}
"$bin" serve "$work/www" --listen 127.0.0.1:0 --cache-dir "$work/mcache" --warm -q 2>"$work/serve.log" &
pids+=($!)
origin=$(addr_of "$work/serve.log")
"$bin" gateway --listen 127.0.0.1:0 --cache-dir "$work/gcache" --cache-size 8GiB --peer-listen 127.0.0.1:0 -q 2>"$work/gw.log" &
gw_pid=$!
pids+=($gw_pid)
gw=$(addr_of "$work/gw.log")
# Every manifest computed before anything is measured.
for f in big.bin $(seq -f 'cold%g.bin' "$reps") $(seq -f 'getcold%g.bin' "$reps"); do
	curl -sf -o /dev/null "$origin/.well-known/stampede/manifest/$f"
done

timed() { # prints "seconds first_byte_seconds"
	curl -sf -o /dev/null -w '%{time_total} %{time_starttransfer}\n' "$@"
}
echo "== warm cache: ${size_mib} MiB over loopback, $reps runs each, alternating (body to /dev/null)"
curl -sf -x "$gw" -o "$work/check" "$origin/big.bin" # the cold download that fills the cache
cmp -s "$work/check" "$work/www/big.bin" || { echo "the gateway's copy differs from the source"; exit 1; }
rm -f "$work/check"
timed -x "$gw" "$origin/big.bin" >/dev/null # the cache file into the page cache, as the origin's is
: >"$work/results"
for i in $(seq "$reps"); do
	echo "direct  $(timed "$origin/big.bin")" | tee -a "$work/results"
	echo "gateway $(timed -x "$gw" "$origin/big.bin")" | tee -a "$work/results"
done

echo "== cold: 100 MiB files the gateway has never seen, $reps of them"
for i in $(seq "$reps"); do
	echo "cold-direct  $(timed "$origin/cold$i.bin")" | tee -a "$work/results"
	echo "cold-gateway $(timed -x "$gw" "$origin/cold$i.bin")" | tee -a "$work/results"
	start=$EPOCHREALTIME
	"$bin" get -q "$origin/getcold$i.bin" -o "$work/getcold.out"
	echo "cold-get $(awk "BEGIN { print $EPOCHREALTIME - $start }")" | tee -a "$work/results"
	cmp -s "$work/getcold.out" "$work/www/getcold$i.bin" || { echo "get's copy differs"; exit 1; }
	rm -f "$work/getcold.out"
done
hwm=$(grep VmHWM "/proc/$gw_pid/status" | awk '{print $2}')

python3 - "$work/results" "$size_mib" "$hwm" <<'PY'
import sys, statistics
rows = [l.split() for l in open(sys.argv[1])]
mib, hwm = float(sys.argv[2]), int(sys.argv[3])
def col(name, k):
    return sorted(float(r[k]) for r in rows if r[0] == name)
d, g = col("direct", 1), col("gateway", 1)
md, mg = statistics.median(d), statistics.median(g)
print(f"warm, curl from serve   median {mib/md:7.0f} MiB/s  (times {d[0]:.3f}-{d[-1]:.3f} s)")
print(f"warm, curl via gateway  median {mib/mg:7.0f} MiB/s  (times {g[0]:.3f}-{g[-1]:.3f} s)")
print(f"throughput ratio gateway/direct (median times): {md/mg:.2f}")
for name in ("cold-direct", "cold-gateway"):
    t, f = col(name, 1), col(name, 2)
    print(f"{name:13s} first byte median {1000*statistics.median(f):6.1f} ms ({1000*f[0]:.1f}-{1000*f[-1]:.1f}), "
          f"100 MiB in median {statistics.median(t):.3f} s ({t[0]:.3f}-{t[-1]:.3f})")
t = col("cold-get", 1)
print(f"cold-get      stampede get (swarm path) of 100 MiB in median {statistics.median(t):.3f} s ({t[0]:.3f}-{t[-1]:.3f})")
print(f"gateway peak RSS (VmHWM) over the run: {hwm/1024:.0f} MiB")
PY
