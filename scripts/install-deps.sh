#!/usr/bin/env bash
# Installs, from Debian's packages, the programs stampede's tests and
# benchmarks run but do not ship. The stampede binary installs nothing:
# this script is the one place that does.
#
# Usage: scripts/install-deps.sh [--check | --if-root] SET...
#   SET is one or more of:
#     test   what scripts/test.sh's tests use: python3-libtorrent (the BEP 52
#            cross-check), curl, aria2, opentracker and mktorrent (the
#            BitTorrent baseline), nginx (the second HTTP origin),
#            redis-server (the tracker's Redis store), prometheus (its
#            promtool checks every server's /metrics), chromium (the
#            dashboard's test loads it in a headless browser; the browser
#            peer's tests run several), iproute2 (the netns testbed, as
#            root), nodejs (the browser peer's JavaScript tests), varnish
#            (a baseline of the CDN testbed, bench/cdn.go) and nftables (a
#            browser peer's test blocks a browser's UDP; rtcpeer's NAT
#            testbed makes its NATs);
#     bench  what `make bench` uses: the same baselines, iproute2 for the
#            netns scenarios, and time and python3 for scripts/bench-get.sh.
#   --check    name what is missing and exit 1 if anything is; install nothing.
#   --if-root  as root, install what is missing; otherwise only name it and
#              exit 0 (the tests that need it skip; stampede bench
#              --skip-unavailable leaves it out).
# Without a flag it installs what is missing, and fails when not root.
#
# Debian starts a package's service on install (nginx on port 80, a
# redis-server on 6379, a Prometheus server on 9090) unless
# /usr/sbin/policy-rc.d says no: the tests and the testbed run these
# programs themselves, so for the install a policy-rc.d that forbids
# starting services is put in place when there is none, and removed after.
set -euo pipefail

# Each entry is PROBE:PACKAGE. PROBE is a program looked up in PATH, an
# absolute path that must be executable, or py:MODULE, a module Debian's
# python3 must import.
deps_test=(
	py:libtorrent:python3-libtorrent
	curl:curl
	aria2c:aria2
	opentracker:opentracker
	mktorrent:mktorrent
	nginx:nginx
	redis-server:redis-server
	promtool:prometheus
	chromium:chromium
	ip:iproute2
	tc:iproute2
	node:nodejs
	varnishd:varnish
	nft:nftables
)
deps_bench=(
	aria2c:aria2
	opentracker:opentracker
	mktorrent:mktorrent
	nginx:nginx
	curl:curl
	ip:iproute2
	tc:iproute2
	/usr/bin/time:time
	python3:python3
)

me=$(basename "$0")
usage() {
	echo "usage: $me [--check | --if-root] SET... (SET: test, bench)" >&2
	exit 2
}

mode=install
sets=()
for a in "$@"; do
	case $a in
	--check) mode=check ;;
	--if-root) mode=if-root ;;
	test | bench) sets+=("$a") ;;
	*) usage ;;
	esac
done
((${#sets[@]})) || usage

# present PROBE: whether PROBE is satisfied here.
present() {
	case $1 in
	py:*) /usr/bin/python3 -c "import ${1#py:}" 2>/dev/null ;;
	/*) [ -x "$1" ] ;;
	*) command -v "$1" >/dev/null ;;
	esac
}

# missing SET...: the packages whose probe fails, each once, in order.
missing() {
	local set entry probe pkg out=()
	for set in "$@"; do
		local -n list="deps_$set"
		for entry in "${list[@]}"; do
			probe=${entry%:*} pkg=${entry##*:}
			present "$probe" && continue
			[[ " ${out[*]} " == *" $pkg "* ]] || out+=("$pkg")
		done
		unset -n list
	done
	echo "${out[*]}"
}

# how: the command that installs the sets, from the repository's root.
how="scripts/install-deps.sh ${sets[*]}"
((${#sets[@]} == 1)) && how="scripts/install-${sets[0]}-deps.sh"

read -ra need <<<"$(missing "${sets[@]}")"
if ((${#need[@]} == 0)); then
	exit 0
fi
case $mode in
check)
	echo "$me: missing ${need[*]}: install them with sudo $how" >&2
	exit 1
	;;
if-root | install)
	if [ "$(id -u)" != 0 ]; then
		echo "$me: missing ${need[*]}: install them as root (sudo $how)" >&2
		[ "$mode" = if-root ] && exit 0
		exit 1
	fi
	;;
esac

echo "$me: installing ${need[*]}"
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
	trap 'rm -f "$policy"' EXIT
	printf '#!/bin/sh\n# written by %s for one apt-get install: start no services\nexit 101\n' "$me" >"$policy"
	chmod 755 "$policy"
fi
apt-get update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null

read -ra still <<<"$(missing "${sets[@]}")"
if ((${#still[@]})); then
	echo "$me: still missing after the install: ${still[*]}" >&2
	exit 1
fi
