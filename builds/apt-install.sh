#!/usr/bin/env bash
# Installs Debian packages for the repository's tests and experiments when
# some of the binaries they provide are missing:
#
#   builds/apt-install.sh WHO "BINARY..." PACKAGE...
#
# Idempotent: does nothing when every binary is present. Waits (up to 10
# minutes) while another apt or dpkg holds the package system's locks.
# Safe to run as root under CI=true with no stdin: package post-install scripts are kept from
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

# apt_get runs apt-get, waiting while another apt or dpkg holds its locks
# (another install-deps.sh of `make deps`, the machine's own updates): up
# to 10 minutes, as DPkg::Lock::Timeout does for dpkg's lock, and for the
# package lists' lock of apt-get update too, which that option does not
# cover on every apt version.
apt_get() {
	local deadline=$((SECONDS + 600)) out status
	while :; do
		status=0
		out=$(apt-get -o DPkg::Lock::Timeout=600 "$@" </dev/null 2>&1) || status=$?
		printf '%s\n' "$out"
		if [ "$status" -eq 0 ]; then
			return 0
		fi
		if [ "$SECONDS" -lt "$deadline" ] && grep -q 'Could not get lock\|Unable to acquire the dpkg frontend lock\|Unable to lock directory' <<<"$out"; then
			echo "$who: another apt or dpkg holds its lock; waiting" >&2
			sleep 5
			continue
		fi
		return "$status"
	done
}

export DEBIAN_FRONTEND=noninteractive
apt_get update
apt_get install -y --no-install-recommends \
	-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "$@"

still=()
for bin in "${need[@]}"; do
	command -v "$bin" >/dev/null 2>&1 || still+=("$bin")
done
if [ "${#still[@]}" -ne 0 ]; then
	echo "$who: still missing after install: ${still[*]}" >&2
	exit 1
fi
echo "$who: installed"
