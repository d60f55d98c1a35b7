// Package loadlab holds the integration tests of load-aware redirection
// and fair bandwidth shares (issue 41) with the real bin/caddy and
// bin/coredns on loopback, in the lab of internal/lab/loadlab (127.0.156.0/24
// and 127.0.158.0/24, clients in 127.0.157.0/24 and 127.0.159.0/24). See
// README.md.
//
// The package has no exported API: everything lives in its tests.
package loadlab
