package coraldht

import (
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Detection: what members did that honest nodes do not, counted in total
// (Stats.Abuse) and per source prefix in a bounded table of suspects
// (Node.Suspects), for metrics, alerts and status pages.

// An AbuseKind is one kind of event that marks a source as suspect.
type AbuseKind int

const (
	// AbuseClaimMismatch: a request claimed a sender address other than
	// its source (an honest node behind NAT does too; its verification
	// then succeeds).
	AbuseClaimMismatch AbuseKind = iota
	// AbuseVerifyFailed: a claimed address did not answer the ping that
	// would have let it into a routing table.
	AbuseVerifyFailed
	// AbuseContactRefused: a proven contact was kept out of a routing
	// table by the per-IP or per-subnet cap.
	AbuseContactRefused
	// AbuseQuota: a store hit its source's share of the store (the
	// source's own oldest value made room) or its per-key limit.
	AbuseQuota
	// AbuseUnproven: a request from a source that has not proven its
	// address, which would have needed a reply larger than itself or a
	// change of state, was refused (dropped as "unproven").
	AbuseUnproven
	// AbuseIdentity: a datagram without a valid node identity where one
	// is required, or under a revoked or expired certificate.
	AbuseIdentity
	abuseKindEnd
)

var abuseNames = [abuseKindEnd]string{"claim_mismatch", "verify_failed", "contact_refused", "quota", "unproven", "identity"}

// String is the kind's name, as metrics label it.
func (k AbuseKind) String() string {
	if k < 0 || k >= abuseKindEnd {
		return ""
	}
	return abuseNames[k]
}

// AbuseKinds lists every kind, in a fixed order.
func AbuseKinds() []AbuseKind {
	out := make([]AbuseKind, abuseKindEnd)
	for i := range out {
		out[i] = AbuseKind(i)
	}
	return out
}

// AbuseCounts counts events by kind (index: AbuseKind).
type AbuseCounts [abuseKindEnd]uint64

// Count is the count of kind k.
func (a AbuseCounts) Count(k AbuseKind) uint64 {
	if k < 0 || k >= abuseKindEnd {
		return 0
	}
	return a[k]
}

// Total is the sum over all kinds.
func (a AbuseCounts) Total() uint64 {
	var sum uint64
	for _, v := range a {
		sum += v
	}
	return sum
}

// A Suspect is a source prefix (a /24, or /48 for IPv6) that did what
// honest nodes do not.
type Suspect struct {
	Prefix      netip.Prefix
	Events      AbuseCounts
	First, Last time.Time
	// Sources are the last few source addresses seen doing it, and
	// Claimed the last few addresses they claimed to be.
	Sources, Claimed []netip.AddrPort
	// Certificate is the serial of the node certificate its datagrams
	// carried, in node identity mode (0: none or unknown).
	Certificate uint64
}

const (
	// maxSuspects bounds the table: when full, a new prefix replaces the
	// one with the fewest events, so persistent sources stay.
	maxSuspects = 64
	// suspectAddrs is how many recent addresses a suspect keeps.
	suspectAddrs = 4
)

type abuseLog struct {
	totals [abuseKindEnd]atomic.Uint64

	mu       sync.Mutex
	suspects map[netip.Prefix]*Suspect
}

func newAbuseLog() *abuseLog { return &abuseLog{suspects: make(map[netip.Prefix]*Suspect)} }

// note records one event of kind k from source (the datagram's source),
// which claimed claimed (zero: nothing), under certificate serial (0:
// none).
func (l *abuseLog) note(k AbuseKind, source, claimed netip.AddrPort, serial uint64, now time.Time) {
	l.totals[k].Add(1)
	p := SitePrefix(source.Addr())
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.suspects[p]
	if s == nil {
		if len(l.suspects) >= maxSuspects {
			var low *Suspect
			for _, x := range l.suspects {
				if low == nil || x.Events.Total() < low.Events.Total() {
					low = x
				}
			}
			delete(l.suspects, low.Prefix)
		}
		s = &Suspect{Prefix: p, First: now}
		l.suspects[p] = s
	}
	s.Events[k]++
	s.Last = now
	s.Sources = recentAddr(s.Sources, source)
	if claimed.IsValid() {
		s.Claimed = recentAddr(s.Claimed, claimed)
	}
	if serial != 0 {
		s.Certificate = serial
	}
}

// recentAddr moves a to the end of the list, keeping the last few.
func recentAddr(list []netip.AddrPort, a netip.AddrPort) []netip.AddrPort {
	if i := slices.Index(list, a); i >= 0 {
		list = slices.Delete(list, i, i+1)
	}
	list = append(list, a)
	if len(list) > suspectAddrs {
		list = list[len(list)-suspectAddrs:]
	}
	return list
}

func (l *abuseLog) counts() AbuseCounts {
	var a AbuseCounts
	for k := range a {
		a[k] = l.totals[k].Load()
	}
	return a
}

// top returns up to n suspects, most events first.
func (l *abuseLog) top(n int) []Suspect {
	l.mu.Lock()
	out := make([]Suspect, 0, len(l.suspects))
	for _, s := range l.suspects {
		c := *s
		c.Sources, c.Claimed = slices.Clone(s.Sources), slices.Clone(s.Claimed)
		out = append(out, c)
	}
	l.mu.Unlock()
	slices.SortFunc(out, func(a, b Suspect) int {
		if ta, tb := a.Events.Total(), b.Events.Total(); ta != tb {
			if ta > tb {
				return -1
			}
			return 1
		}
		return a.Prefix.Addr().Compare(b.Prefix.Addr())
	})
	if n >= 0 && len(out) > n {
		out = out[:n]
	}
	return out
}

// Suspects lists the source prefixes (/24, /48) that did what honest
// nodes do not, most events first: at most the 64 with the most events
// since the node started (a new prefix replaces the one with the fewest).
// Status pages show them; internal/dhtmetrics exports the first ten.
func (n *Node) Suspects() []Suspect { return n.abuse.top(-1) }
