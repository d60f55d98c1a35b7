//go:build linux

package demonet

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dn "github.com/coralcdn/coral/internal/lab/demonet"
	"github.com/coralcdn/coral/internal/lab/headless"
	"github.com/miekg/dns"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// TestHTTPS: the network got the wildcard certificate for the alias zone
// from the demo's ACME CA (which validates dns-01 only), through DNS-01
// answered by the coral plugin from the DSHT; curl (HTTP/2), an HTTP/3
// client and headless Chromium load the site over HTTPS by its one-label
// name through two nodes, the second serving from its peer; plain http
// for the one-label name is redirected to https.
func TestHTTPS(t *testing.T) {
	n := network(t)
	a, b := n.Nodes[0], n.Nodes[len(n.Nodes)-1] // different clusters
	if !a.Caddy.Running() || !b.Caddy.Running() {
		t.Fatal("nodes 0 and N-1 must be running")
	}
	one := n.CoralHostOneLabel()

	// The certificate, and the DNS-01 answer behind it.
	cert, err := n.Certificate(a)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(cert.DNSNames, "*."+dn.AliasZone) || cert.VerifyHostname(one) != nil {
		t.Errorf("certificate names %v, want *.%s covering %s", cert.DNSNames, dn.AliasZone, one)
	}
	if txt := challengeTXT(t, b.Addr); len(txt) == 0 {
		t.Error("a name server answers no TXT record for the challenge the network solved")
	}
	if !logsContain(t, n, "caddy.log", `"published ACME challenge in the DSHT"`) {
		t.Error("no node's Caddy published a challenge in the DSHT")
	}

	// curl, HTTP/2, through a then b.
	id := runID(t)
	page := dn.PathAbout + "?https=" + id
	r := curlHTTPS(t, n, a, page)
	if r.Status != http.StatusOK || r.version != "2" || !strings.Contains(r.cacheStatus(), `detail="origin"`) {
		t.Fatalf("via node %d: HTTP/%s %d, Cache-Status %q", a.Index, r.version, r.Status, r.cacheStatus())
	}
	checkBody(t, page, &r.response)
	if !strings.Contains(r.Header.Get("Alt-Svc"), `h3=":443"`) {
		t.Errorf("no HTTP/3 advertised: Alt-Svc %q", r.Header.Get("Alt-Svc"))
	}
	waitCommitted(t, n, a, page)
	r = curlHTTPS(t, n, b, page)
	if r.Status != http.StatusOK || !strings.Contains(r.cacheStatus(), `detail="peer-l`) {
		t.Errorf("via node %d: %d, Cache-Status %q; want it from its peer", b.Index, r.Status, r.cacheStatus())
	}

	// HTTP/3, over QUIC on UDP 443: a hit once b has stored the copy it
	// just relayed (curl can have the whole body before b commits it; a
	// request in between joins b's download instead).
	waitCommitted(t, n, b, page)
	h3 := h3Get(t, n, b, n.HTTPSURL(page))
	if h3.ProtoMajor != 3 || h3.StatusCode != http.StatusOK || !strings.Contains(h3.Header.Get("Cache-Status"), "hit") {
		t.Errorf("HTTP/3 via node %d: %s %d, Cache-Status %q", b.Index, h3.Proto, h3.StatusCode, h3.Header.Get("Cache-Status"))
	}

	// Plain http for the one-label name: to https.
	if r, err := curl(t, "--resolve", fmt.Sprintf("%s:%d:%s", one, dn.PortHTTP, a.Addr), "http://"+one+page); err != nil ||
		r.Status != http.StatusPermanentRedirect || r.Header.Get("Location") != n.HTTPSURL(page) {
		t.Errorf("http://%s%s: %+v %v; want 308 to %s", one, page, r, err, n.HTTPSURL(page))
	}

	// Chromium, trusting the demo CA: the page and its images through a,
	// then through b, which gets the page from a.
	chrome, err := headless.Binary()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	index := dn.PathIndex + "?https=" + id
	for _, nd := range []*dn.Node{a, b} {
		// A fresh profile each time (its HTTP cache would answer the
		// second load), trusting the CA.
		dir := t.TempDir()
		if err := headless.Trust(dir, "Coral demo CA", n.CARoot); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		dom, err := headless.Run(ctx, chrome, dir, "--host-resolver-rules=MAP *."+dn.AliasZone+" "+nd.Addr.String(),
			"--dump-dom", n.HTTPSURL(index))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if got := len(regexp.MustCompile(`<img `).FindAllString(string(dom), -1)); got != 3 || !bytes.Contains(dom, []byte("</html>")) {
			t.Fatalf("via node %d Chromium rendered %d images, want 3:\n%s", nd.Index, got, tail(string(dom), 2000))
		}
	}
	if obj := waitCommitted(t, n, b, index); !strings.HasPrefix(obj.Source, "peer-l") {
		t.Errorf("node %d got the page from %q, want a peer", b.Index, obj.Source)
	}
}

// TestCertificateRenewal: on a network of its own (three nodes) whose CA issues
// 5-minute certificates (renewed with a quarter of their life left), the
// node that obtained the wildcard certificate is killed; another node
// renews it through DNS-01 (its own DSHT node publishing, the surviving
// name servers answering), and serves the new one.
func TestCertificateRenewal(t *testing.T) {
	// Three nodes: node 0 alone in its cluster, so when it is the one
	// killed, the resolver locked onto that cluster must still have a
	// server (the plugin tops a one-server NS set up from the level
	// below; with a set of one, renewal stalled until ns_ttl ran out).
	o := dn.Options{Prefix: netip.MustParsePrefix("127.0.82.0/24"), Nodes: 3,
		CertLifetime: 5 * time.Minute, RenewInterval: 2 * time.Second, RenewalRatio: 0.75}
	if err := dn.Available(o); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	n, err := dn.Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			n.KeepDir()
			t.Logf("logs in %s", n.Dir)
		}
		if err := n.Stop(); err != nil {
			t.Logf("stopping: %v", err) // the killed node is reported
		}
	}()

	var first *dn.Node
	for _, nd := range n.Nodes {
		if fileContains(t, filepath.Join(nd.Dir, "caddy.log"), `"certificate obtained successfully","identifier":"*.`+dn.AliasZone+`"`) {
			first = nd
		}
	}
	if first == nil {
		t.Fatal("no node's log says it obtained the wildcard certificate")
	}
	old, err := n.Certificate(first)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("node %d obtained the certificate (serial %x, valid %v to %v); killing it", first.Index, old.SerialNumber,
		old.NotBefore.Format(time.TimeOnly), old.NotAfter.Format(time.TimeOnly))
	n.KillNode(first.Index)

	renewedBy := map[int]*x509.Certificate{}
	waitFor(t, "a surviving node serving a renewed certificate", 2*time.Minute, func() error {
		for _, nd := range n.Nodes {
			if nd == first {
				continue
			}
			c, err := n.Certificate(nd)
			if err != nil {
				return fmt.Errorf("node %d: %w", nd.Index, err)
			}
			if c.SerialNumber.Cmp(old.SerialNumber) == 0 {
				return fmt.Errorf("node %d still serves serial %x", nd.Index, old.SerialNumber)
			}
			renewedBy[nd.Index] = c
		}
		return nil
	})
	var serials []*big.Int
	for i, c := range renewedBy {
		serials = append(serials, c.SerialNumber)
		if !c.NotAfter.After(old.NotAfter) || c.VerifyHostname(n.CoralHostOneLabel()) != nil {
			t.Errorf("node %d: the new certificate (to %v) is no renewal of the old (to %v)", i, c.NotAfter, old.NotAfter)
		}
	}
	renewer := false
	for _, nd := range n.Nodes {
		if nd != first && fileContains(t, filepath.Join(nd.Dir, "caddy.log"), `"published ACME challenge in the DSHT"`) {
			renewer = true
		}
	}
	if !renewer {
		t.Error("no surviving node published a challenge: who renewed?")
	}
	t.Logf("renewed: serials %x", serials)
	for _, nd := range n.Nodes {
		if nd == first {
			continue
		}
		client, err := n.HTTPSClient(nd.Addr)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Get(n.HTTPSURL(dn.PathAbout))
		if err != nil {
			t.Fatalf("node %d over https after the renewal: %v", nd.Index, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("node %d over https after the renewal: %s", nd.Index, resp.Status)
		}
	}
}

// httpsResponse is curl's response with its HTTP version.
type httpsResponse struct {
	response
	version string
}

// curlHTTPS GETs pathQuery by the one-label name from node nd over https,
// trusting the demo CA, and reports the HTTP version curl used.
func curlHTTPS(t *testing.T, n *dn.Net, nd *dn.Node, pathQuery string) *httpsResponse {
	t.Helper()
	r, err := curl(t, "--cacert", n.CARoot, "--resolve", fmt.Sprintf("%s:%d:%s", n.CoralHostOneLabel(), dn.PortHTTPS, nd.Addr),
		n.HTTPSURL(pathQuery))
	if err != nil {
		t.Fatal(err)
	}
	return &httpsResponse{response: *r, version: strings.TrimPrefix(r.Proto, "HTTP/")}
}

// h3Get GETs url over HTTP/3 from node nd, trusting the demo CA.
func h3Get(t *testing.T, n *dn.Net, nd *dn.Node, url string) *http.Response {
	t.Helper()
	roots, err := n.CARoots()
	if err != nil {
		t.Fatal(err)
	}
	target := netip.AddrPortFrom(nd.Addr, dn.PortHTTPS).String()
	tr := &http3.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots},
		// The name is the demo's, in no DNS: dial the node.
		Dial: func(ctx context.Context, _ string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error) {
			return quic.DialAddrEarly(ctx, target, tlsCfg, cfg)
		},
	}
	defer tr.Close()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("HTTP/3 GET %s via %s: %v", url, target, err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	return resp
}

// challengeTXT asks the name server at addr for the alias zone's ACME
// challenge TXT records.
func challengeTXT(t *testing.T, addr netip.Addr) []string {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion("_acme-challenge."+dn.AliasZone+".", dns.TypeTXT)
	m.RecursionDesired = false
	in, err := dns.Exchange(m, net.JoinHostPort(addr.String(), "53"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, rr := range in.Answer {
		if txt, ok := rr.(*dns.TXT); ok {
			out = append(out, strings.Join(txt.Txt, ""))
		}
	}
	return out
}

// logsContain reports whether any node's log file (caddy.log or
// coredns.log) contains s.
func logsContain(t *testing.T, n *dn.Net, file, s string) bool {
	t.Helper()
	for _, nd := range n.Nodes {
		if fileContains(t, filepath.Join(nd.Dir, file), s) {
			return true
		}
	}
	return false
}

func fileContains(t *testing.T, path, s string) bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Contains(b, []byte(s))
}
