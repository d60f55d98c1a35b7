// Package abuse holds coral_proxy's protections against misuse.
//
// The protections against misuse of the proxy (as CoralCDN deployed them; the
// thesis §3.4.3), each optional and each cheap enough to run on every request:
//
//   - Blacklist: origin domains the proxy refuses to serve (403), read from
//     a file and reloaded while the proxy runs. CoralCDN kept such a list
//     for sites that asked not to be served, notably those that
//     authenticate by IP address and would otherwise be open to anyone
//     through a proxy on a whitelisted network.
//   - FleetList: the same for the whole fleet, as CoralCDN ran it: one
//     list the operator signs with a publisher key (SignList), which
//     every node fetches from a URL or from other nodes, verifies, never
//     rolls back, reloads while it runs and keeps when a fetch fails.
//     A local file and the fleet list may both apply: an origin either
//     names is refused.
//   - RateLimiter: a token bucket per client address (429 with
//     Retry-After). Besides plain abuse it breaks the multi-hop redirect
//     loops that misconfigured sites create through Coral.
//   - Budget: the bytes this proxy may serve per window, shared max-min
//     fairly among origins (fairshare.go; NewBudget keeps one counter for
//     the node). Over its share, or over the budget, a client is sent to
//     the origin with a 302 whose URL carries "coral-no-serve", so the
//     site's own "redirect to Coral" rule does not send them straight
//     back.
//
// Controls bundles the three behind one call per request (Admit), which
// says what to refuse and why, and a charger for the bytes served
// (Charger); the handler turns a Refusal into its response. A nil
// *Blacklist, *RateLimiter, *Budget or *Controls is a valid value meaning
// "off": their methods then allow everything.

package abuse

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/coralcdn/coral/coralname"
)

// Config is the configuration of New: the blacklist file (none if empty)
// and how often it is checked, where its problems are logged, the
// per-client rate and burst, and the bandwidth budget.
type Config struct {
	BlacklistPath string
	BlacklistPoll time.Duration // DefaultBlacklistPoll if ≤ 0
	Fleet         *FleetList    // the fleet-wide list (nil: none); its owner closes it
	Logf          func(format string, args ...any)
	Rate          float64 // requests a second per client; DefaultRate if 0, off if < 0
	Burst         int     // DefaultBurst if 0
	BudgetBytes   int64   // no budget if ≤ 0
	BudgetWindow  time.Duration
	// BudgetPerNode makes the budget one counter for the node, as before
	// fair shares: every origin is redirected once it is used, none
	// before.
	BudgetPerNode bool
}

// New builds the controls a configuration asks for. Peers' requests
// (only-if-cached) get a rate of their own, PeerRateFactor times the
// client's.
func New(c Config) (*Controls, error) {
	a := &Controls{Fleet: c.Fleet}
	if c.BlacklistPath != "" {
		every := c.BlacklistPoll
		if every <= 0 {
			every = DefaultBlacklistPoll
		}
		bl, err := NewBlacklist(c.BlacklistPath, every, c.Logf)
		if err != nil {
			return nil, err // it names coral_proxy, the blacklist and the file
		}
		a.Blacklist = bl
	}
	rate, burst := c.Rate, c.Burst
	if rate == 0 {
		rate = DefaultRate
	}
	if burst == 0 {
		burst = DefaultBurst
	}
	a.Rate = NewRateLimiter(rate, burst, DefaultMaxClients)
	a.PeerRate = NewRateLimiter(rate*PeerRateFactor, burst*PeerRateFactor, DefaultMaxClients)
	window := c.BudgetWindow
	if window <= 0 {
		window = DefaultBudgetWindow
	}
	if c.BudgetPerNode {
		a.Budget = NewBudget(c.BudgetBytes, window)
	} else {
		a.Budget = NewFairBudget(c.BudgetBytes, window, 0, 0)
	}
	return a, nil
}

// Controls are the optional protections of one handler. Nil fields are
// off; a nil *Controls admits everything.
type Controls struct {
	Blacklist *Blacklist
	Fleet     *FleetList // not closed by Close: shared by the handlers of a process
	Rate      *RateLimiter
	PeerRate  *RateLimiter // for only-if-cached requests; see PeerRateFactor
	Budget    *Budget
	Now       func() time.Time // time.Now when nil; tests inject a clock
	// OnBudget, if set, is told the budget's decision for every request
	// that reaches it (for the metrics).
	OnBudget func(Decision)
}

func (a *Controls) clock() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// Refusal reasons, wrapped in the errors of a Refusal.
var (
	ErrBlacklisted = errors.New("its owner asked that it not be served through Coral")
	ErrRateLimited = errors.New("coral_proxy: too many requests from your address; slow down")
	ErrOverBudget  = errors.New("coral_proxy: this proxy has used up its bandwidth budget")
	ErrOverShare   = fmt.Errorf("%w for this site (its fair share; other sites are still served)", ErrOverBudget)
)

// Refusal is what Admit decides for a request it does not let through.
type Refusal struct {
	// Status is the HTTP status to refuse with: 403 (blacklisted), 429
	// (over the rate), or 504 for a peer whatever the reason; 302 sends
	// the client to the origin instead (over the budget): see Redirect.
	Status int
	// Detail names the reason for a peer's Cache-Status: "blacklisted",
	// "rate-limited", "over-budget" or "over-share".
	Detail string
	// RetryAfter is when a client over its rate may try again (0 for a
	// peer, which tries the next peer instead).
	RetryAfter time.Duration
	origin     string
	reason     error
}

// Err is the error to refuse with; originURL returns the object's URL at
// the origin, which a blacklisted site's visitors are told to fetch
// directly (called only then).
func (r *Refusal) Err(originURL func() string) error {
	if errors.Is(r.reason, ErrBlacklisted) {
		return fmt.Errorf("coral_proxy: %s is on this proxy's blacklist: %w; fetch %s directly", r.origin, ErrBlacklisted, originURL())
	}
	return r.reason
}

// Admit decides whether a Coralized request may be served: origin is the
// origin host, client the client's address, fromPeer whether the request
// has Cache-Control: only-if-cached (what peer proxies send). The checks
// run in this order, cheapest and most definitive first:
//
//  1. an origin on the local blacklist or the fleet's gets 403;
//  2. a client over its rate gets 429 with Retry-After;
//  3. over the bandwidth budget, or over the origin's fair share of it
//     (NewFairBudget), the client is redirected (302, not cacheable) to
//     the origin URL with coral-no-serve added (NoServeRedirect).
//
// A peer gets 504 instead for all three: it takes any other answer for
// the object itself and would hand a 403, a 429 or a redirect to the
// origin on to its own clients, while 504 makes it try the next peer or
// the origin, which is the right fallback in each case. Admit returns nil
// for a request to serve.
func (a *Controls) Admit(origin string, client netip.Addr, fromPeer bool) *Refusal {
	if a == nil {
		return nil
	}
	now := a.clock()
	refuse := func(status int, detail string, err error) *Refusal {
		if fromPeer {
			status = http.StatusGatewayTimeout
		}
		return &Refusal{Status: status, Detail: detail, origin: origin, reason: err}
	}
	if a.Blacklist.Blocked(origin) || a.Fleet.Blocked(origin) {
		return refuse(http.StatusForbidden, "blacklisted", ErrBlacklisted)
	}
	limiter := a.Rate
	if fromPeer {
		limiter = a.PeerRate
	}
	if ok, wait := limiter.Allow(client, now); !ok {
		r := refuse(http.StatusTooManyRequests, "rate-limited", ErrRateLimited)
		if !fromPeer {
			r.RetryAfter = wait
		}
		return r
	}
	if a.Budget == nil {
		return nil
	}
	d := a.Budget.Admit(origin, now)
	if a.OnBudget != nil {
		a.OnBudget(d)
	}
	switch d {
	case Exhausted:
		return refuse(http.StatusFound, "over-budget", ErrOverBudget)
	case OverShare:
		return refuse(http.StatusFound, "over-share", ErrOverShare)
	}
	return nil
}

// Charger returns what adds the body bytes of one response for origin to
// the bandwidth budget, or nil if there is none.
func (a *Controls) Charger(origin string) func(n int64) {
	if a == nil || a.Budget == nil {
		return nil
	}
	return a.Budget.Charge(origin, a.clock)
}

// LearnAddress notes the address this proxy reached origin at: the fair
// shares count the origin under its address from then on.
func (a *Controls) LearnAddress(origin string, addr netip.Addr) {
	if a != nil {
		a.Budget.LearnAddress(origin, addr)
	}
}

// Close stops the blacklist's polling.
func (a *Controls) Close() {
	if a != nil && a.Blacklist != nil {
		a.Blacklist.Close()
	}
}

// ---------------------------------------------------------------------
// The redirect to the origin.

// noServeParam is what a site's "redirect to Coral" rule looks for. The
// rule CoralCDN documented for Apache is
//
//	RewriteCond %{QUERY_STRING} !(^|&)coral-no-serve$
//
// so the parameter goes last and bare (no "=").
const noServeParam = "coral-no-serve"

// NoServeRedirect returns originURL, an absolute http or https URL, with
// coral-no-serve as the last query parameter. The existing query is kept
// as it is, parameter order included, except that bytes a URL may not
// carry (controls, spaces, non-ASCII, and '%' not followed by two hex
// digits) are percent-encoded. User information and the fragment are
// dropped, an empty path becomes "/", and a URL already ending in
// coral-no-serve is returned as it is (less those).
func NoServeRedirect(originURL string) (string, error) {
	u, err := url.Parse(originURL)
	if err != nil {
		return "", err
	}
	u.Scheme = strings.ToLower(u.Scheme)
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("origin URL %q: not http or https", originURL)
	}
	if u.Hostname() == "" || u.Opaque != "" {
		return "", fmt.Errorf("origin URL %q: no host", originURL)
	}
	if !plainHost(u.Hostname()) {
		return "", fmt.Errorf("origin URL %q: host is not a plain name or IP address", originURL)
	}
	u.User = nil
	u.Fragment, u.RawFragment = "", ""
	if u.Path == "" && u.RawPath == "" {
		u.Path = "/"
	}
	q := coralname.EscapeQuery(u.RawQuery)
	switch {
	case q == noServeParam || strings.HasSuffix(q, "&"+noServeParam):
	case q == "" || strings.HasSuffix(q, "&"):
		q += noServeParam
	default:
		q += "&" + noServeParam
	}
	u.RawQuery, u.ForceQuery = q, false
	out := u.String()
	if _, err := url.Parse(out); err != nil {
		return "", fmt.Errorf("origin URL %q: %w", originURL, err)
	}
	return out, nil
}

// plainHost reports whether host is an IP address without zone, or a name
// made of ASCII letters, digits, '-', '_' and '.' (origins are; this keeps
// anything odd out of a Location header).
func plainHost(host string) bool {
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Zone() == ""
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}
