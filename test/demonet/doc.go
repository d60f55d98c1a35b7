// Package demonet holds the integration tests of the demo network
// (internal/lab/demonet): real bin/coredns and bin/caddy processes, real
// resolvers (Unbound, BIND, and Knot Resolver and PowerDNS Recursor when
// installed) and the real curl, on 127.0.81.0/24. See README.md.
//
// The package has no exported API: everything lives in its tests.
package demonet
