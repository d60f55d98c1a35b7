// Package nodelab holds integration tests of a Coral node's life on
// loopback (127.0.71.0/24), with the real bin/coredns and bin/caddy:
// restarts of a process, reloads that restart the node in place, and
// drains, seen from outside as a resolver and a health check see them.
// See README.md.
//
// The package has no exported API: everything lives in its tests.
package nodelab
