// Package operator holds tests of what an operator meets running the real
// bin/caddy and bin/coredns: one process per address (a second node on an
// address another process serves fails with a clear error, while each
// server's own reloads go on working), a failed reload that shows in the
// reload metrics whatever failed (a Caddyfile that does not adapt
// included), and servers built into the same binaries without Coral that
// export no Coral metric and fire no shipped alert. See README.md.
//
// The package has no exported API: everything lives in its tests. Every
// process listens on its own loopback address in 127.0.146.0/24.
package operator
