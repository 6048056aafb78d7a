#!/usr/bin/env bash
# Runs stampede's test suite. On a fresh machine it first installs what the
# tests need (as root, from Debian's packages): python3-libtorrent for the
# BEP 52 cross-check, curl for the end-to-end checks, aria2, opentracker
# and mktorrent for the testbed's BitTorrent baseline, and nginx for its
# second HTTP origin.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
/usr/bin/python3 -c 'import libtorrent' 2>/dev/null || need+=(python3-libtorrent)
command -v curl >/dev/null || need+=(curl)
for tool in aria2c:aria2 opentracker:opentracker mktorrent:mktorrent nginx:nginx; do
	command -v "${tool%%:*}" >/dev/null || need+=("${tool##*:}")
done
if ((${#need[@]})); then
	if [ "$(id -u)" = 0 ]; then
		echo "test.sh: installing ${need[*]}"
		apt-get update -qq >/dev/null
		# Debian starts a package's service on install (nginx on port 80)
		# unless policy-rc.d says no; the tests run the programs themselves.
		policy=/usr/sbin/policy-rc.d
		ours=
		if [ ! -e "$policy" ]; then
			printf '#!/bin/sh\nexit 101\n' >"$policy"
			chmod 755 "$policy"
			ours=1
			trap 'rm -f "$policy"' EXIT
		fi
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
		if [ -n "$ours" ]; then
			rm -f "$policy"
			trap - EXIT
		fi
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
