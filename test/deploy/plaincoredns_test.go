//go:build linux

package deploy

import (
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/internal/lab/labconf"
	"github.com/coralcdn/coral/internal/lab/proc"
)

// TestPlainCoreDNSQuiet (issue 37, finding 3): bin/coredns, built with the
// coral plugin, running a Corefile without coral (a forward zone, cache,
// log, prometheus) exports no coredns_coral_* series, and the shipped
// alert rules, fed every series it exports for ten minutes, fire nothing
// (promtool test rules): before, it exported coredns_coral_reload_success
// 0 and CoralReloadFailed fired on every plain CoreDNS. The same binary
// with a coral block exports the coral series, coredns_coral_draining
// among them from the start.
func TestPlainCoreDNSQuiet(t *testing.T) {
	promtool := needTool(t, "promtool", "Debian package prometheus: make deps")
	bin, err := labconf.Binary("coredns")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	const addr = "127.0.151.1"
	plain := labconf.Corefile("a CoreDNS without coral", labconf.D("example.test").With(
		labconf.D("bind", addr),
		labconf.D("forward", ".", "127.0.151.9"),
		labconf.D("cache"),
		labconf.D("log"),
		labconf.D("prometheus", addr+":9153"),
	))
	body := scrapeCoreDNS(t, bin, plain, addr, "coredns_build_info")
	if lines := grepPrefix(body, "coredns_coral_"); lines != "" {
		t.Errorf("a Corefile without coral exports coral series:\n%s", lines)
	}

	// Every series it exports, constant for ten minutes, through the
	// shipped rules: no alert.
	dir := t.TempDir()
	rules, err := os.ReadFile(repoFile(t, "deploy/prometheus/coral.rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "coral.rules.yml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	var in strings.Builder
	sample := regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? ([0-9.eE+-]+|NaN|[+-]Inf)$`)
	n := 0
	for _, line := range strings.Split(body, "\n") {
		m := sample.FindStringSubmatch(line)
		if m == nil || m[3] == "NaN" || strings.Contains(m[3], "Inf") {
			continue
		}
		labels := strings.TrimSuffix(strings.TrimPrefix(m[2], "{"), "}")
		if labels != "" {
			labels += ","
		}
		fmt.Fprintf(&in, "      - series: '%s{%sjob=\"coredns\",instance=\"%s:9153\"}'\n        values: '%sx20'\n", m[1], labels, addr, m[3])
		n++
	}
	if n < 20 {
		t.Fatalf("only %d samples scraped", n)
	}
	var alerts strings.Builder
	for _, a := range regexp.MustCompile(`(?m)^\s+- alert: (\w+)$`).FindAllStringSubmatch(string(rules), -1) {
		fmt.Fprintf(&alerts, "      - eval_time: 10m\n        alertname: %s\n", a[1])
	}
	test := "rule_files:\n  - coral.rules.yml\nevaluation_interval: 30s\ntests:\n  - interval: 30s\n    input_series:\n" +
		in.String() + "    alert_rule_test:\n" + alerts.String()
	if err := os.WriteFile(filepath.Join(dir, "plain.test.yml"), []byte(test), 0o644); err != nil {
		t.Fatal(err)
	}
	runOut(t, dir, promtool, "test", "rules", "plain.test.yml")

	// With coral: its series are there, the drain gauge at 0 from the start.
	withCoral := labconf.Corefile("the same with coral", labconf.D("nyucd.test").With(
		labconf.D("bind", addr),
		labconf.CoralPlugin{Zone: "nyucd.test", Node: labconf.Node{Listen: netip.AddrPortFrom(netip.MustParseAddr(addr), 4000)}}.Directive(),
		labconf.D("prometheus", addr+":9153"),
	))
	body = scrapeCoreDNS(t, bin, withCoral, addr, `coredns_coral_draining{node="`+addr+`:4000"}`)
	for _, want := range []string{"coredns_coral_reload_success 1", `coredns_coral_draining{node="` + addr + `:4000"} 0`} {
		if !strings.Contains(body, want) {
			t.Errorf("with coral, the metrics lack %q:\n%s", want, grepPrefix(body, "coredns_coral_"))
		}
	}
}

// scrapeCoreDNS runs bin/coredns on corefile until its metrics answer, and
// returns them.
// scrapeCoreDNS starts bin on corefile and returns its first scrape of
// the metrics at addr:9153 that holds ready: CoreDNS serves the metrics
// from its prometheus plugin's start-up, which may come before other
// plugins' (coral's sets its gauges in its own OnStartup).
func scrapeCoreDNS(t *testing.T, bin, corefile, addr, ready string) string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "Corefile")
	if err := labconf.WriteFile(path, corefile); err != nil {
		t.Fatal(err)
	}
	p, err := proc.Start([]string{bin, "-conf", path}, proc.Options{Name: "coredns", Dir: dir, Log: filepath.Join(dir, "coredns.log")})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(5 * time.Second)
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	var last error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err := p.Exited(); err != nil {
			t.Fatalf("coredns exited: %v\n%s", err, p.LogTail(20))
		}
		resp, err := c.Get("http://" + addr + ":9153/metrics")
		if err != nil {
			last = err
			continue
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode == http.StatusOK && strings.Contains(string(b), "coredns_build_info") && strings.Contains(string(b), ready) {
			return string(b)
		}
		last = fmt.Errorf("%s, %v", resp.Status, err)
	}
	t.Fatalf("no metrics within 20 s: %v\n%s", last, p.LogTail(20))
	return ""
}

func grepPrefix(body, prefix string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
