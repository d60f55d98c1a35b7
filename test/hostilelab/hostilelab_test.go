//go:build linux

package hostilelab

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/internal/lab/hostilelab"
	"github.com/coralcdn/coral/internal/lab/labconf"
)

// perClass is how long each class attacks: with settling and start-up the
// test takes about a minute. stalled-readers gets longer, as its readers
// must outgrow the cache and downloads are slow on a loaded machine, and
// so does redirects, so the canary asks for the same-host object after the
// https redirect more than once.
const perClass = 2 * time.Second

var longer = map[string]time.Duration{"stalled-readers": 6 * time.Second, "redirects": 5 * time.Second}

// knownDefects are the classes whose invariants break on main today
// because of a defect of issue 19 (numbered as in
// internal/lab/hostilelab/README.md) whose fix is not merged yet: a violation
// containing one of the strings makes the class skip, naming the defect;
// any other violation still fails. Remove an entry once its fix is in.
var knownDefects = map[string]struct {
	defect string
	shows  []string
}{
	"stalled-readers": {
		defect: "issue 19, stalled readers: about 2 runs in 5 (also with the binaries of 556f003) a victim of the attacked origin " +
			"gets a 502 or a cut body, and once in a while a canary of the honest origin gets a cut body; cause under investigation",
		shows: []string{"same-origin objects unavailable", "canary failures"},
	},
}

func TestHostileOrigin(t *testing.T) {
	bin, err := labconf.Binary("caddy")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err.Error() + " (CI=true, so this is a failure, not a skip)")
		}
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	lab, err := hostilelab.Start(ctx, hostilelab.Config{Caddy: bin, Dir: t.TempDir(), Net: "127.0.92", Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer lab.Stop()
	if errs := lab.Warm(); len(errs) > 0 {
		t.Fatalf("warming up, before any attack: %d failures, first: %s", len(errs), errs[0])
	}
	bounds := hostilelab.DefaultBounds(lab.CacheSize())
	bounds.Settle = 10 * time.Second
	var results []hostilelab.Result
	for i, class := range hostilelab.Classes {
		t.Run(class.Name, func(t *testing.T) {
			d := perClass
			if l, ok := longer[class.Name]; ok {
				d = l
			}
			res, err := lab.Run(ctx, class, d, uint64(i+1), bounds)
			if err != nil {
				t.Fatal(err)
			}
			results = append(results, res)
			if res.Exited != "" {
				t.Fatalf("%s\n--- proxy log ---\n%s", res.Exited, lab.Proxy.LogTail(40))
			}
			known, isKnown := knownDefects[class.Name]
			var tolerated []string
			for _, v := range res.Violations {
				if isKnown && containsAny(v, known.shows) {
					tolerated = append(tolerated, v)
					continue
				}
				t.Error(v)
			}
			if len(tolerated) > 0 && !t.Failed() {
				t.Skipf("%s, not fixed on this branch: %s", known.defect, strings.Join(tolerated, "; "))
			}
			if isKnown && len(tolerated) == 0 {
				t.Logf("%s no longer shows: remove it from knownDefects", known.defect)
			}
		})
	}
	t.Logf("per class (%v each, bounds %+v):\n%s", perClass, bounds, hostilelab.Table(results))
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
