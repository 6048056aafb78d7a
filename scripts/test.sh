#!/usr/bin/env bash
# Runs stampede's test suite. On a fresh machine it first installs what the
# tests need (as root, from Debian's packages): python3-libtorrent for the
# BEP 52 cross-check, curl for the end-to-end checks, and aria2, opentracker
# and mktorrent for the testbed's BitTorrent baseline.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
/usr/bin/python3 -c 'import libtorrent' 2>/dev/null || need+=(python3-libtorrent)
command -v curl >/dev/null || need+=(curl)
for tool in aria2c:aria2 opentracker:opentracker mktorrent:mktorrent; do
	command -v "${tool%%:*}" >/dev/null || need+=("${tool##*:}")
done
if ((${#need[@]})); then
	if [ "$(id -u)" = 0 ]; then
		echo "test.sh: installing ${need[*]}"
		apt-get update -qq >/dev/null
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
	else
		echo "test.sh: missing ${need[*]} (not root: tests that need them will skip)"
	fi
fi
# With the packages installed, the cross-check must run, not skip.
if /usr/bin/python3 -c 'import libtorrent' 2>/dev/null; then
	export STAMPEDE_REQUIRE_LIBTORRENT=1
fi

go vet ./...
test -z "$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
go test -race -shuffle=on -timeout 20m ./...
go test -run='^$' -bench=. -benchtime=1x ./... >/dev/null
echo "test.sh: all tests passed"
