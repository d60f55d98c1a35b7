#!/usr/bin/env bash
# Installs the four Debian recursive resolvers (and dig, kdig, dnsperf) that
# the resolverlab integration tests start. Idempotent: does nothing when every
# binary is already present. Safe to run as root under CI=true with no stdin:
# package post-install scripts are kept from starting the services by a
# temporary /usr/sbin/policy-rc.d (removed again only if this script made it).
set -euo pipefail

export PATH="$PATH:/usr/sbin:/sbin"

need=(unbound named kresd pdns_recursor dig kdig dnsperf)
missing=()
for bin in "${need[@]}"; do
	command -v "$bin" >/dev/null 2>&1 || missing+=("$bin")
done
if [ "${#missing[@]}" -eq 0 ]; then
	echo "resolverlab: all resolvers present (${need[*]})"
	exit 0
fi
echo "resolverlab: missing ${missing[*]}; installing"

if [ "$(id -u)" -ne 0 ]; then
	echo "resolverlab: must run as root to install packages" >&2
	exit 1
fi

policy=/usr/sbin/policy-rc.d
created_policy=0
cleanup() {
	if [ "$created_policy" -eq 1 ]; then
		rm -f "$policy"
	fi
}
trap cleanup EXIT
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\n# temporary, from resolverlab/install-deps.sh\nexit 101\n' >"$policy"
	chmod 0755 "$policy"
	created_policy=1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update </dev/null
apt-get install -y --no-install-recommends \
	-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
	unbound bind9 knot-resolver pdns-recursor dnsutils knot-dnsutils dnsperf </dev/null

still=()
for bin in "${need[@]}"; do
	command -v "$bin" >/dev/null 2>&1 || still+=("$bin")
done
if [ "${#still[@]}" -ne 0 ]; then
	echo "resolverlab: still missing after install: ${still[*]}" >&2
	exit 1
fi
echo "resolverlab: installed"
