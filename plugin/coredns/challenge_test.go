package coral

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/coraldht/acmetxt"
	"github.com/coralcdn/coral/coraldht/memnet"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/miekg/dns"
)

// challengeNetwork is two DSHT nodes on an in-memory network: the first
// publishes (as a Caddy node would), the second is this server's.
func challengeNetwork(t *testing.T) (publisher, server *coraldht.Node) {
	t.Helper()
	mem := memnet.New(memnet.Config{})
	key, err := coraldht.NewKey([]byte("a test secret of at least thirty-two bytes"))
	if err != nil {
		t.Fatal(err)
	}
	var nodes []*coraldht.Node
	for i := range 2 {
		tr, err := mem.Listen(netip.MustParseAddrPort(fmt.Sprintf("10.9.0.%d:4000", i+1)))
		if err != nil {
			t.Fatal(err)
		}
		cfg := coraldht.DefaultConfig()
		cfg.Key = key
		n, err := coraldht.NewNode(cfg, tr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		nodes = append(nodes, n)
	}
	if err := nodes[1].Bootstrap(context.Background(), nodes[0].Addr()); err != nil {
		t.Fatal(err)
	}
	return nodes[0], nodes[1]
}

// TestACMEChallenge: the alias zone's _acme-challenge TXT query is answered
// with the values published in the DSHT, at the DNAME's target (RFC 6672:
// nothing exists below a DNAME), with TTL 0; before any value it is a
// NODATA with a 1-second negative TTL; other types are NODATA; the name
// is not an origin anywhere else.
func TestACMEChallenge(t *testing.T) {
	publisher, server := challengeNetwork(t)
	c := testCoral(t, testWorld())
	c.challenges = newChallenges("nyud.test.", func() acmetxt.Getter { return server })
	now := time.Now()
	c.challenges.now = func() time.Time { return now }
	const (
		target = "_acme-challenge.http.l2.l1.l0.nyucd.test."
		dname  = "nyud.test. 3600 IN DNAME http.l2.l1.l0.nyucd.test."
		cname  = "_acme-challenge.nyud.test. 3600 IN CNAME " + target
	)
	noValues := []test.Case{
		{Qname: "_acme-challenge.nyud.test.", Qtype: dns.TypeTXT,
			Answer: []dns.RR{test.CNAME(cname), test.DNAME(dname)},
			Ns:     []dns.RR{soa("l0.nyucd.test.", "1")}},
		{Qname: target, Qtype: dns.TypeTXT, Ns: []dns.RR{soa("l0.nyucd.test.", "1")}},
	}
	for _, tc := range noValues {
		check(t, c, "10.0.0.1", tc)
	}

	for _, v := range []string{"first-value", "second-value"} {
		if err := acmetxt.Publish(context.Background(), publisher, "nyud.test", v, 0); err != nil {
			t.Fatal(err)
		}
	}
	// Within challengeFresh the cached "none" stands.
	check(t, c, "10.0.0.1", noValues[1])
	now = now.Add(challengeFresh)

	txt := []dns.RR{test.TXT(target + ` 0 IN TXT "first-value"`), test.TXT(target + ` 0 IN TXT "second-value"`)}
	for _, tc := range []test.Case{
		{Qname: "_acme-challenge.nyud.test.", Qtype: dns.TypeTXT,
			Answer: append(txt, test.CNAME(cname), test.DNAME(dname))},
		{Qname: "_ACME-Challenge.Nyud.Test.", Qtype: dns.TypeTXT,
			Answer: append([]dns.RR{test.CNAME("_ACME-Challenge.Nyud.Test. 3600 IN CNAME " + target)}, append(txt, test.DNAME(dname))...)},
		{Qname: target, Qtype: dns.TypeTXT, Answer: txt},
		// Other types: NODATA from the resolver's level zone.
		{Qname: target, Qtype: dns.TypeA, Ns: []dns.RR{soa("l2.l1.l0.nyucd.test.", "1")}},
		// Only directly below the alias zone: elsewhere it is an origin
		// part like any other, and not a valid one (NODATA, as it may lie
		// above one).
		{Qname: "_acme-challenge.www.nyud.test.", Qtype: dns.TypeTXT,
			Answer: []dns.RR{test.CNAME("_acme-challenge.www.nyud.test. 3600 IN CNAME _acme-challenge.www.http.l2.l1.l0.nyucd.test."),
				test.DNAME(dname)},
			Ns: []dns.RR{soa("l2.l1.l0.nyucd.test.", "30")}},
		{Qname: "_acme-challenge.nyucd.test.", Qtype: dns.TypeTXT, Rcode: dns.RcodeNameError,
			Ns: []dns.RR{soa("nyucd.test.", "30")}},
	} {
		check(t, c, "10.2.0.1", tc) // a level-2 resolver
	}
}

// TestACMEChallengeUnreachable: with the DSHT unreachable the answer is
// SERVFAIL, not a NODATA a resolver would cache.
func TestACMEChallengeUnreachable(t *testing.T) {
	_, server := challengeNetwork(t)
	c := testCoral(t, testWorld())
	c.challenges = newChallenges("nyud.test.", func() acmetxt.Getter { return server })
	server.Close()
	check(t, c, "10.0.0.1", test.Case{Qname: "_acme-challenge.nyud.test.", Qtype: dns.TypeTXT, Rcode: dns.RcodeServerFailure})
}

func check(t *testing.T, c *Coral, resolver string, tc test.Case) {
	t.Helper()
	rec := dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: resolver})
	if _, err := c.ServeDNS(context.Background(), rec, tc.Msg()); err != nil {
		t.Fatal(err)
	}
	if err := test.SortAndCheck(rec.Msg, tc); err != nil {
		t.Errorf("%s %s: %v\n%v", tc.Qname, dns.TypeToString[tc.Qtype], err, rec.Msg)
	}
}
