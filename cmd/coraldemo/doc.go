//go:build linux

// Command coraldemo runs a whole Coral CDN on loopback: six nodes, each a
// bin/coredns with the coral plugin and a bin/caddy with coral_proxy, in two
// clusters, with a fake DNS root, a recursive resolver (Unbound) and a
// small origin web site (see internal/lab/demonet). It prints commands to try
// (dig, curl) and runs until Ctrl-C or SIGTERM, then stops everything.
//
//	make demo                   # builds bin/coredns and bin/caddy first
//	go run ./cmd/coraldemo [-nodes 6] [-resolvers unbound,bind] [-keep]
//	go run ./cmd/coraldemo -smoke   # or DEMO_SMOKE=1: run the printed
//	                                # commands once, check them, exit 0/1
//
// It needs root (ports 53 and 80) and the Debian packages unbound,
// dnsutils (dig) and curl (`make demo` installs them).
package main
