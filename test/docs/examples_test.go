package docs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// headerCommands reads the commands an example file's header tells a
// reader to paste: its leading comment lines indented by three spaces or
// more after the "#" ("#   bin/caddy start ..."), in order.
func headerCommands(t *testing.T, text string) string {
	t.Helper()
	var b strings.Builder
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "#") {
			break
		}
		if cmd, ok := strings.CutPrefix(line, "#   "); ok && strings.TrimSpace(cmd) != "" {
			b.WriteString(strings.TrimSpace(cmd) + "\n")
		}
	}
	if b.Len() == 0 {
		t.Fatal("the header names no commands (lines \"#   command\")")
	}
	return b.String()
}

// An example is a configuration file of the repository and what its
// header's commands must show.
type example struct {
	file      string
	caddyfile bool
	root      bool // its commands need root (port 53)
	// check looks at each command's output.
	check func(t *testing.T, cmds, outs []string)
}

var examples = []example{
	{file: "Caddyfile.example", caddyfile: true, check: func(t *testing.T, cmds, outs []string) {
		var statuses []string
		for i, c := range cmds {
			if strings.Contains(c, "README.md") {
				statuses = append(statuses, headerField(outs[i], "Cache-Status"))
			}
		}
		// The second is a hit, or collapsed onto the first download when
		// it comes before that download is committed (pasted faster than
		// a reader pastes): served from the cache either way.
		if len(statuses) != 2 || !strings.Contains(statuses[0], "miss") || !strings.Contains(statuses[0], `detail="origin"`) ||
			!strings.Contains(statuses[1], "hit") && !strings.Contains(statuses[1], "collapsed") {
			t.Errorf("the two requests' Cache-Status: %q, want one from the origin, then one from the cache", statuses)
		}
		if !outputOf(cmds, outs, "format=json", `"joined":true`) {
			t.Error("the status page's JSON does not show the node joined")
		}
	}},
	{file: "Corefile.example", root: true, check: func(t *testing.T, cmds, outs []string) {
		if !outputOf(cmds, outs, "www.example.com.nyud.test A", "status: NOERROR", "DNAME", "CNAME") {
			t.Error("the Coralized name's answer is not a NOERROR with DNAME and CNAME")
		}
		if !outputOf(cmds, outs, "l0.nyucd.test NS", "status: NOERROR", "IN\tNS") {
			t.Error("l0.nyucd.test NS is not a referral")
		}
	}},
}

// headerField finds a header field's value in curl -D - output.
func headerField(out, name string) string {
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.EqualFold(strings.TrimSpace(k), name) {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// outputOf reports whether the command containing cmd printed every one
// of wants.
func outputOf(cmds, outs []string, cmd string, wants ...string) bool {
	for i, c := range cmds {
		if strings.Contains(c, cmd) {
			for _, w := range wants {
				if !strings.Contains(outs[i], w) {
					return false
				}
			}
			return true
		}
	}
	return false
}

// TestExamples runs each example configuration's header from the
// repository's root, as a reader pastes it, against the real binaries
// (its make line included: up to date, it builds nothing), and checks
// what they print. The files are also checked as configurations:
// Caddyfiles adapt and are caddy fmt-clean, Corefiles pass coral-check.
func TestExamples(t *testing.T) {
	root := repoRoot(t)
	for _, ex := range examples {
		t.Run(ex.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(root, ex.file))
			if err != nil {
				t.Fatal(err)
			}
			if ex.caddyfile {
				checkCaddyfile(t, ex.file, string(data), false)
			} else {
				checkCorefile(t, ex.file, string(data))
			}
			if ex.root && os.Geteuid() != 0 {
				if os.Getenv("CI") == "true" {
					t.Fatal("needs root (port 53); CI=true, so this is a failure")
				}
				t.Skip("needs root (port 53)")
			}
			binary(t, "caddy")
			binary(t, "coredns")
			needTool(t, "curl", "Debian package curl")
			needTool(t, "dig", "Debian package dnsutils")
			// What the commands leave in the repository (the proxy's
			// cache) goes when the test ends, unless it was there before.
			if _, err := os.Stat(filepath.Join(root, "coral-cache")); os.IsNotExist(err) {
				t.Cleanup(func() { os.RemoveAll(filepath.Join(root, "coral-cache")) })
			}
			home := t.TempDir()
			term := newTerminal(t, root, readerEnv(t, home))
			script := headerCommands(t, string(data))
			cmds := commands(t, script)
			outs := term.run(ex.file, script)
			if len(outs) != len(cmds) {
				t.Fatalf("%d outputs for %d commands", len(outs), len(cmds))
			}
			ex.check(t, cmds, outs)
			if t.Failed() {
				t.Logf("--- terminal\n%s", term.output.String())
			}
		})
	}
}

// TestDeployExamples checks the packages' configurations
// (deploy/examples), as installed in /usr/share/coral-*/ and shown in
// docs/operations.md, in the sandbox where their files exist: the
// Caddyfile adapts, is caddy fmt-clean and passes coral-caddy validate;
// the Corefile passes coral-check. The guide's walk-through
// (test/deploy's TestWalkthrough) runs them on three nodes.
func TestDeployExamples(t *testing.T) {
	root := repoRoot(t)
	for _, f := range []string{"deploy/examples/Caddyfile", "deploy/examples/Corefile"} {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		t.Run(filepath.Base(f), func(t *testing.T) {
			if strings.HasSuffix(f, "Caddyfile") {
				checkCaddyfile(t, f, string(data), true)
			} else {
				checkCorefile(t, f, string(data))
			}
		})
	}
}
