//go:build linux

package demonet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/coralcdn/coral/coralname"
	"github.com/coralcdn/coral/internal/lab/labconf"
	"github.com/coralcdn/coral/internal/lab/proc"
)

// HTTPS. The demo runs its own ACME CA (Caddy's acme_server, with only
// the dns-01 challenge enabled) on Layout.CA(), port 443. The nodes get
// the wildcard certificate for AliasZone (and its apex) from it through
// DNS-01: a node's Caddy publishes the challenge through its DSHT node
// (dns coral), the CA looks the TXT record up through the demo's first
// resolver, which asks the Coral name servers, which answer from the DSHT.
// The nodes share one certificate store (a directory under the run
// directory, Caddy's file_system storage), so one node obtains the
// certificate, the others load it, and any of them renews it. The CA's
// root certificate (CARoot) is all a client needs to trust.

// ACMEDirectory is the demo CA's ACME directory URL.
func (n *Net) ACMEDirectory() string {
	u := url.URL{Scheme: "https", Host: n.Layout.CA().String(), Path: "/acme/local/directory"}
	return u.String()
}

// CoralHostOneLabel is the origin's one-label Coralized name,
// www-demo-test.nyud.test: the form the wildcard certificate covers.
func (n *Net) CoralHostOneLabel() string {
	h, err := coralname.CoralizeOneLabel(coralname.Origin{Host: n.OriginHost}, AliasZone)
	if err != nil {
		panic(err) // the demo origin fits in one label
	}
	return h
}

// HTTPSURL is the https Coralized URL of a path (with query) on the origin.
func (n *Net) HTTPSURL(pathQuery string) string {
	return "https://" + n.CoralHostOneLabel() + pathQuery
}

// caDir is where the CA's configuration, data and log are.
func (n *Net) caDir() string { return filepath.Join(n.Dir, "ca") }

// certStorage is the directory every node's Caddy keeps certificates in.
func (n *Net) certStorage() string { return filepath.Join(n.Dir, "certs") }

// caRootPath is where Caddy's PKI app writes the CA's root certificate
// (its data directory is under caDir: labconf.CaddyEnv).
func (n *Net) caRootPath() string {
	return filepath.Join(n.caDir(), "data", "caddy", "pki", "authorities", "local", "root.crt")
}

// startCA starts the CA and waits until its ACME directory answers over
// TLS with the root it wrote.
func (n *Net) startCA(ctx context.Context) (err error) {
	dir := n.caDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(dir, "Caddyfile")
	if err := labconf.WriteFile(path, caCaddyfile(n.Layout.CA(), n.Resolvers[0].Addr, n.opts.CertLifetime)); err != nil {
		return err
	}
	n.CA, err = proc.Start(labconf.CaddyArgv(n.opts.Caddy, path), proc.Options{Name: "ca/caddy", Dir: dir,
		Env: labconf.CaddyEnv(dir), Log: filepath.Join(dir, "caddy.log"), Banner: "demonet"})
	if err != nil {
		return err
	}
	n.CARoot = n.caRootPath()
	err = n.poll(ctx, "the ACME CA", func() error {
		if !n.CA.Running() {
			return errors.New("exited")
		}
		client, err := n.HTTPSClient(n.Layout.CA())
		if err != nil {
			return err
		}
		resp, err := client.Get(n.ACMEDirectory())
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", n.ACMEDirectory(), resp.Status)
		}
		return nil
	})
	if err == nil {
		n.logf("ACME CA %s (root certificate %s)", n.ACMEDirectory(), n.CARoot)
	}
	return err
}

// CARoots is a pool holding the demo CA's root.
func (n *Net) CARoots() (*x509.CertPool, error) {
	pem, err := os.ReadFile(n.CARoot)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no certificate", n.CARoot)
	}
	return pool, nil
}

// HTTPSClient is an HTTPS client that trusts the demo CA and connects to
// addr:443 whatever the URL's host (the names are the demo's; no DNS
// lookup). It does not follow redirects.
func (n *Net) HTTPSClient(addr netip.Addr) (*http.Client, error) {
	roots, err := n.CARoots()
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: roots},
			ForceAttemptHTTP2: true,
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return d.DialContext(ctx, network, netip.AddrPortFrom(addr, PortHTTPS).String())
			},
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, nil
}

// Certificate returns the certificate node nd serves for the one-label
// name, verified against the demo CA.
func (n *Net) Certificate(nd *Node) (*x509.Certificate, error) {
	roots, err := n.CARoots()
	if err != nil {
		return nil, err
	}
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 3 * time.Second},
		Config: &tls.Config{RootCAs: roots, ServerName: n.CoralHostOneLabel()}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(nd.Addr, PortHTTPS).String())
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.(*tls.Conn).ConnectionState().PeerCertificates[0], nil
}

// waitHTTPS waits until nd serves a certificate from the demo CA for the
// one-label name.
func (n *Net) waitHTTPS(ctx context.Context, nd *Node) error {
	return n.poll(ctx, nd.Caddy.Name+" serves the wildcard certificate", func() error {
		_, err := n.Certificate(nd)
		return err
	})
}
