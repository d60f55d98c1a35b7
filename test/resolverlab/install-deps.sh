#!/usr/bin/env bash
# Installs the four Debian recursive resolvers (and dig, kdig, dnsperf) that
# the resolverlab integration tests start; see builds/apt-install.sh.
set -euo pipefail
exec bash "$(dirname "$0")/../../builds/apt-install.sh" resolverlab \
	"unbound named kresd pdns_recursor dig kdig dnsperf" \
	unbound bind9 knot-resolver pdns-recursor dnsutils knot-dnsutils dnsperf
