package main

// The TLS targets: coral_proxy, file_server and respond over TLS, in the
// same Caddy as the HTTP ones, with certificates from Caddy's own local CA.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/coralcdn/coral/coralname"
	"github.com/coralcdn/coral/eval/internal/evalrun"
	"github.com/coralcdn/coral/internal/lab/labconf"
)

// filesName and respondName are file_server's and respond's names over
// TLS. Like the zone, they are in no DNS and no /etc/hosts: only wrk's
// script and this process know where they are.
const (
	filesName   = "files.test"
	respondName = "respond.test"
)

// tlsTargets lays out coral-tls (Port+2, reached with the one-label
// Coralized name, which the wildcard certificate *.nyud.test covers),
// file-tls (Port+3, filesName) and respond-tls (Port+5, respondName) on
// Caddy's address, and writes wrk's script for their names.
func (b *bench) tlsTargets(origin coralname.Origin, caddyAddr netip.Addr) ([]*target, error) {
	oneLabel, err := coralname.CoralizeOneLabel(origin, zone)
	if err != nil {
		return nil, fmt.Errorf("one-label Coralized name of %s:%d: %w", origin.Host, origin.Port, err)
	}
	b.wrkScript = filepath.Join(b.dir, "resolve.lua")
	if err := os.WriteFile(b.wrkScript, []byte(wrkResolveScript(caddyAddr)), 0o644); err != nil {
		return nil, fmt.Errorf("wrk's script: %w", err)
	}
	port := uint16(b.p.Port)
	return []*target{
		{name: "coral-tls", server: "coral", addr: netip.AddrPortFrom(caddyAddr, port+2), host: oneLabel, tls: true},
		{name: "file-tls", server: "file", addr: netip.AddrPortFrom(caddyAddr, port+3), host: filesName, tls: true},
		{name: "respond-tls", server: "respond", addr: netip.AddrPortFrom(caddyAddr, port+5), host: respondName, tls: true},
	}, nil
}

// wrkResolveScript is the Lua script wrk runs (-s) for the TLS targets. wrk
// takes the SNI and the Host header from the URL's host, so the URL must
// carry the name the certificate covers; but it also resolves that host
// (wrk.resolve, called once before the run), and the names are in no DNS.
// The script replaces wrk.resolve with a lookup of Caddy's address: the
// name stays in the URL, the TCP connection goes to the loopback address.
// It defines no request, response or delay function, so wrk keeps sending
// its one prebuilt request and runs no Lua per request.
func wrkResolveScript(addr netip.Addr) string {
	return fmt.Sprintf(`-- httpbench: connect to Caddy's address, %[1]v, whatever the URL's host
-- (names of the bench, in no DNS); the host still gives the SNI and Host.
function wrk.resolve(host, service)
   wrk.addrs = wrk.lookup("%[1]v", service)
end
`, addr)
}

// addTLSSites adds the TLS sites to Caddy's configuration: coral_proxy for
// every name under the zone (a wildcard certificate), file_server for
// filesName and respond for respondName (the snippet of the HTTP respond
// site), all with certificates from Caddy's local CA (tls internal),
// which Caddy creates in its data directory, inside the bench's temporary
// directory (labconf.CaddyEnv); skip_install_trust keeps it out of the
// system's trust store. Automatic HTTPS is on, as the internal issuer needs
// it, but without its HTTP->HTTPS redirects, which would listen on port 80
// and leave the http:// sites as they are anyway.
func (b *bench) addTLSSites(conf *labconf.Caddy, addr netip.Addr) {
	conf.HTTPSOff, conf.SkipTrust = false, true
	conf.Options = append(conf.Options, labconf.D("auto_https", "disable_redirects"))
	coralTLS, fileTLS, respondTLS := b.target("coral-tls"), b.target("file-tls"), b.target("respond-tls")
	conf.Sites = append(conf.Sites,
		labconf.D(fmt.Sprintf("https://*.%s:%d", zone, coralTLS.addr.Port())).With(
			labconf.D("bind", addr),
			labconf.D("tls", "internal"),
			b.proxyDirective(b.dir),
		).Commented("coral_proxy over TLS, with a wildcard certificate from Caddy's local CA.\n"+
			"Requests use the one-label name "+coralTLS.host+" (SNI and Host);\n"+
			"the same cache directory, so the same store and cache keys, as over HTTP."),
		labconf.D(fmt.Sprintf("https://%s:%d", filesName, fileTLS.addr.Port())).With(
			labconf.D("bind", addr),
			labconf.D("tls", "internal"),
			labconf.D("root", "*", b.files),
			labconf.D("file_server"),
		).Commented("file_server over TLS: the same bytes from files."),
		labconf.D(fmt.Sprintf("https://%s:%d", respondName, respondTLS.addr.Port())).With(
			labconf.D("bind", addr),
			labconf.D("tls", "internal"),
			labconf.D("import", respondSnippet),
		).Commented("respond over TLS: the same bytes from the configuration."),
	)
}

// caddyRootPath is the certificate of Caddy's local CA: pki/authorities/local
// in Caddy's data directory, which is $XDG_DATA_HOME/caddy in the
// environment Caddy runs with.
func caddyRootPath(env []string) (string, error) {
	data := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "XDG_DATA_HOME="); ok {
			data = v
		}
	}
	if data == "" {
		return "", errors.New("no XDG_DATA_HOME in the environment of Caddy: its data directory would be the user's")
	}
	return filepath.Join(data, "caddy", "pki", "authorities", "local", "root.crt"), nil
}

// loadRoots gives the TLS targets Caddy's local CA to verify against.
func (b *bench) loadRoots() error {
	path, err := caddyRootPath(labconf.CaddyEnv(b.dir))
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("the local CA of Caddy: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(raw) {
		return fmt.Errorf("the local CA of Caddy: no certificate in %s", path)
	}
	for _, t := range b.targets {
		if t.tls {
			t.roots = pool
		}
	}
	return nil
}

// waitTLS waits until Caddy has made its local CA and the TLS sites'
// certificates (it issues them in the background after it starts), that
// is until a verified handshake with each TLS target succeeds.
func (b *bench) waitTLS(ctx context.Context) error {
	return evalrun.WaitFor(ctx, "Caddy's TLS certificates", startWithin, b.caddy.Exited, func() error {
		if err := b.loadRoots(); err != nil {
			return err
		}
		for _, t := range b.targets {
			if !t.tls {
				continue
			}
			conn, err := dial(t)
			if err != nil {
				return err
			}
			conn.Close()
		}
		return nil
	})
}

// dial connects to t; over TLS it completes a handshake with t's name as
// the SNI, verifying the certificate against t.roots (never skipping the
// verification), and offers no ALPN protocol, as wrk does not: the
// connection speaks HTTP/1.1.
func dial(t *target) (net.Conn, error) {
	conn, err := net.DialTimeout("tcp", t.addr.String(), 5*time.Second)
	if err != nil || !t.tls {
		return conn, err
	}
	if t.roots == nil {
		conn.Close()
		return nil, fmt.Errorf("%s: no CA to verify %s against yet", t.name, t.host)
	}
	tc := tls.Client(conn, &tls.Config{ServerName: t.host, RootCAs: t.roots, MinVersion: tls.VersionTLS12})
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err != nil {
		conn.Close()
		return nil, fmt.Errorf("%s: TLS handshake for %s with %v: %w", t.name, t.host, t.addr, err)
	}
	return tc, nil
}

// tlsSummary describes a TLS connection for the report: version, cipher
// suite, the certificate's names and issuer.
func tlsSummary(cs tls.ConnectionState) string {
	s := tls.VersionName(cs.Version) + " " + tls.CipherSuiteName(cs.CipherSuite)
	if len(cs.PeerCertificates) > 0 {
		leaf := cs.PeerCertificates[0]
		s += fmt.Sprintf(", certificate for %s from %q", strings.Join(leaf.DNSNames, " "), leaf.Issuer.CommonName)
	}
	return s
}
