// Package proxylab holds integration tests that run the real bin/caddy
// (Caddy with the coral_proxy module, built by `make caddy`) as separate
// processes on loopback addresses in 127.0.70.0/24–127.0.79.0/24 and
// 127.0.69.21–.23 (the key rotation lab: 127.0.180.1–.6 and .100; the
// fleet blacklist lab: 127.0.186.1–.3 and .100, and localhost:2019),
// against an in-process origin server. See README.md.
//
// The package has no exported API: everything lives in its tests.
package proxylab
