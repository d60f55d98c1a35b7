#!/usr/bin/env bash
# Installs Debian's Chromium, which the status page test runs headless; see
# builds/apt-install.sh.
set -euo pipefail
exec bash "$(dirname "$0")/../../builds/apt-install.sh" statuspage chromium chromium
