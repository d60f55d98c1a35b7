package operator

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/internal/lab/labconf"
	"github.com/miekg/dns"
)

// TestPlainServersNoCoral runs a plain Caddy (a file_server site and a
// reverse_proxy site, Caddy's own metrics on) and a plain CoreDNS (whoami,
// cache, log, errors, prometheus), both built into the same bin/caddy and
// bin/coredns as Coral, serves a few requests and queries, and scrapes
// them: the Caddy exports no caddy_coral_* series, and no alert of
// deploy/prometheus fires on either's metrics held for 30 minutes
// (promtool test rules). Which coredns_coral_* series a plain CoreDNS
// exports is the DNS plugin's business; this test logs them and checks
// only that no alert fires on them.
func TestPlainServersNoCoral(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool is not installed (Debian package prometheus: make deps); CI=true, so this is a failure")
		}
		t.Skip("promtool is not installed (Debian package prometheus: make deps)")
	}
	const caddyIP, dnsIP = "127.0.146.41", "127.0.146.42"
	admin := caddyIP + ":2019"
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "index.html"), []byte("<p>plain</p>\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	caddyfile := labconf.Caddy{
		Admin: ap(admin), AdminOrigins: []string{admin}, HTTPSOff: true, SkipTrust: true, Grace: "1s",
		Options: []labconf.Directive{labconf.D("metrics")},
		Sites: []labconf.Directive{
			labconf.D(":8090").With(labconf.D("bind", caddyIP), labconf.D("root", "*", dir), labconf.D("file_server")),
			labconf.D(":8091").With(labconf.D("bind", caddyIP), labconf.D("reverse_proxy", caddyIP+":8090")),
		},
	}.String()
	c := startCaddy(t, "plain-caddy", dir, caddyfile)
	corefile := labconf.Corefile("", labconf.D("example.test:1053").With(labconf.D("bind", dnsIP), labconf.D("whoami"),
		labconf.D("cache"), labconf.D("log"), labconf.D("errors"), labconf.D("prometheus", dnsIP+":9153")))
	d := startCoreDNS(t, "plain-coredns", t.TempDir(), corefile)

	for _, url := range []string{"http://" + caddyIP + ":8090/", "http://" + caddyIP + ":8091/"} {
		waitFor(t, c, 30*time.Second, url, func() error {
			status, body, err := get(url, "")
			if err == nil && (status != 200 || body != "<p>plain</p>\n") {
				err = fmt.Errorf("%d %q", status, body)
			}
			return err
		})
	}
	waitFor(t, d, 30*time.Second, "a whoami query", func() error {
		m := new(dns.Msg)
		m.SetQuestion("example.test.", dns.TypeA)
		_, _, err := (&dns.Client{Timeout: time.Second}).Exchange(m, dnsIP+":1053")
		return err
	})

	scrape := func(p interface{ Exited() error }, url, host string) string {
		var body string
		waitFor(t, nil, 10*time.Second, url, func() error {
			status, b, err := get(url, host)
			if err == nil && status != 200 {
				err = fmt.Errorf("%s: %d", url, status)
			}
			body = b
			return err
		})
		return body
	}
	caddyMetrics := scrape(c, "http://"+admin+"/metrics", admin)
	dnsMetrics := scrape(d, "http://"+dnsIP+":9153/metrics", "")
	if !strings.Contains(caddyMetrics, "caddy_http_requests_total") || !strings.Contains(dnsMetrics, "coredns_dns_requests_total") {
		t.Fatalf("the scrapes miss the servers' own metrics:\n%.500s\n%.500s", caddyMetrics, dnsMetrics)
	}
	for _, line := range strings.Split(caddyMetrics, "\n") {
		if strings.HasPrefix(line, "caddy_coral_") {
			t.Errorf("a Caddy without the coral app exports %s", line)
		}
	}
	var dnsCoral []string
	for _, line := range strings.Split(dnsMetrics, "\n") {
		if strings.HasPrefix(line, "coredns_coral_") {
			dnsCoral = append(dnsCoral, line)
		}
	}
	t.Logf("a CoreDNS without coral exports %d coredns_coral_* series: %q", len(dnsCoral), dnsCoral)

	// The scrapes as promtool input: every series held at its value for
	// 30 minutes, with the scrape jobs' labels, and both targets up.
	rules, err := filepath.Abs("../../deploy/prometheus/coral.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(rules)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "rule_files:\n  - %q\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n", rules)
	n := promSeries(&b, caddyMetrics, "coral-proxy", admin) + promSeries(&b, dnsMetrics, "coral-dns", dnsIP+":9153")
	fmt.Fprintf(&b, "      - series: 'up{job=\"coral-proxy\",instance=%q}'\n        values: '1x30'\n", admin)
	fmt.Fprintf(&b, "      - series: 'up{job=\"coral-dns\",instance=%q}'\n        values: '1x30'\n", dnsIP+":9153")
	b.WriteString("    alert_rule_test:\n")
	alerts := regexp.MustCompile(`(?m)^\s+- alert: (\w+)$`).FindAllStringSubmatch(string(text), -1)
	if len(alerts) == 0 {
		t.Fatal("no alerts in coral.rules.yml")
	}
	for _, a := range alerts {
		fmt.Fprintf(&b, "      - eval_time: 30m\n        alertname: %s\n", a[1])
	}
	path := filepath.Join(t.TempDir(), "plain.test.yml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d series from the two scrapes, %d alerts", n, len(alerts))
	if out, err := exec.Command(promtool, "test", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("an alert fires on a plain Caddy or CoreDNS: %v\n%s", err, out)
	}
}

// promSeries writes the samples of a scrape (Prometheus's text format) as
// promtool input series held for 30 minutes, labelled with job and
// instance as a scrape would; it returns how many.
func promSeries(b *strings.Builder, text, job, instance string) int {
	n := 0
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		series, value := line[:i], line[i+1:]
		if strings.ContainsAny(value, "NaInf") {
			continue // NaN, +Inf: nothing an alert compares
		}
		target := fmt.Sprintf("job=%q,instance=%q", job, instance)
		if j := strings.IndexByte(series, '{'); j >= 0 {
			series = series[:j+1] + target + "," + series[j+1:]
		} else {
			series += "{" + target + "}"
		}
		fmt.Fprintf(b, "      - series: '%s'\n        values: '%sx30'\n", strings.ReplaceAll(series, "'", "''"), value)
		n++
	}
	return n
}
