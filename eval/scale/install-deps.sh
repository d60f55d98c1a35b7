#!/usr/bin/env bash
# Installs what eval/scale runs besides bin/caddy: Debian's nginx (the
# proxy_cache baseline) and Varnish (the malloc/file storage baseline);
# their services are kept from starting (see builds/apt-install.sh).
set -euo pipefail
exec bash "$(dirname "$0")/../../builds/apt-install.sh" scale "nginx varnishd" nginx varnish
