// Package demonet starts a whole Coral CDN on loopback from the real
// binaries, for `make demo` (cmd/coraldemo) and the integration tests in
// test/demonet: N nodes, each a bin/coredns with the coral plugin and a
// bin/caddy with the coral app and coral_proxy on one address, joined into
// one DSHT with a generated network key and pinned into two clusters; a
// fake DNS root (resolvers.Authority) that delegates the Coral zones to
// the nodes and serves the origin's zone; recursive resolvers
// (resolvers.Start); and an in-process origin web site.
//
//	n, err := demonet.Start(ctx, demonet.Options{})  // 127.0.80.0/24, 6 nodes, Unbound
//	defer n.Stop()
//	addrs, _, _ := demonet.Lookup(ctx, n.Resolvers[0].Addr, n.CoralHost())
//	// GET n.URL("/") through addrs[0]:80
//
// Start returns when the network works end to end; Stop stops every
// process (SIGTERM, then SIGKILL after a grace period). KillNode,
// RestartNode, StopOrigin and StartOrigin change it under a test. It needs
// root (ports 53 and 80) and Linux. README.md has the address plan and the
// settings that differ from the defaults.
package demonet
