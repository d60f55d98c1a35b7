#!/usr/bin/env bash
# Installs what `make demo` and the demo network tests (test/demonet) run:
# Unbound and BIND as recursive resolvers, dig, and curl as the HTTP
# client; see builds/apt-install.sh.
set -euo pipefail
exec bash "$(dirname "$0")/../../builds/apt-install.sh" demonet \
	"unbound unbound-control named rndc dig curl unshare" \
	unbound bind9 dnsutils curl util-linux
