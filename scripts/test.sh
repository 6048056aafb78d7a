#!/usr/bin/env bash
# Runs stampede's test suite. On a fresh machine, as root, it first installs
# what the tests run besides stampede (scripts/install-test-deps.sh:
# python3-libtorrent, curl, aria2, opentracker, mktorrent, nginx,
# redis-server, prometheus's promtool, chromium, iproute2, nodejs); without root
# the tests that need what is missing skip.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-test-deps.sh --if-root
# What is installed must be used: these tests fail rather than skip.
if /usr/bin/python3 -c 'import libtorrent' 2>/dev/null; then
	export STAMPEDETEST_REQUIRE_LIBTORRENT=1
fi
if command -v redis-server >/dev/null; then
	export STAMPEDETEST_REQUIRE_REDIS=1
fi
if command -v promtool >/dev/null; then
	export STAMPEDETEST_REQUIRE_PROMTOOL=1
fi
if command -v chromium >/dev/null; then
	export STAMPEDETEST_REQUIRE_CHROMIUM=1
fi
if command -v node >/dev/null; then
	export STAMPEDETEST_REQUIRE_NODE=1
fi

go vet ./...
test -z "$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
go test -race -shuffle=on -timeout 20m ./...
if [ "$(id -u)" -eq 0 ]; then make -s browser-test; fi # Chromium peers in network namespaces
go test -run='^$' -bench=. -benchtime=1x ./... >/dev/null
echo "test.sh: all tests passed"
