#!/usr/bin/env bash
# Installs Debian packages for the repository's tests and experiments when
# some of the binaries they provide are missing:
#
#   builds/apt-install.sh WHO "BINARY..." PACKAGE...
#
# Idempotent: does nothing when every binary is present. Safe to run as root
# under CI=true with no stdin: package post-install scripts are kept from
# starting services by a temporary /usr/sbin/policy-rc.d (removed again only
# if this script made it).
set -euo pipefail

export PATH="$PATH:/usr/sbin:/sbin"
who=$1
read -r -a need <<<"$2"
shift 2

missing=()
for bin in "${need[@]}"; do
	command -v "$bin" >/dev/null 2>&1 || missing+=("$bin")
done
if [ "${#missing[@]}" -eq 0 ]; then
	echo "$who: all present (${need[*]})"
	exit 0
fi
echo "$who: missing ${missing[*]}; installing $*"

if [ "$(id -u)" -ne 0 ]; then
	echo "$who: must run as root to install packages (apt-get install $*)" >&2
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
	printf '#!/bin/sh\n# temporary, from builds/apt-install.sh\nexit 101\n' >"$policy"
	chmod 0755 "$policy"
	created_policy=1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update </dev/null
apt-get install -y --no-install-recommends \
	-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "$@" </dev/null

still=()
for bin in "${need[@]}"; do
	command -v "$bin" >/dev/null 2>&1 || still+=("$bin")
done
if [ "${#still[@]}" -ne 0 ]; then
	echo "$who: still missing after install: ${still[*]}" >&2
	exit 1
fi
echo "$who: installed"
