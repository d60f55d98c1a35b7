#!/usr/bin/env bash
# Installs what eval/httpbench runs besides bin/caddy: wrk (the load
# generator) and Debian's nginx (the proxy_cache baseline). Idempotent: does
# nothing when both binaries are present. Safe to run as root under CI=true
# with no stdin: the nginx package's post-install script is kept from
# starting the service by a temporary /usr/sbin/policy-rc.d (removed again
# only if this script made it), so no nginx is left listening on port 80.
set -euo pipefail

export PATH="$PATH:/usr/sbin:/sbin"

need=(wrk nginx)
missing=()
for bin in "${need[@]}"; do
	command -v "$bin" >/dev/null 2>&1 || missing+=("$bin")
done
if [ "${#missing[@]}" -eq 0 ]; then
	echo "httpbench: wrk and nginx present"
	exit 0
fi
echo "httpbench: missing ${missing[*]}; installing"

if [ "$(id -u)" -ne 0 ]; then
	echo "httpbench: must run as root to install packages (apt-get install wrk nginx)" >&2
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
	printf '#!/bin/sh\n# temporary, from eval/httpbench/install-deps.sh\nexit 101\n' >"$policy"
	chmod 0755 "$policy"
	created_policy=1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update </dev/null
apt-get install -y --no-install-recommends \
	-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
	wrk nginx </dev/null

still=()
for bin in "${need[@]}"; do
	command -v "$bin" >/dev/null 2>&1 || still+=("$bin")
done
if [ "${#still[@]}" -ne 0 ]; then
	echo "httpbench: still missing after install: ${still[*]}" >&2
	exit 1
fi
echo "httpbench: installed $(wrk -v 2>&1 | head -n1 || true); $(nginx -v 2>&1)"
