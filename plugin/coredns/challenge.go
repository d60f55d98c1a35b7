package coral

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/coralcdn/coral/coraldht/acmetxt"
	"github.com/miekg/dns"
)

// ACME DNS-01 for the alias zone. A certificate manager (Caddy with the
// libdns provider "coral") publishes its challenge values for
// "_acme-challenge.<alias zone>" in the DSHT (package acmetxt); this
// server answers that TXT query from the DSHT.
//
// The alias apex holds a DNAME, and no name may exist below a DNAME
// (RFC 6672 §2.3): a resolver that has cached it rewrites
// "_acme-challenge.nyud.net" to "_acme-challenge.http.L<n>…L0.nyucd.net"
// itself. So the TXT records live at the DNAME's target, as any other
// name below the alias apex does, and a query for the alias name gets the
// DNAME, the CNAME and the TXT records. ACME servers follow the CNAME (RFC
// 8555 §8.4 validation is an ordinary TXT lookup).

const (
	// challengeTTL is the TTL of the TXT records: none. A resolver that
	// kept a set would hide the next issuance's values from the ACME
	// server (and from the certificate manager's propagation check) until
	// it expired.
	challengeTTL = 0
	// challengeNegTTL is the negative-caching time of "no values yet".
	challengeNegTTL = 1
	// challengeFresh is how long one DSHT lookup serves every query: it
	// bounds the lookups a flood of TXT queries causes to one per second.
	challengeFresh = time.Second
	// challengeTimeout bounds the DSHT lookup; resolvers give up on an
	// authoritative server after a few seconds.
	challengeTimeout = 2 * time.Second
)

var errNoNode = errors.New("the DSHT node has not started")

// challenges looks up the alias zone's challenge values, one DSHT lookup
// at a time, each serving the queries of the next challengeFresh.
type challenges struct {
	domain string // the alias zone, the domain being validated
	node   func() acmetxt.Getter
	now    func() time.Time

	mu     sync.Mutex // held during a lookup: queries meanwhile wait for its result
	at     time.Time
	values []string
	err    error
}

func newChallenges(alias string, node func() acmetxt.Getter) *challenges {
	return &challenges{domain: alias, node: node, now: time.Now}
}

// lookup returns the current values (none is not an error).
func (ch *challenges) lookup(ctx context.Context) ([]string, error) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if !ch.at.IsZero() && ch.now().Sub(ch.at) < challengeFresh {
		return ch.values, ch.err
	}
	node := ch.node()
	if node == nil {
		return nil, errNoNode
	}
	ctx, cancel := context.WithTimeout(ctx, challengeTimeout)
	defer cancel()
	ch.values, ch.err = acmetxt.Lookup(ctx, node, ch.domain)
	ch.at = ch.now()
	return ch.values, ch.err
}

// challenge answers for the challenge name owner (below the alias zone's
// DNAME target) in level zone k: the values as TXT records, NODATA when
// there are none or for another type, SERVFAIL when the DSHT does not
// answer (resolvers then ask another server).
func (b *builder) challenge(owner string, k int) string {
	qtype := b.state.QType()
	if qtype != dns.TypeTXT || b.c.challenges == nil {
		return b.nodata(k, challengeNegTTL)
	}
	values, err := b.c.challenges.lookup(b.ctx)
	if err != nil {
		log.Warningf("ACME challenge for %s: %v", b.c.challenges.domain, err)
		b.m.Rcode = dns.RcodeServerFailure
		b.m.Authoritative = false
		b.m.Answer = nil
		return respServFail
	}
	if len(values) == 0 {
		return b.nodata(k, challengeNegTTL)
	}
	for _, v := range values {
		b.m.Answer = append(b.m.Answer, &dns.TXT{
			Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: challengeTTL},
			Txt: []string{v},
		})
	}
	return respAnswer
}
