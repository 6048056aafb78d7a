#!/usr/bin/env bash
# Installs what scripts/test.sh's tests run besides stampede:
# python3-libtorrent, curl, aria2, opentracker, mktorrent, nginx,
# redis-server, prometheus (for promtool), chromium, iproute2, nodejs
# (see install-deps.sh).
# Run it as root; test.sh runs it with --if-root.
exec "$(dirname "$0")/install-deps.sh" "$@" test
