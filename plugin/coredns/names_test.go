package coral

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

func TestParseName(t *testing.T) {
	s, err := newScheme("nyucd.test", "nyud.test", 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		kind  nameKind
		level int
		rel   string
		bad   bool
	}{
		{"nyucd.test.", kindCoralApex, 0, "", false},
		{"l0.nyucd.test.", kindLevelApex, 0, "", false},
		{"l1.l0.nyucd.test.", kindLevelApex, 1, "", false},
		{"l2.l1.l0.nyucd.test.", kindLevelApex, 2, "", false},
		{"http.l2.l1.l0.nyucd.test.", kindServiceENT, 2, "", false},
		{"http.l0.nyucd.test.", kindServiceENT, 0, "", false},
		{"a.b.http.l1.l0.nyucd.test.", kindProxy, 1, "a.b", false},
		{"www.example.com.8080.http.l2.l1.l0.nyucd.test.", kindProxy, 2, "www.example.com.8080", false},
		{"a.nyud.test.http.l2.l1.l0.nyucd.test.", kindProxy, 2, "a.nyud.test", true},
		{"a.nyucd.test.b.http.l2.l1.l0.nyucd.test.", kindProxy, 2, "a.nyucd.test.b", true},
		{"nyucd.http.l2.l1.l0.nyucd.test.", kindProxy, 2, "nyucd", false}, // one label of the zone is not the zone
		{"l3.l2.l1.l0.nyucd.test.", kindNX, 2, "", false},
		{"l1.nyucd.test.", kindNX, -1, "", false},
		{"x.nyucd.test.", kindNX, -1, "", false},
		{"http.nyucd.test.", kindNX, -1, "", false},
		{"x.http.nyucd.test.", kindNX, -1, "", false},
		{"ns-1-2-3-4.nyucd.test.", kindNSHost, 0, "", false},
		{"ns-1-2-3-04.nyucd.test.", kindNX, -1, "", false},
		{"ns-1-2-3-256.nyucd.test.", kindNX, -1, "", false},
		{"ns-00000000000000000000ffff01020304.nyucd.test.", kindNX, -1, "", false}, // IPv4-mapped: spelt as IPv4
		{"nyud.test.", kindAliasApex, 0, "", false},
		{"www.example.com.nyud.test.", kindAliasBelow, 0, "www.example.com", false},
		{"a.nyud.test.nyud.test.", kindAliasBelow, 0, "a.nyud.test", true},
		{"a_b.nyud.test.", kindAliasBelow, 0, "a_b", false},
	} {
		p, ok := s.parse(tc.name)
		if !ok {
			t.Errorf("%s: not in the zones", tc.name)
			continue
		}
		if p.kind != tc.kind || p.rel != tc.rel || p.badOrigin != tc.bad || (tc.kind != kindNSHost && tc.kind != kindAliasBelow && tc.kind != kindCoralApex && tc.kind != kindAliasApex && p.level != tc.level) {
			t.Errorf("%s: %v level %d rel %q bad %v; want %v level %d rel %q bad %v", tc.name, p.kind, p.level, p.rel, p.badOrigin, tc.kind, tc.level, tc.rel, tc.bad)
		}
	}
	for _, out := range []string{"example.org.", "test.", ".", "xnyucd.test."} {
		if _, ok := s.parse(out); ok {
			t.Errorf("%s: placed in our zones", out)
		}
	}
}

func TestNSLabelRoundTrip(t *testing.T) {
	for _, a := range []string{"127.0.0.2", "0.0.0.0", "255.255.255.255", "2001:db8::1", "::1", "::ffff:192.0.2.1"} {
		addr := netip.MustParseAddr(a)
		got, ok := parseNSLabel(nsLabel(addr))
		if !ok || got != addr.Unmap() {
			t.Errorf("%s → %s → %v %v", a, nsLabel(addr), got, ok)
		}
	}
}

func TestSchemeErrors(t *testing.T) {
	for _, tc := range []struct {
		coral, alias string
		levels       int
	}{
		{"nyucd.test", "nyucd.test", 3},
		{"nyucd.test", "a.nyucd.test", 3},
		{"a.nyud.test", "nyud.test", 3},
		{".", "", 3},
		{"nyucd.test", "", 0},
		{"nyucd.test", "", 9},
		{strings.Repeat("a.", 120) + "test", "", 8},
	} {
		if _, err := newScheme(tc.coral, tc.alias, tc.levels); err == nil {
			t.Errorf("newScheme(%q, %q, %d): no error", tc.coral, tc.alias, tc.levels)
		}
	}
}

// FuzzParseName feeds arbitrary question names through the scheme and the
// alias substitution: no panic, every answer consistent with the name.
func FuzzParseName(f *testing.F) {
	for _, seed := range []string{
		"nyucd.test.", "l0.nyucd.test.", "l2.l1.l0.nyucd.test.", "http.l2.l1.l0.nyucd.test.",
		"www.example.com.http.l2.l1.l0.nyucd.test.", "www.example.com.nyud.test.", "a.nyud.test.nyud.test.",
		"ns-127-0-0-2.nyucd.test.", `a\.b\000.nyud.test.`, "NYUCD.TEST.", "l1.l1.l0.nyucd.test.",
	} {
		f.Add(seed)
	}
	s, err := newScheme("nyucd.test", "nyud.test", 3)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if _, ok := dns.IsDomainName(name); !ok {
			return
		}
		name = dns.CanonicalName(name)
		p, ok := s.parse(name)
		if !ok {
			if dns.IsSubDomain(s.coral, name) || dns.IsSubDomain(s.alias, name) {
				t.Fatalf("%q is in a zone but was not placed", name)
			}
			return
		}
		switch p.kind {
		case kindProxy:
			if !p.badOrigin && !strings.HasSuffix(name, "."+serviceLabel+"."+s.levelApex[p.level]) {
				t.Fatalf("%q: proxy name outside %s", name, s.levelApex[p.level])
			}
		case kindLevelApex:
			if name != s.levelApex[p.level] {
				t.Fatalf("%q: level apex %d is %s", name, p.level, s.levelApex[p.level])
			}
		case kindNSHost:
			if s.nsHost(p.nsAddr) != name {
				t.Fatalf("%q: ns host spelt %s", name, s.nsHost(p.nsAddr))
			}
		case kindAliasBelow:
			if target, ok := s.aliasTarget(p.rel); ok {
				if _, ok := dns.IsDomainName(target); !ok {
					t.Fatalf("%q: target %q is not a name", name, target)
				}
				q, ok := s.parse(target)
				if !ok || q.kind != kindProxy || q.badOrigin != p.badOrigin {
					t.Fatalf("%q: target %q parses as %+v", name, target, q)
				}
			}
		}
	})
}
