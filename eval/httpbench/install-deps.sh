#!/usr/bin/env bash
# Installs what eval/httpbench runs besides bin/caddy: wrk (the load
# generator) and Debian's nginx (the proxy_cache baseline; its service is
# kept from starting, so no nginx is left on port 80); see
# builds/apt-install.sh.
set -euo pipefail
exec bash "$(dirname "$0")/../../builds/apt-install.sh" httpbench "wrk nginx" wrk nginx
