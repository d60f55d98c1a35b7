#!/usr/bin/env bash
# Installs promtool (Debian's prometheus package), which checks and
# unit-tests deploy/prometheus in test/deploy; see builds/apt-install.sh.
set -euo pipefail
exec bash "$(dirname "$0")/../../builds/apt-install.sh" deploy "promtool" prometheus
