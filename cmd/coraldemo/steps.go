//go:build linux

package main

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"regexp"
	"strings"
	"time"

	"github.com/coralcdn/coral/internal/lab/demonet"
)

// step is one command the demo prints, and how -smoke checks its output.
type step struct {
	what  string
	cmd   string // shell text, exactly as printed
	check func(out string) error
}

// want checks that every pattern matches somewhere in the output, in
// order.
func want(patterns ...string) func(string) error {
	return func(out string) error {
		rest := out
		for _, p := range patterns {
			loc := regexp.MustCompile(p).FindStringIndex(rest)
			if loc == nil {
				return fmt.Errorf("no %q in the output (after the earlier matches)", p)
			}
			rest = rest[loc[1]:]
		}
		return nil
	}
}

// without adds a check that pattern does not match.
func without(pattern string, check func(string) error) func(string) error {
	return func(out string) error {
		if m := regexp.MustCompile(pattern).FindString(out); m != "" {
			return fmt.Errorf("unexpected %q in the output", m)
		}
		return check(out)
	}
}

func tryCommands(n *demonet.Net) []step {
	res := n.Resolvers[0]
	host := n.CoralHost()
	var east, west []netip.Addr
	for _, nd := range n.Nodes {
		if nd.Region == demonet.RegionEast {
			east = append(east, nd.Addr)
		} else {
			west = append(west, nd.Addr)
		}
	}
	first := east[0]
	nodeRE := regexp.QuoteMeta(n.Layout.Node(0).String()[:strings.LastIndexByte(n.Layout.Node(0).String(), '.')+1]) + `\d+`
	var steps []step

	steps = append(steps, step{
		what: fmt.Sprintf("Resolve the Coralized name through %s: the alias zone's DNAME, the CNAME it makes,\n  # and the addresses of two live proxies picked for the resolver's cluster (TTL %d s)", res.Name(), demonet.AnswerTTL),
		cmd:  fmt.Sprintf("dig @%s %s", res.Addr, host),
		check: want(`status: NOERROR`, `IN\s+DNAME\s+http\.l2\.l1\.l0\.`+regexp.QuoteMeta(demonet.CoralZone),
			`IN\s+A\s+`+nodeRE),
	})

	steps = append(steps, step{
		what: "Fetch the page through the first proxy DNS returned: it came from the origin\n  # (Cache-Status detail=\"origin\"), and the origin's Set-Cookie is gone",
		cmd: fmt.Sprintf("ip=$(dig +short @%s %s | grep -E '^[0-9.]+$' | head -n1)\n", res.Addr, host) +
			fmt.Sprintf("curl -sS -D - -o /dev/null --resolve %s:80:$ip http://%s/", host, host),
		check: without(`(?i)set-cookie`, want(`HTTP/1\.1 200`, `(?i)cache-status: coral; fwd=uri-miss; detail="origin"`)),
	})

	steps = append(steps, crowdStep(host, east, west))

	steps = append(steps, httpsSteps(n, first)...)

	steps = append(steps, refusalSteps(n, first)...)
	steps = append(steps, introspectionSteps(n, first)...)
	return steps
}

// crowdStep asks for one object at one node after another, east then
// west then east again, so the answers show each place a copy can come from.
func crowdStep(host string, east, west []netip.Addr) step {
	first := east[0]
	ips := []netip.Addr{first}
	var expect []string
	expect = append(expect, `200 \d+ bytes +coral; fwd=uri-miss; detail="origin"`)
	desc := "from the origin"
	second := netip.Addr{}
	if len(east) > 1 {
		second = east[1]
		ips = append(ips, second)
		expect = append(expect, `200 \d+ bytes +coral; fwd=uri-miss; detail="peer-l2"`)
		desc += ", from a peer in its cluster (peer-l2)"
	}
	if len(west) > 0 {
		ips = append(ips, west[0])
		expect = append(expect, `200 \d+ bytes +coral; fwd=uri-miss; detail="peer-l1"`)
		desc += ", from a peer in the\n  # other cluster, found at level 1 (peer-l1)"
	}
	if second.IsValid() {
		ips = append(ips, second)
		expect = append(expect, `200 \d+ bytes +coral; hit; detail="local"`)
		desc += ", and again at the second node: from its own cache"
	}
	var ipList []string
	for _, a := range ips {
		ipList = append(ipList, a.String())
	}
	return step{
		what: "One image asked at one node after another: " + desc,
		cmd: fmt.Sprintf("for ip in %s; do\n", strings.Join(ipList, " ")) +
			fmt.Sprintf("  curl -sS -o /dev/null --resolve %s:80:$ip -w \"$ip %%{http_code} %%{size_download} bytes  %%header{cache-status}\\n\" http://%s%s\n", host, host, demonet.PathJPEG) +
			"done",
		check: want(expect...),
	}
}

// refusalSteps show what a proxy will not do: pass cookies, serve a host
// that is not Coralized, fetch from a private address.
func refusalSteps(n *demonet.Net, first netip.Addr) []step {
	host := n.CoralHost()
	var steps []step
	steps = append(steps, step{
		what: "Cookies never pass: send one; the origin's access log shows what reached it (cookie=\"\")",
		cmd: fmt.Sprintf("curl -sS -o /dev/null -w '%%{http_code}\\n' -H 'Cookie: session=alice' --resolve %s:80:%s http://%s%s\n", host, first, host, demonet.PathAbout) +
			fmt.Sprintf("grep %s %s/origin.log | tail -n 1", demonet.PathAbout, n.Dir),
		check: want(`^200\n`, regexp.QuoteMeta(demonet.PathAbout)+` 200 cookie=""`),
	})

	steps = append(steps, step{
		what:  "A host name that is not Coralized: refused (421 Misdirected Request); Coral is not an open proxy",
		cmd:   fmt.Sprintf("curl -sS -o /dev/null -w '%%{http_code}\\n' -H 'Host: %s' http://%s/", demonet.OriginName, first),
		check: want(`^421\n`),
	})

	intranet := n.Layout.Intranet().String() + "." + demonet.AliasZone
	steps = append(steps, step{
		what:  "An origin on a private address (outside allow_origins): refused (403)",
		cmd:   fmt.Sprintf("curl -sS -o /dev/null -w '%%{http_code}\\n' --resolve %s:80:%s http://%s/", intranet, first, intranet),
		check: want(`^403\n`),
	})
	return steps
}

// introspectionSteps show a node's state: the admin API, the status page
// and the name server's metrics.
func introspectionSteps(n *demonet.Net, first netip.Addr) []step {
	var steps []step
	steps = append(steps, step{
		what:  "A node's state through Caddy's admin API: its DSHT node, clusters, caches and recent fetches\n  # (also /coral/cache, and Caddy's metrics on /metrics)",
		cmd:   fmt.Sprintf("curl -sS http://%s:%d/coral/status; echo", first, demonet.PortAdmin),
		check: want(`"joined":true`, `"recent_fetches"`),
	})

	if url := n.Nodes[0].StatusURL; url != "" {
		steps = append(steps, step{
			what:  "The node's status page (open it in a browser; ?format=json for JSON)",
			cmd:   fmt.Sprintf("curl -sS -o /dev/null -w '%%{http_code} %%{content_type}\\n' %s", url),
			check: want(`^200 text/html`),
		})
	}

	steps = append(steps, step{
		what:  "The proxies a name server found live in its last sweep, per level (CoreDNS metrics)",
		cmd:   fmt.Sprintf("curl -sS http://%s:%d/metrics | grep '^coredns_coral_live_proxies'", first, demonet.PortMetrics),
		check: want(`coredns_coral_live_proxies\{level="0",node="` + regexp.QuoteMeta(first.String()) + `:\d+"\} \d+`),
	})
	return steps
}

// httpsSteps show the one-label name over HTTPS, with the certificate the
// network got from the demo CA, and the redirect from plain http.
func httpsSteps(n *demonet.Net, first netip.Addr) []step {
	var steps []step
	one := n.CoralHostOneLabel()
	steps = append(steps, step{
		what: fmt.Sprintf("HTTPS: the one-label name (%s) with the zone's wildcard certificate, which the\n  # network got from the demo's ACME CA through DNS-01 answered by its own name servers; trust the CA's root", one),
		cmd: fmt.Sprintf("curl -sS -o /dev/null --cacert %s --resolve %s:%d:%s -w '%%{http_version} %%{http_code} %%header{cache-status}\\n' %s\n",
			n.CARoot, one, demonet.PortHTTPS, first, n.HTTPSURL(demonet.PathJPEG)) +
			fmt.Sprintf("openssl s_client -connect %s:%d -servername %s -CAfile %s </dev/null 2>/dev/null | openssl x509 -noout -issuer -ext subjectAltName\n",
				first, demonet.PortHTTPS, one, n.CARoot) +
			fmt.Sprintf("openssl s_client -connect %s:%d -servername %s -CAfile %s </dev/null 2>/dev/null | grep -m1 'Verify return code'",
				first, demonet.PortHTTPS, one, n.CARoot),
		check: want(`(?m)^2 200 coral; hit; detail="local"$`, `issuer=.*Coral demo CA`, `DNS:\*\.`+regexp.QuoteMeta(demonet.AliasZone), `Verify return code: 0 \(ok\)`),
	})
	steps = append(steps, step{
		what:  "The one-label name over plain http goes to https (308); the dotted name stays on http",
		cmd:   fmt.Sprintf("curl -sS -o /dev/null --resolve %s:80:%s -w '%%{http_code} %%{redirect_url}\\n' http://%s/", one, first, one),
		check: want(`^308 ` + regexp.QuoteMeta(n.HTTPSURL("/")) + `\n`),
	})

	return steps
}

// runSmoke runs every step once, in order, and checks its output.
func runSmoke(ctx context.Context, n *demonet.Net, steps []step) int {
	fmt.Println("Smoke check: running the commands the demo prints.")
	failed := 0
	for i, s := range steps {
		fmt.Printf("\n[%d/%d] %s\n", i+1, len(steps), strings.ReplaceAll(s.what, "\n  # ", "\n      "))
		for _, line := range strings.Split(s.cmd, "\n") {
			fmt.Printf("  $ %s\n", line)
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		out, err := exec.CommandContext(cctx, "sh", "-c", s.cmd).CombinedOutput()
		cancel()
		for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
			if len(line) > 160 {
				line = line[:160] + " ..."
			}
			fmt.Printf("    %s\n", line)
		}
		if err == nil {
			err = s.check(string(out))
		}
		if err != nil {
			failed++
			fmt.Printf("  FAIL: %v\n", err)
		} else {
			fmt.Println("  ok")
		}
	}
	if err := n.Check(); err != nil {
		failed++
		fmt.Printf("\nFAIL: %v\n", err)
	}
	if failed > 0 {
		fmt.Printf("\nSmoke check: %d of %d steps FAILED (logs in %s; -keep keeps them)\n", failed, len(steps), n.Dir)
		return 1
	}
	fmt.Printf("\nSmoke check: all %d steps passed.\n", len(steps))
	return 0
}
