package labconf

import (
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestRender(t *testing.T) {
	got := Caddyfile("header\nsecond line",
		D("").With(D("admin", "off"), If(false, D("never")), D("persist_config", "off")),
		D(":80").With(
			D("bind", netip.MustParseAddr("127.0.0.9")),
			D("root", "*", "", []string{"/srv", ""}, 8),
			D("file_server"),
		).Commented("the site"),
		If(false, D("gone").With()),
	)
	want := `# header
# second line
{
	admin off
	persist_config off
}

# the site
:80 {
	bind 127.0.0.9
	root * /srv 8
	file_server
}
`
	if got != want {
		t.Errorf("Caddyfile:\n%s\nwant:\n%s", got, want)
	}
	if got := Corefile("", D("a.test").With(D("log"), D("empty").With())); got != "a.test {\n    log\n    empty {\n    }\n}\n" {
		t.Errorf("Corefile:\n%q", got)
	}
}

func TestNode(t *testing.T) {
	n := Node{
		Listen:    netip.MustParseAddrPort("127.0.0.2:4000"),
		Bootstrap: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.3:4000"), netip.MustParseAddrPort("127.0.0.4:4000")},
		KeyFile:   "/k",
		Levels:    "60ms 20ms",
		Clusters:  map[int]string{2: "near", 1: "far"},
	}
	var lines []string
	for _, d := range n.Directives() {
		lines = append(lines, strings.Join(append([]string{d.Name}, d.Args...), " "))
	}
	want := "listen 127.0.0.2:4000|bootstrap 127.0.0.3:4000 127.0.0.4:4000|key_file /k|levels 60ms 20ms|cluster 1 far|cluster 2 near"
	if got := strings.Join(lines, "|"); got != want {
		t.Errorf("node lines %s, want %s", got, want)
	}
	if len((Node{}).Directives()) != 0 {
		t.Error("the zero Node has lines")
	}
}

func TestCaddy(t *testing.T) {
	admin := netip.MustParseAddrPort("127.0.0.2:2019")
	c := Caddy{
		Comment:      "test",
		Admin:        admin,
		AdminOrigins: []string{admin.String(), "localhost:2019"},
		HTTPSOff:     true,
		SkipTrust:    true,
		Grace:        "1s",
		Coral:        Node{Listen: netip.MustParseAddrPort("127.0.0.2:4000")},
		Sites: []Directive{D(":8090").With(D("bind", "127.0.0.2"), Proxy{
			Zone: "nyud.test", CacheDir: "/c", CacheSize: "1GiB", AllowOrigins: []string{"127.0.0.0/8"},
			AllowPeers: []string{"127.0.0.0/8"}, PeerAddress: "127.0.0.2:8090", RateLimit: "100 200",
			Extra: []Directive{D("min_ttl", "0")},
		}.Directive())},
	}.String()
	for _, want := range []string{
		"# test\n{\n\tadmin 127.0.0.2:2019 {\n\t\torigins 127.0.0.2:2019 localhost:2019\n\t}\n\tauto_https off\n\tskip_install_trust\n\tpersist_config off\n\tgrace_period 1s\n\tcoral {\n\t\tlisten 127.0.0.2:4000\n\t}\n}\n",
		"\tcoral_proxy nyud.test {\n\t\tcache_dir /c\n\t\tcache_size 1GiB\n\t\tallow_origins 127.0.0.0/8\n\t\tallow_peers 127.0.0.0/8\n\t\tpeer_address 127.0.0.2:8090\n\t\trate_limit 100 200\n\t\tmin_ttl 0\n\t}\n",
	} {
		if !strings.Contains(c, want) {
			t.Errorf("Caddyfile lacks\n%s\nin\n%s", want, c)
		}
	}
	off := Caddy{}.String()
	if !strings.Contains(off, "\tadmin off\n") || strings.Contains(off, "auto_https") || strings.Contains(off, "skip_install_trust") {
		t.Errorf("zero Caddy:\n%s", off)
	}
	adaptable(t, c)
}

func TestCoralPlugin(t *testing.T) {
	got := Corefile("", D("nyucd.test", "nyud.test").With(CoralPlugin{
		Zone:       "nyucd.test",
		Alias:      "nyud.test",
		Node:       Node{Listen: netip.MustParseAddrPort("127.0.0.2:4000"), Clusters: map[int]string{1: "x"}},
		Probe:      "none",
		ProbeCache: "1h",
		Classify:   []string{"127.0.0.3/32 2", "127.0.0.0/8 0"},
		AnswerTTL:  5,
		LiveWithin: "5s",
		CheckEvery: "1s",
		Extra:      []Directive{D("answers", 1)},
	}.Directive()))
	want := `nyucd.test nyud.test {
    coral nyucd.test {
        alias nyud.test
        listen 127.0.0.2:4000
        cluster 1 x
        probe none
        probe_cache 1h
        classify 127.0.0.3/32 2
        classify 127.0.0.0/8 0
        answer_ttl 5
        live_within 5s
        check_interval 1s
        answers 1
    }
}
`
	if got != want {
		t.Errorf("Corefile:\n%s\nwant:\n%s", got, want)
	}
}

func TestBinaries(t *testing.T) {
	wd, _ := os.Getwd()
	root, err := RepoRoot(wd)
	if err != nil || !strings.HasSuffix(filepath.ToSlash(wd), "/internal/lab/labconf") || filepath.Join(root, "internal", "lab", "labconf") != wd {
		t.Fatalf("RepoRoot(%s) = %s, %v", wd, root, err)
	}
	if _, err := RepoRoot(t.TempDir()); err == nil {
		t.Error("RepoRoot outside the repository succeeded")
	}
	path, err := Binary("no-such-binary")
	if err == nil || path != filepath.Join(root, "bin", "no-such-binary") || !strings.Contains(err.Error(), "make no-such-binary") {
		t.Errorf("Binary of a missing file: %s, %v", path, err)
	}
	env := strings.Join(CaddyEnv("/d"), "\n")
	for _, want := range []string{"\nHOME=/d", "\nXDG_DATA_HOME=/d/data", "\nXDG_CONFIG_HOME=/d/config"} {
		if !strings.Contains(env, want) {
			t.Errorf("CaddyEnv lacks %s", want)
		}
	}
	if got := strings.Join(CaddyArgv("caddy", "/c"), " "); got != "caddy run --config /c --adapter caddyfile" {
		t.Errorf("CaddyArgv: %s", got)
	}
}

// adaptable has bin/caddy, when it is there, parse the text (caddy adapt
// provisions nothing, so this binds no ports).
func adaptable(t *testing.T, text string) {
	t.Helper()
	bin, err := Binary("caddy")
	if err != nil {
		t.Logf("not adapted: %v", err)
		return
	}
	path := filepath.Join(t.TempDir(), "Caddyfile")
	if err := WriteFile(path, text); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "adapt", "--config", path, "--adapter", "caddyfile").CombinedOutput()
	if err != nil {
		t.Fatalf("caddy adapt: %v\n%s\n%s", err, out, text)
	}
	for _, want := range []string{`"handler":"coral_proxy"`, `"coral":{`, `"listen":"127.0.0.2:4000"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("adapted config lacks %s:\n%s", want, out)
		}
	}
}
