#!/usr/bin/env bash
# Installs what the lab of separate hosts (internal/lab/netns) and
# eval/chaos run: iproute2 (ip netns), nftables (partitions) and Unbound
# (the resolver hosts); see builds/apt-install.sh.
set -euo pipefail
exec bash "$(dirname "$0")/../../../builds/apt-install.sh" netns \
	"ip nft unbound" \
	iproute2 nftables unbound
