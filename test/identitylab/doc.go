// Package identitylab tests node identity mode on the lab of separate
// hosts (internal/lab/netns/coralnet): six nodes set up with the
// operations guide's coral-fleet commands, one of them revoked while
// clients fetch through the proxies. It needs root, bin/coredns and
// bin/caddy (make coredns caddy), and Unbound; run it under the lab lock:
//
//	flock /tmp/coral-lab.lock go test ./test/identitylab
//
// The package has no exported API: everything lives in its tests.
package identitylab
