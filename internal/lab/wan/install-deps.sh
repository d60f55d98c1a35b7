#!/usr/bin/env bash
# Installs what the wide-area lab (internal/lab/wan) and eval/wan run:
# iproute2 (namespaces, veths, routes), iptables (the NFQUEUE rules that
# hand each router's wide-area packets to the delayer), tc (the thin
# origin line), chrt (the delayer's real-time priority), traceroute (the
# lab's test compares it with the project's own trace), ping (the lab's
# RTT checks), Unbound (a resolver per site) and curl; see
# builds/apt-install.sh.
set -euo pipefail
exec bash "$(dirname "$0")/../../../builds/apt-install.sh" wan \
	"ip tc iptables-restore chrt traceroute ping unbound curl" \
	iproute2 iptables util-linux traceroute iputils-ping unbound curl
