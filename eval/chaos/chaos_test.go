//go:build linux

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/internal/lab/labconf"
	"github.com/coralcdn/coral/internal/lab/netns/coralnet"
)

// TestChaosShort is eval/chaos on a small lab: 4 nodes, a short crowd,
// every phase (the upgrade only when the previous release's binaries are
// already built: CORAL_CHAOS_OLD_BIN or eval/chaos's cache, and without
// the drain, which waits an answer TTL per node; the key rotation only
// with a keyring build). Every response must be the
// origin's bytes and origin fetches within each phase's bound. No timing
// is asserted: a phase ends on a condition (a quiet stretch with
// successes and no failures), and only a phase that never gets there
// (3 minutes) fails the test.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: -short")
	}
	missing := func(err error) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI: %v", err)
		}
		t.Skipf("skipping: %v", err)
	}
	if err := coralnet.Available(); err != nil {
		missing(err)
	}
	for _, b := range []string{"coredns", "caddy"} {
		if _, err := labconf.Binary(b); err != nil {
			missing(err)
		}
	}
	p := params{Nodes: 4, Objects: 28, Workers: 3, Think: 50 * time.Millisecond,
		Min: 6 * time.Second, Quiet: 5 * time.Second, Timeout: 3 * time.Minute, Drain: false, Rotate: true,
		Out: t.TempDir(), Name: "chaos-short", Logf: t.Logf}
	if dir := oldBinDir(); dir != "" {
		p.Upgrade, p.OldBin = true, dir
	} else {
		t.Log("no previous release's binaries built: the upgrade phase is skipped (go run ./eval/chaos builds them)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	rep, err := run(ctx, p)
	if rep != nil {
		var b strings.Builder
		rep.print(&b)
		t.Log("\n" + b.String())
	}
	if err != nil {
		t.Fatal(err)
	}
	if rep.Total.Violations != 0 {
		t.Errorf("%d responses broke an invariant: %v", rep.Total.Violations, rep.Total.ByViolated)
	}
	// Origin fetches. The experiment's own bound (one per object per side
	// of a partition, one more where nodes stop) is reported above, not
	// asserted: the full experiment shows it missed now and then
	// (docs/evaluation.md, "Chaos under load": when a downloader dies or
	// a partition heals, two proxies can each go to the origin), and this
	// test must not flake on it. Asserted: no object is fetched in a phase
	// more often than there are proxies (each proxy's cache holds), and
	// the whole run needs at most twice as many fetches as objects (a
	// network whose proxies stopped finding each other's copies needs
	// about one per proxy per object, 4 times as many).
	for _, ph := range rep.Phases {
		if ph.Skipped {
			continue
		}
		if ph.Requests == 0 {
			t.Errorf("phase %s: no client requests", ph.Phase)
		}
		if ph.MaxPerObject > p.Nodes {
			t.Errorf("phase %s: an object fetched from the origin %d times by %d proxies", ph.Phase, ph.MaxPerObject, p.Nodes)
		}
	}
	if rep.Total.OriginFetches > 2*p.Objects {
		t.Errorf("%d origin fetches for %d objects: more than twice", rep.Total.OriginFetches, p.Objects)
	}
	// The crowd wants a wave of objects per phase that ran (a skipped
	// phase, such as the upgrade without the previous release's binaries,
	// brings none), and each wanted object must reach it, after the origin
	// served it at least once.
	ran := 0
	for _, ph := range rep.Phases {
		if !ph.Skipped {
			ran++
		}
	}
	if want := min(p.Objects, max(1, p.Objects/phaseCount)*ran); rep.Wanted != want {
		t.Errorf("the crowd wanted %d objects after %d phases, want %d", rep.Wanted, ran, want)
	}
	if rep.Served != rep.Wanted {
		t.Errorf("%d of the %d wanted objects reached a client", rep.Served, rep.Wanted)
	}
	if len(rep.FromNowhere) > 0 || rep.Fetched < rep.Served {
		t.Errorf("objects %v reached a client before any origin fetch of them (%d served, %d fetched)", rep.FromNowhere, rep.Served, rep.Fetched)
	}
	for _, name := range []string{"chaos-short.json", "chaos-short.png"} {
		if fi, err := os.Stat(filepath.Join(p.Out, name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s not written: %v", name, err)
		}
	}
}

// oldBinDir is CORAL_CHAOS_OLD_BIN, or eval/chaos's cache of the default
// previous release when it is built, or "".
func oldBinDir() string {
	if d := os.Getenv("CORAL_CHAOS_OLD_BIN"); d != "" && have(d) {
		return d
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	matches, _ := filepath.Glob(filepath.Join(cache, "coral-chaos", defaultOldCommit+"*", "bin"))
	for _, m := range matches {
		if have(m) {
			return m
		}
	}
	return ""
}
