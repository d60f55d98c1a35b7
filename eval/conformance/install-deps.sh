#!/usr/bin/env bash
# Installs what eval/conformance runs besides bin/caddy and the suite
# itself: Node.js and npm (the suite's origin and client), and the caches
# it compares coral_proxy with, Debian's Squid, Apache Traffic Server and
# nginx (their services are kept from starting; the harness runs each with
# its own configuration on 127.0.160.0/24); see builds/apt-install.sh.
# A Node.js installed otherwise (NodeSource's nodejs bundles npm, and
# conflicts with Debian's npm) is kept: Debian's are asked for only when
# node or npm is missing.
set -euo pipefail
pkgs=(squid trafficserver nginx)
command -v node >/dev/null 2>&1 || pkgs+=(nodejs)
command -v npm >/dev/null 2>&1 || pkgs+=(npm)
exec bash "$(dirname "$0")/../../builds/apt-install.sh" conformance "node npm squid traffic_server nginx" "${pkgs[@]}"
