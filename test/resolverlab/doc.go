// Package resolverlab holds the resolver lab: integration tests that run
// the four Debian recursive resolvers (through internal/lab/resolvers, the
// harness it shares with the demo network) against a fake DNS root on
// 127.0.50.0/24, and the real bin/coredns as Coral name servers on
// 127.0.60.0/24–127.0.69.0/24 checked end to end through every resolver.
// See README.md.
//
// The package has no exported API: everything lives in its tests.
package resolverlab
