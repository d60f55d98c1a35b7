package deploy

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Metrics the rules and the dashboard may name besides Coral's own, which
// come from the code (metricNames).
var externalMetrics = map[string]string{
	"up":                                  "Prometheus, per scrape target",
	"caddy_config_last_reload_successful": "Caddy's admin /metrics",
}

// metricNames returns every metric name the code can export, found from
// the string literals of the packages that define them: each family is its
// namespace and subsystem (caddy_coral_, coredns_coral_, and the DSHT's
// *_dht_ of internal/dhtmetrics) followed by a name in its package.
func metricNames(t *testing.T) map[string]bool {
	t.Helper()
	families := []struct{ prefix, dir string }{
		{"caddy_coral_", "module/caddy"},
		{"coredns_coral_", "plugin/coredns"},
		{"caddy_coral_dht_", "internal/dhtmetrics"},
		{"coredns_coral_dht_", "internal/dhtmetrics"},
	}
	names := map[string]bool{}
	for _, f := range families {
		for lit := range stringLiterals(t, repoFile(t, f.dir)) {
			if validMetricName.MatchString(lit) {
				names[f.prefix+lit] = true
			}
		}
	}
	return names
}

var validMetricName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// stringLiterals returns the string constants in the non-test Go files of
// one directory.
func stringLiterals(t *testing.T, dir string) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s: %v", dir, err)
	}
	lits := map[string]bool{}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if b, ok := n.(*ast.BasicLit); ok && b.Kind == token.STRING {
				if s, err := strconv.Unquote(b.Value); err == nil {
					lits[s] = true
				}
			}
			return true
		})
	}
	return lits
}

// promqlWords are PromQL's keywords and aggregation modifiers, which look
// like metric names.
var promqlWords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"bool": true, "and": true, "or": true, "unless": true, "offset": true, "inf": true, "nan": true,
}

var (
	promqlStrings   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promqlMatchers  = regexp.MustCompile(`\{[^}]*\}`)
	promqlRanges    = regexp.MustCompile(`\[[^\]]*\]`)
	promqlGrouping  = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promqlNumbers   = regexp.MustCompile(`\b[0-9][0-9.]*(?:[eE][+-]?[0-9]+)?[a-z]*`) // 0.5, 1e3, 5m
	promqlNameToken = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
)

// queryMetrics returns the metric names a PromQL expression selects: the
// identifiers left once strings, label matchers, ranges, grouping
// labels and numbers are gone, less function calls and keywords.
func queryMetrics(expr string) []string {
	s := promqlStrings.ReplaceAllString(expr, `""`)
	s = promqlMatchers.ReplaceAllString(s, " ")
	s = promqlRanges.ReplaceAllString(s, " ")
	s = promqlGrouping.ReplaceAllString(s, " ")
	s = promqlNumbers.ReplaceAllString(s, " ")
	var names []string
	for _, m := range promqlNameToken.FindAllStringSubmatch(s, -1) {
		if m[1] != "" || promqlWords[strings.ToLower(m[0])] {
			continue // a function call or a keyword
		}
		if !slices.Contains(names, m[0]) {
			names = append(names, m[0])
		}
	}
	return names
}

func TestQueryMetrics(t *testing.T) {
	got := queryMetrics(`sum by (instance) (rate(caddy_coral_origin_fetches_total{outcome=~"error|timeout", x="a{b}"}[5m])) / on (instance) group_left max(up{job="x"}) > 0.5 and bool count(foo_bar offset 5m) or vector(0)`)
	want := []string{"caddy_coral_origin_fetches_total", "up", "foo_bar"}
	if !slices.Equal(got, want) {
		t.Errorf("queryMetrics = %q, want %q", got, want)
	}
}

// ruleExprs returns the expr of every rule in a Prometheus rules file,
// block scalars included.
func ruleExprs(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var exprs []string
	lines := strings.Split(string(b), "\n")
	for i := 0; i < len(lines); i++ {
		trimmed := strings.TrimSpace(lines[i])
		v, ok := strings.CutPrefix(trimmed, "expr:")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		if v != "|" && v != ">" {
			exprs = append(exprs, v)
			continue
		}
		indent := len(lines[i]) - len(strings.TrimLeft(lines[i], " "))
		var block []string
		for i+1 < len(lines) && (strings.TrimSpace(lines[i+1]) == "" ||
			len(lines[i+1])-len(strings.TrimLeft(lines[i+1], " ")) > indent) {
			i++
			block = append(block, strings.TrimSpace(lines[i]))
		}
		exprs = append(exprs, strings.Join(block, " "))
	}
	return exprs
}

// dashboardQueries returns every PromQL query of the Grafana dashboard:
// its panels' targets and its template variables' queries, with Grafana's
// variables replaced by what Prometheus would see.
func dashboardQueries(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(repoFile(t, "deploy/grafana/coral-fleet.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			ID      int    `json:"id"`
			Title   string `json:"title"`
			Targets []struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query string `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("coral-fleet.json: %v", err)
	}
	if dash.Title == "" || dash.UID == "" || len(dash.Panels) == 0 {
		t.Fatalf("coral-fleet.json: no title, uid or panels")
	}
	grafana := strings.NewReplacer("$__rate_interval", "5m", "$instance", ".*")
	queries := map[string]string{}
	ids := map[int]bool{}
	for _, p := range dash.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Expr == "" {
				t.Errorf("panel %q, %s: empty query", p.Title, tg.RefID)
			}
			queries[fmt.Sprintf("panel %d %q %s", p.ID, p.Title, tg.RefID)] = grafana.Replace(tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		inner, ok := strings.CutPrefix(v.Query, "label_values(")
		if !ok {
			t.Fatalf("variable %s: query %q is not label_values(...)", v.Name, v.Query)
		}
		sel, _, _ := strings.Cut(inner, ",")
		queries["variable "+v.Name] = sel
	}
	return queries
}

// checkNames reports every metric a query names that nothing exports.
func checkNames(known map[string]bool, queries map[string]string) []string {
	var bad []string
	for where, q := range queries {
		for _, m := range queryMetrics(q) {
			if !known[m] {
				bad = append(bad, fmt.Sprintf("%s: %s (in %s)", where, m, q))
			}
		}
	}
	slices.Sort(bad)
	return bad
}

// TestQueriesNameRealMetrics checks that every metric the alert rules and
// the dashboard name is one the code exports (or Prometheus or Caddy do):
// a renamed metric would leave an alert that never fires.
func TestQueriesNameRealMetrics(t *testing.T) {
	known := metricNames(t)
	for _, m := range []string{"caddy_coral_dht_joined", "coredns_coral_live_proxies", "caddy_coral_origin_fetches_total", "caddy_coral_cache_bytes"} {
		if !known[m] {
			t.Fatalf("metricNames misses %s, which the code exports: the collector is broken", m)
		}
	}
	for m := range externalMetrics {
		known[m] = true
	}
	queries := dashboardQueries(t)
	for i, e := range ruleExprs(t, repoFile(t, "deploy/prometheus/coral.rules.yml")) {
		queries[fmt.Sprintf("rule %d", i)] = e
	}
	if len(queries) < 10 {
		t.Fatalf("only %d queries found", len(queries))
	}
	for _, b := range checkNames(known, queries) {
		t.Errorf("names a metric nothing exports: %s", b)
	}
	// And the check catches a misspelling.
	if bad := checkNames(known, map[string]string{"x": `sum(rate(caddy_coral_dht_drop_total[5m]))`}); len(bad) != 1 {
		t.Errorf("a misspelled metric passed the check: %q", bad)
	}
}

// TestAlertRules runs promtool on the rules and their unit tests, and on
// the dashboard's queries (as recording rules, which promtool parses).
func TestAlertRules(t *testing.T) {
	promtool := needTool(t, "promtool", "Debian package prometheus: make deps")
	dir := repoFile(t, "deploy/prometheus")
	runOut(t, dir, promtool, "check", "rules", "coral.rules.yml")
	runOut(t, dir, promtool, "test", "rules", "coral.rules.test.yml")

	// Every alert has a test in which it fires.
	rules, err := os.ReadFile(filepath.Join(dir, "coral.rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join(dir, "coral.rules.test.yml"))
	if err != nil {
		t.Fatal(err)
	}
	fired := map[string]bool{}
	for _, m := range regexp.MustCompile(`alertname: (\w+)\n\s+exp_alerts:\n\s+- exp_labels`).FindAllStringSubmatch(string(tests), -1) {
		fired[m[1]] = true
	}
	alerts := regexp.MustCompile(`(?m)^\s+- alert: (\w+)$`).FindAllStringSubmatch(string(rules), -1)
	if len(alerts) == 0 {
		t.Fatal("no alerts found in coral.rules.yml")
	}
	for _, m := range alerts {
		if !fired[m[1]] {
			t.Errorf("alert %s has no test in which it fires", m[1])
		}
	}

	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	i := 0
	for _, q := range dashboardQueries(t) {
		i++
		fmt.Fprintf(&b, "      - record: dashboard:query%d\n        expr: %s\n", i, strconv.Quote(q))
	}
	path := filepath.Join(t.TempDir(), "dashboard.rules.yml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("the dashboard's queries do not parse: %v\n%s", err, out)
	}
}
