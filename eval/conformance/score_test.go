package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func mustParse(t *testing.T, raw string) map[string]rawResult {
	t.Helper()
	m, err := ParseResults([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func statusOf(s Score, id string) Status {
	for _, r := range s.Results {
		if r.ID == id {
			return r.Status
		}
	}
	return "absent"
}

// The suite's rules: a test passes only if it and everything it depends
// on, transitively, passed; required means no kind (or "required"),
// optimal and check are counted apart; a passing check lets its
// dependents pass; browser-only tests are not counted.
func TestScoreDependenciesAndKinds(t *testing.T) {
	tests := []Test{
		{ID: "none", Kind: "check"},                                   // "yes": its dependents may pass
		{ID: "max-age", Kind: "optimal", DependsOn: []string{"none"}}, // fails
		{ID: "max-age-0", DependsOn: []string{"none"}},                // required, passes
		{ID: "uses-max-age", DependsOn: []string{"max-age"}},          // passed itself, but max-age did not
		{ID: "uses-uses", Kind: "required", DependsOn: []string{"uses-max-age"}},
		{ID: "opt-ok", Kind: "optimal"},
		{ID: "check-no", Kind: "check"},
		{ID: "needs-check-no", DependsOn: []string{"check-no"}},
		{ID: "not-run"},
		{ID: "browser", BrowserOnly: true},
	}
	raw := mustParse(t, `{
		"none": true,
		"max-age": ["Assertion", "Response 2 does not come from cache"],
		"max-age-0": true,
		"uses-max-age": true,
		"uses-uses": true,
		"opt-ok": true,
		"check-no": ["Assertion", "no"],
		"needs-check-no": true,
		"browser": true
	}`)
	s, err := ScoreResults(tests, raw)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Status{
		"none": Yes, "max-age": OptionalFail, "max-age-0": Pass, "uses-max-age": DependencyFail,
		"uses-uses": DependencyFail, "opt-ok": Pass, "check-no": No, "needs-check-no": DependencyFail,
		"not-run": Untested, "browser": "absent",
	}
	for id, st := range want {
		if got := statusOf(s, id); got != st {
			t.Errorf("%s: %s, want %s", id, got, st)
		}
	}
	// Required: max-age-0, uses-max-age, uses-uses, needs-check-no, not-run.
	if s.Required != (Count{Passed: 1, Of: 5}) {
		t.Errorf("required %+v, want 1 of 5", s.Required)
	}
	if s.Optimal != (Count{Passed: 1, Of: 2}) {
		t.Errorf("optimal %+v, want 1 of 2", s.Optimal)
	}
	if s.Checks != (Count{Passed: 1, Of: 2}) {
		t.Errorf("checks %+v, want 1 of 2", s.Checks)
	}
}

// The outcomes the client reports besides pass and assertion failures.
func TestScoreSetupRetryAndHarness(t *testing.T) {
	tests := []Test{{ID: "retry"}, {ID: "setup"}, {ID: "abort"}, {ID: "false"}, {ID: "fail"},
		{ID: "after-retry", DependsOn: []string{"retry"}}}
	raw := mustParse(t, `{
		"retry": ["Setup", "retry"],
		"setup": ["Setup", "Response 1 status is 405, not 200"],
		"abort": ["AbortError", "This operation was aborted"],
		"false": false,
		"fail": ["Assertion", "Response 2 comes from cache"],
		"after-retry": true
	}`)
	s, err := ScoreResults(tests, raw)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Status{"retry": Retry, "setup": SetupFail, "abort": HarnessFail, "false": HarnessFail,
		"fail": Fail, "after-retry": DependencyFail}
	for id, st := range want {
		if got := statusOf(s, id); got != st {
			t.Errorf("%s: %s, want %s", id, got, st)
		}
	}
	if s.Required.Passed != 0 || s.Required.Of != 6 {
		t.Errorf("required %+v, want 0 of 6", s.Required)
	}
	for _, r := range s.Results {
		if r.ID == "setup" && r.Detail != "Setup: Response 1 status is 405, not 200" {
			t.Errorf("setup's detail %q", r.Detail)
		}
	}
}

// A list that contradicts itself is refused rather than miscounted.
func TestScoreRefusesInconsistentLists(t *testing.T) {
	all := mustParse(t, `{"a": true, "b": true}`)
	for name, tests := range map[string][]Test{
		"unknown dependency": {{ID: "a", DependsOn: []string{"nope"}}},
		"cycle":              {{ID: "a", DependsOn: []string{"b"}}, {ID: "b", DependsOn: []string{"a"}}},
		"unknown kind":       {{ID: "a", Kind: "mandatory"}},
		"duplicate":          {{ID: "a"}, {ID: "a"}},
	} {
		if _, err := ScoreResults(tests, all); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	for _, bad := range []string{`[]`, `{"a": 3}`, `{"a": []}`, `{"a": "yes"}`} {
		if _, err := ParseResults([]byte(bad)); err == nil {
			t.Errorf("ParseResults(%s): no error", bad)
		}
	}
}

// Every committed configuration renders with a run's data, so a typo in a
// template fails here rather than after minutes of a run.
func TestConfigsRender(t *testing.T) {
	d := confData{Dir: "/run/dir", Addr: "127.0.160.9", Port: 8080, DHTPort: 4000,
		OriginAddr: "127.0.160.1", OriginPort: 8000, User: "root"}
	for _, name := range []string{"coral.Caddyfile", "squid.conf", "nginx.conf", "trafficserver/records.config",
		"trafficserver/remap.config", "trafficserver/storage.config", "trafficserver/ip_allow.yaml", "trafficserver/runroot.yaml"} {
		path := filepath.Join(t.TempDir(), "out")
		if err := render(name, path, d); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), "{{") || strings.Contains(string(b), "<no value>") {
			t.Errorf("%s: unfilled template:\n%s", name, b)
		}
	}
}

// Our records.config settings replace Debian's lines for the same
// variables instead of following them.
func TestMergeRecords(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "records.config")
	ours := filepath.Join(dir, "ours")
	os.WriteFile(base, []byte("CONFIG proxy.config.http.server_ports STRING 8080 8080:ipv6\nCONFIG proxy.config.cache.ram_cache.size INT -1\n"), 0o644)
	os.WriteFile(ours, []byte("# ours\nCONFIG proxy.config.http.server_ports STRING 8080:ip-in=127.0.160.3\n"), 0o644)
	if err := mergeRecords(base, ours); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(base)
	got := string(b)
	if strings.Contains(got, "8080:ipv6") || !strings.Contains(got, "ip-in=127.0.160.3") || !strings.Contains(got, "ram_cache.size INT -1") {
		t.Errorf("merged:\n%s", got)
	}
}

func TestSelectCaches(t *testing.T) {
	got, err := selectCaches("nginx, coral")
	if err != nil || len(got) != 2 || got[0].name != "coral" || got[1].name != "nginx" {
		t.Errorf("selectCaches: %v, %v", got, err)
	}
	if _, err := selectCaches("coral,varnish"); err == nil || !strings.Contains(err.Error(), "varnish") {
		t.Errorf("unknown implementation: %v", err)
	}
	if _, err := selectCaches(" , "); err == nil {
		t.Error("empty list: no error")
	}
}

// The client's output is parsed and scored without panicking, whatever it
// is; what parses scores every listed test exactly once.
func FuzzParseAndScore(f *testing.F) {
	f.Add([]byte(`{"a": true, "b": ["Setup", "retry"], "c": ["Assertion", "x"]}`))
	f.Add([]byte(`{"a": false, "b": ["AbortError"], "c": null}`))
	f.Add([]byte(`{"c": [1, 2]}`))
	tests := []Test{{ID: "a", Kind: "check"}, {ID: "b", DependsOn: []string{"a"}},
		{ID: "c", Kind: "optimal", DependsOn: []string{"b", "a"}}}
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, err := ParseResults(raw)
		if err != nil {
			return
		}
		s, err := ScoreResults(tests, m)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Results) != len(tests) || s.Required.Of+s.Optimal.Of+s.Checks.Of != len(tests) {
			t.Fatalf("scored %d results, counts %+v %+v %+v", len(s.Results), s.Required, s.Optimal, s.Checks)
		}
	})
}
