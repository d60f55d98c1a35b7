package proxy

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/coralcdn/coral/coralname"
)

// TestTargetCacheAnswersAsTheParse: whatever the cache holds, what it
// returns is what parsing the same host, zone, path and query gives, for
// far more URLs than it has slots (so entries are replaced all the time),
// for several zones, and for inputs too long to keep.
func TestTargetCacheAnswersAsTheParse(t *testing.T) {
	c := newTargetCache()
	check := func(host, zone, path, query string) {
		t.Helper()
		pt, err := c.parse(host, zone, path, query)
		want, werr := parseTarget(host, zone, path, query)
		if (err != nil) != (werr != nil) {
			t.Fatalf("%s %s%s?%s: cached %v, parsed %v", host, zone, path, query, err, werr)
		}
		if err != nil {
			return
		}
		if pt.target != want || pt.key != want.Key() {
			t.Fatalf("%s %s%s?%s: cached %+v %s, parsed %+v %s", host, zone, path, query, pt.target, pt.key, want, want.Key())
		}
		a, named := ipLiteral(want.Host)
		if pt.originAddr != a || pt.namesAddress != named {
			t.Fatalf("%s: origin address %v %v, want %v %v", host, pt.originAddr, pt.namesAddress, a, named)
		}
		acme := mayNameACMEChallenge(want.Path) && isACMEChallenge(want.OriginURL().Path)
		if pt.acmeChallenge != acme {
			t.Fatalf("%s%s: ACME challenge %v, want %v", host, path, pt.acmeChallenge, acme)
		}
	}
	long := strings.Repeat("a", targetCacheMaxInput)
	for round := range 2 {
		for i := range 3 * targetCacheSlots {
			check(fmt.Sprintf("www.site%d.example.nyud.net", i%50), "nyud.net", fmt.Sprintf("/o%d", i), "")
			check(fmt.Sprintf("www.site%d.example.nyud.test", i%50), "nyud.test", fmt.Sprintf("/o%d", i), fmt.Sprint("r=", round))
		}
		check("www.example.com.nyud.net", "nyud.test", "/", "") // the same name, another zone: not Coralized
		check("www.example.com.nyud.net", "nyud.net", "/", "")
		check("10.0.0.1.nyud.net", "nyud.net", "/%2e%2e/.well-known/acme-challenge/x", "")
		check("www.example.com.nyud.net", "nyud.net", "/"+long, "")
		check("www.example.com.8080.nyud.net:80", "nyud.net", "/a/../b%7e", "x=1")
	}
}

// TestTargetCacheKeepsHits: a URL parsed again is answered from its entry;
// an entry is not kept for an input too long or for a refusal.
func TestTargetCacheKeepsHits(t *testing.T) {
	c := newTargetCache()
	first, err := c.parse("www.example.com.nyud.net", "nyud.net", "/a", "b=1")
	if err != nil {
		t.Fatal(err)
	}
	again, _ := c.parse("www.example.com.nyud.net", "nyud.net", "/a", "b=1")
	if again != first {
		t.Error("the same request parsed again: a new entry, want the cached one")
	}
	other, _ := c.parse("www.example.com.nyud.net", "nyud.net", "/a", "b=2")
	if other == first || other.target.RawQuery != "b=2" {
		t.Errorf("another query: %+v", other.target)
	}
	long := "/" + strings.Repeat("x", targetCacheMaxInput)
	l1, _ := c.parse("www.example.com.nyud.net", "nyud.net", long, "")
	l2, _ := c.parse("www.example.com.nyud.net", "nyud.net", long, "")
	if l1 == l2 {
		t.Error("an input over targetCacheMaxInput was kept")
	}
	if _, err := c.parse("www.example.com", "nyud.net", "/", ""); !errors.Is(err, coralname.ErrNotCoralized) {
		t.Errorf("not Coralized: %v", err)
	}
	for i := range c.slots {
		if pt := c.slots[i].Load(); pt != nil && pt.host == "www.example.com" {
			t.Error("a refusal was kept")
		}
	}
}

// TestTargetCacheConcurrent: readers and writers of the same slots, for
// the race detector.
func TestTargetCacheConcurrent(t *testing.T) {
	c := newTargetCache()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				path := fmt.Sprintf("/%d", (i*7+g)%300)
				pt, err := c.parse("www.example.com.nyud.net", "nyud.net", path, "")
				if err != nil || pt.target.Path != path {
					t.Errorf("%s: %v %+v", path, err, pt)
					return
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkTargetCache(b *testing.B) {
	c := newTargetCache()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.parse("www.example.com.nyud.net", "nyud.net", "/images/logo.png", "v=3"); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzTargetCache: for any host, path and query, the cache answers, the
// first time and from its entry, exactly what parsing gives.
func FuzzTargetCache(f *testing.F) {
	f.Add("www.example.com.nyud.net", "/a/../b%7e", "x=1")
	f.Add("www-example-com.nyud.net:8080", "/", "")
	f.Add("10.0.0.1.8080.nyud.net", "/.well-known/acme-challenge/x", "")
	f.Add("WWW.Example.COM.nyud.net.", "/%2e%2e/%2F", "a=%zz")
	f.Add("example.com", "/", "")
	c := newTargetCache()
	f.Fuzz(func(t *testing.T, host, path, query string) {
		want, werr := parseTarget(host, "nyud.net", path, query)
		for range 2 {
			pt, err := c.parse(host, "nyud.net", path, query)
			if (err != nil) != (werr != nil) {
				t.Fatalf("cached error %v, parsed %v", err, werr)
			}
			if err != nil {
				continue
			}
			if pt.target != want || pt.key != want.Key() {
				t.Fatalf("cached %+v %s, parsed %+v %s", pt.target, pt.key, want, want.Key())
			}
		}
	})
}
