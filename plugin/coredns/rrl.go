package coral

import (
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"strconv"
	"time"

	"github.com/miekg/dns"
)

// Response rate limiting, after BIND's RRL: UDP responses to one client
// network are limited to a rate, so that the servers are a poor reflector
// for a flood at an address the attacker spoofs. The network is the
// source's /24 (IPv6: /56), where BIND keys on the response too: every
// Coralized name is a different positive answer, so a key per name would
// let an attacker step around the limit by varying the name.

// rrlConfig is the rrl line:
//
//	rrl RESPONSES_PER_SECOND [nxdomains RATE] [errors RATE] [slip N] [window DURATION] [table SIZE]
type rrlConfig struct {
	rates  [rrlCategories]float64 // per second per client network
	slip   int                    // every slip-th limited response is sent truncated; 0: none
	window time.Duration          // how long a flood is remembered
	table  int                    // buckets, a power of two
}

// Defaults and bounds of the rrl line; the defaults are BIND's.
const (
	defaultRRLSlip   = 2
	defaultRRLWindow = 15 * time.Second
	defaultRRLTable  = 16384
	maxRRLRate       = 1_000_000
	maxRRLSlip       = 10
	maxRRLWindow     = time.Hour
	minRRLTable      = 256
	maxRRLTable      = 1 << 20
	rrlIPv4Bits      = 24
	rrlIPv6Bits      = 56
)

// rrlCategory is what kind of response a bucket counts.
type rrlCategory uint8

const (
	rrlResponses rrlCategory = iota // answers, referrals, NODATA
	rrlNXDomains                    // NXDOMAIN
	rrlErrors                       // REFUSED, FORMERR, SERVFAIL, NOTIMP, BADVERS, YXDOMAIN
	rrlCategories
)

func (c rrlCategory) String() string {
	return [...]string{"responses", "nxdomains", "errors"}[c]
}

// rrlCategoryOf is the category of a response of metric kind kind.
func rrlCategoryOf(kind string) rrlCategory {
	switch kind {
	case respAnswer, respReferral, respNoData:
		return rrlResponses
	case respNXDomain:
		return rrlNXDomains
	}
	return rrlErrors
}

// parseRRL reads the arguments of the rrl line.
func parseRRL(args []string) (*rrlConfig, error) {
	if len(args) == 0 {
		return nil, errors.New("rrl needs RESPONSES_PER_SECOND")
	}
	rate, err := parseRRLRate("rrl", args[0])
	if err != nil {
		return nil, err
	}
	cfg := &rrlConfig{
		rates:  [rrlCategories]float64{rate, rate, rate},
		slip:   defaultRRLSlip,
		window: defaultRRLWindow,
		table:  defaultRRLTable,
	}
	seen := map[string]bool{}
	rest := args[1:]
	for len(rest) > 0 {
		name := rest[0]
		if len(rest) < 2 {
			return nil, fmt.Errorf("rrl %s: missing its value", name)
		}
		v := rest[1]
		rest = rest[2:]
		if seen[name] {
			return nil, fmt.Errorf("rrl %s given twice", name)
		}
		seen[name] = true
		switch name {
		case "nxdomains":
			cfg.rates[rrlNXDomains], err = parseRRLRate("rrl nxdomains", v)
		case "errors":
			cfg.rates[rrlErrors], err = parseRRLRate("rrl errors", v)
		case "slip":
			cfg.slip, err = strconv.Atoi(v)
			if err != nil || cfg.slip < 0 || cfg.slip > maxRRLSlip {
				err = fmt.Errorf("rrl slip %q: want 0 (drop every limited response) to %d", v, maxRRLSlip)
			}
		case "window":
			cfg.window, err = time.ParseDuration(v)
			if err != nil || cfg.window < time.Second || cfg.window > maxRRLWindow || cfg.window%time.Second != 0 {
				err = fmt.Errorf("rrl window %q: want whole seconds from 1s to 1h", v)
			}
		case "table":
			cfg.table, err = strconv.Atoi(v)
			if err != nil || cfg.table < minRRLTable || cfg.table > maxRRLTable {
				err = fmt.Errorf("rrl table %q: want %d to %d buckets", v, minRRLTable, maxRRLTable)
			}
			cfg.table = 1 << bits.Len(uint(cfg.table-1)) // a power of two
		default:
			err = fmt.Errorf("rrl: unknown option %q (want nxdomains, errors, slip, window or table)", name)
		}
		if err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

func parseRRLRate(what, s string) (float64, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxRRLRate {
		return 0, fmt.Errorf("%s %q: want responses per second, 1 to %d", what, s, maxRRLRate)
	}
	return float64(n), nil
}

// rrlAction is what becomes of a response.
type rrlAction uint8

const (
	rrlSend rrlAction = iota
	rrlDrop
	rrlSlip // send an empty truncated response: a real client retries over TCP
)

// rateLimiter is the fixed-size table of buckets, one per client network
// and category (bucketTable: memory is the table's size whatever the
// traffic, and nobody can aim a flood of sources at the bucket of the
// network being attacked).
type rateLimiter struct {
	cfg     rrlConfig
	buckets *bucketTable[rrlBucket]
	now     func() time.Time
	start   time.Time
}

// rrlBucket is the account of one client network and category. Its
// credit grows by the rate every second up to one second's worth (the
// burst), and each response costs one; below zero, responses are limited.
// It sinks no lower than window seconds' worth, so a network stays limited
// for at most window after a flood stops, and stays limited as long as
// it keeps sending faster than the rate (BIND's averaging over window).
type rrlBucket struct {
	limited uint32  // limited responses so far, to pick the ones that slip
	credit  float64 // responses it may send now
	last    int64   // nanoseconds since start
}

func newRateLimiter(cfg rrlConfig, now func() time.Time) *rateLimiter {
	return &rateLimiter{cfg: cfg, buckets: newBucketTable[rrlBucket](cfg.table), now: now, start: now()}
}

// rrlNetwork is the client network a's responses are counted under.
func rrlNetwork(a netip.Addr) netip.Addr {
	bits := rrlIPv6Bits
	if a.Is4() {
		bits = rrlIPv4Bits
	}
	p, _ := a.Prefix(bits)
	return p.Addr()
}

// decide accounts for one response of category cat to client.
func (r *rateLimiter) decide(client netip.Addr, cat rrlCategory) rrlAction {
	// The clock is read once per response; one nanosecond on keeps a
	// bucket touched at start distinguishable from an unused one.
	now := int64(r.now().Sub(r.start)) + 1
	rate := r.cfg.rates[cat]
	action := rrlSend
	r.buckets.update(makeBucketID(rrlNetwork(client), uint8(cat)), now, func(b *rrlBucket, fresh bool) bool {
		if fresh {
			*b = rrlBucket{credit: rate, last: now}
		}
		if elapsed := now - b.last; elapsed > 0 {
			b.credit = min(rate, b.credit+rate*float64(elapsed)/float64(time.Second))
			b.last = now
		}
		b.credit = max(b.credit-1, -rate*r.cfg.window.Seconds())
		if b.credit >= 0 {
			return true
		}
		b.limited++
		action = rrlDrop
		if r.cfg.slip > 0 && b.limited%uint32(r.cfg.slip) == 0 {
			action = rrlSlip
		}
		return false
	})
	return action
}

// slipped is the response sent in place of a limited one when it slips:
// the question and TC, nothing else, so that a real client retries over
// TCP (which is never limited) and a flood's victim gets no more octets
// than the attacker sent.
func slipped(r *dns.Msg) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Truncated = true
	return m
}
