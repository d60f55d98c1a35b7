// Package hostilelab is the short version of the hostile-origin lab
// (internal/lab/hostilelab) under `make test`: the real bin/caddy and a peer,
// attacked by every class for a few seconds each, on 127.0.92.0/24, while a
// canary checks every byte it gets. See internal/lab/hostilelab/README.md for
// the invariants and `go run ./eval/hostile` for the long version.
//
// The package has no exported API: everything lives in its test.
package hostilelab
