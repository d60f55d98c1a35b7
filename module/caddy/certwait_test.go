package coralcaddy

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddytest"
	"github.com/caddyserver/caddy/v2/modules/caddytls"
)

// Caddy obtains managed certificates (tls internal too) in the background
// after it starts serving: until the certificate is in its cache, a
// handshake for the name ends in "tls: internal error" (certmagic has no
// certificate to offer and is not on-demand). The certificate cache tells
// when it has one through the event "cached_managed_cert", which a test
// subscribes to with certEvents and waits for with waitForCachedCert.

func init() {
	caddy.RegisterModule(certEvents{})
}

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

// cachedCerts receives the names of every managed certificate Caddy puts
// into its cache in this test process.
var cachedCerts = make(chan []string, 64)

// certEvents is an event handler (events.handlers.coral_test_cert_cached)
// that passes on the names of cached managed certificates.
type certEvents struct{}

func (certEvents) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "events.handlers.coral_test_cert_cached", New: func() caddy.Module { return new(certEvents) }}
}

func (*certEvents) Handle(_ context.Context, e caddy.Event) error {
	sans, _ := e.Data["sans"].([]string)
	select {
	case cachedCerts <- sans:
	default: // nobody is waiting for this many
	}
	return nil
}

// initServerWithCertEvents loads caddyfile into tester with certEvents
// subscribed to "cached_managed_cert". The events app has no Caddyfile
// syntax, so the Caddyfile is adapted to JSON and the subscription added.
func initServerWithCertEvents(t *testing.T, tester *caddytest.Tester, caddyfile string) {
	t.Helper()
	// Warnings (a Caddyfile not formatted as caddy fmt would) are no
	// matter here.
	adapted, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), nil)
	if err != nil {
		t.Fatalf("adapting the Caddyfile: %v", err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(adapted, &cfg); err != nil {
		t.Fatal(err)
	}
	apps, _ := cfg["apps"].(map[string]any)
	if apps == nil {
		t.Fatal("adapted config has no apps")
	}
	apps["events"] = map[string]any{"subscriptions": []any{map[string]any{
		"events":   []string{"cached_managed_cert"},
		"handlers": []any{map[string]any{"handler": "coral_test_cert_cached"}},
	}}}
	out, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Events of an earlier configuration are not this one's.
	for len(cachedCerts) > 0 {
		<-cachedCerts
	}
	tester.InitServer(string(out), "json")
}

// waitForCachedCert returns once Caddy's certificate cache has a managed
// certificate for subject (as configured, "*.nyud.test" say). The cache
// outlives a configuration, so an earlier test's certificate may be there
// already: no event then. Events after initServerWithCertEvents wait in
// cachedCerts, so none is missed between the look and the wait.
func waitForCachedCert(t *testing.T, subject string) {
	t.Helper()
	app, err := caddy.ActiveContext().App("tls")
	if err != nil {
		t.Fatal(err)
	}
	if app.(*caddytls.TLS).HasCertificateForSubject(subject) {
		return
	}
	timeout := time.After(2 * time.Minute) // a bound on failure, not a pause
	for {
		select {
		case sans := <-cachedCerts:
			if slices.Contains(sans, subject) {
				return
			}
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
