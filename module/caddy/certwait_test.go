package coralcaddy

import (
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddytest"
	"github.com/caddyserver/caddy/v2/modules/caddytls"
)

// Caddy obtains managed certificates (tls internal too) in the background
// after it starts serving: until the certificate is in its cache, a
// handshake for the name ends in "tls: internal error" (certmagic has no
// certificate to offer and is not on-demand). waitForCachedCert asks the
// TLS app until its cache has one. (Subscribing to the event
// "cached_managed_cert" instead raced inside Caddy: the apps start in no
// fixed order, and when the TLS app starts first, its background obtain
// emits while the events app's Start is still writing its subscriptions
// map, which the race detector reported in TestOneLabelOverHTTPS.)

// testCertStorage is Caddy's storage for the tests that use certificates:
// one directory for the test process, so that the first such test obtains
// its certificates as a fresh installation does (the path that must be
// waited for), and later ones find them in Caddy's certificate cache, which
// outlives a configuration, signed by the same internal CA.
var testCertStorage = sync.OnceValue(func() string {
	dir, err := os.MkdirTemp("", "coral-caddy-test-storage-")
	if err != nil {
		panic(err)
	}
	certStorageDir.Store(&dir)
	return dir
})

var certStorageDir atomic.Pointer[string]

// TestMain removes testCertStorage's directory if a test made one.
// testAdmin is the admin endpoint of the package's in-process Caddy, on a
// port free when the tests start rather than caddytest's fixed 2999, so
// that two test processes (two worktrees, two runs) never load their
// configurations into each other's Caddy. The tests' Caddyfiles name it as
// {$CORAL_TEST_ADMIN}.
var testAdmin string

func TestMain(m *testing.M) {
	port, err := freeLocalPort()
	if err != nil {
		fmt.Fprintln(os.Stderr, "no free port for the admin endpoint:", err)
		os.Exit(2)
	}
	caddytest.Default.AdminPort = port
	testAdmin = fmt.Sprintf("localhost:%d", port)
	os.Setenv("CORAL_TEST_ADMIN", testAdmin)
	code := m.Run()
	if dir := certStorageDir.Load(); dir != nil {
		os.RemoveAll(*dir)
	}
	os.Exit(code)
}

// waitForCachedCert returns once Caddy's certificate cache has a managed
// certificate for subject (as configured, "*.nyud.test" say), which the
// running configuration manages. The cache outlives a configuration, so an
// earlier test's certificate may be there already.
func waitForCachedCert(t *testing.T, subject string) {
	t.Helper()
	app, err := caddy.ActiveContext().App("tls")
	if err != nil {
		t.Fatal(err)
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(2 * time.Minute) // a bound on failure, not a pause
	for !app.(*caddytls.TLS).HasCertificateForSubject(subject) {
		select {
		case <-tick.C:
		case <-timeout:
			t.Fatalf("no certificate for %s in Caddy's cache after 2 minutes", subject)
		}
	}
}

// freeLocalPort returns a TCP port nothing listens on at localhost now.
func freeLocalPort() (int, error) {
	l, err := net.Listen("tcp", "localhost:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
