#!/usr/bin/env bash
# Installs what `make demo` and the demo network tests (test/demonet) run:
# Unbound and BIND as recursive resolvers, dig, curl as the HTTP client,
# openssl (the demo's certificate step) and NSS's certutil (Chromium's
# trust in the demo CA); see builds/apt-install.sh.
set -euo pipefail
exec bash "$(dirname "$0")/../../builds/apt-install.sh" demonet \
	"unbound unbound-control named rndc dig curl unshare openssl certutil" \
	unbound bind9 dnsutils curl util-linux openssl libnss3-tools
