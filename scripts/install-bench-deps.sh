#!/usr/bin/env bash
# Installs what `make bench` and `stampede bench` run besides stampede:
# aria2, opentracker, mktorrent, nginx, curl, iproute2 (see install-deps.sh).
# Run it as root; `make bench` runs it with --if-root.
exec "$(dirname "$0")/install-deps.sh" "$@" bench
