package coralcaddy

// Protections against misuse of the proxy (as CoralCDN deployed them; the
// thesis §3.4.3), each optional and each cheap enough to run on every request:
//
//   - blacklist: origin domains the proxy refuses to serve (403), read from
//     a file and reloaded while the proxy runs. CoralCDN kept such a list
//     for sites that asked not to be served, notably those that
//     authenticate by IP address and would otherwise be open to anyone
//     through a proxy on a whitelisted network.
//   - rateLimiter: a token bucket per client address (429 with
//     Retry-After). Besides plain abuse it breaks the multi-hop redirect
//     loops that misconfigured sites create through Coral.
//   - bandwidthBudget: the bytes this proxy may serve per window. Over it,
//     clients are sent to the origin with a 302 whose URL carries
//     "coral-no-serve", so the site's own "redirect to Coral" rule does
//     not send them straight back.
//
// abuseControls bundles the three behind one call per request (admit) and
// has the handler's response writer charge the bytes served to the budget
// (charge):
//
//	if done, err := h.abuse.admit(w, r, origin, originURL); done {
//		return err
//	}
//	h.abuse.charge(w)
//
// A nil *blacklist, *rateLimiter, *bandwidthBudget or *abuseControls is a
// valid value meaning "off": their methods then allow everything.

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/coralcdn/coral/coralname"
	"github.com/coralcdn/coral/module/caddy/httpcache"
)

// ---------------------------------------------------------------------
// Per-request entry point.

// abuseControls are the optional protections of one handler. Nil fields
// are off; a nil *abuseControls admits everything.
type abuseControls struct {
	blacklist *blacklist
	rate      *rateLimiter
	peerRate  *rateLimiter // for only-if-cached requests; see peerRateFactor
	budget    *bandwidthBudget
	now       func() time.Time // time.Now when nil; tests inject a clock
}

func (a *abuseControls) clock() time.Time {
	if a.now != nil {
		return a.now()
	}
	return time.Now()
}

// Refusal reasons, wrapped in the errors admit returns.
var (
	errBlacklisted = errors.New("its owner asked that it not be served through Coral")
	errRateLimited = errors.New("coral_proxy: too many requests from your address; slow down")
	errOverBudget  = errors.New("coral_proxy: this proxy has used up its bandwidth budget")
)

// admit decides whether a Coralized request may be served. origin is the
// origin host (from ParseTarget) and originURL returns the absolute URL
// of the object at the origin, without coral-no-serve (called only for a
// refusal or a redirect, so a request that is admitted does not pay for
// building it). The checks run in this
// order, cheapest and most definitive first:
//
//  1. a blacklisted origin gets 403;
//  2. a client over its rate gets 429 with Retry-After (whole seconds);
//  3. over the bandwidth budget, the client is redirected (302, not
//     cacheable) to the origin URL with coral-no-serve added.
//
// A request with Cache-Control: only-if-cached (what peer proxies send)
// gets 504 instead for all three: a peer takes any other answer for the
// object itself and would hand a 403, a 429 or a redirect to the origin
// on to its own clients, while 504 makes it try the next peer or the
// origin, which is the right fallback in each case.
//
// When done is true the request has been answered or refused and
// ServeHTTP should return err: a caddyhttp.HandlerError for a refusal, nil
// after a redirect has been written. The client address is Caddy's
// client_ip (which honours trusted_proxies), else the connection's.
func (a *abuseControls) admit(w http.ResponseWriter, r *http.Request, origin string, originURL func() string) (done bool, err error) {
	if a == nil {
		return false, nil
	}
	now := a.clock()
	fromPeer := httpcache.ParseRequestCacheControl(r.Header).OnlyIfCached
	refuse := func(status int, detail string, err error) (bool, error) {
		if fromPeer {
			w.Header().Set("Cache-Status", notCachedHeaderValue(detail))
			status = http.StatusGatewayTimeout
		}
		return true, caddyhttp.Error(status, err)
	}
	if a.blacklist.blocked(origin) {
		return refuse(http.StatusForbidden, "blacklisted", fmt.Errorf("coral_proxy: %s is on this proxy's blacklist: %w; fetch %s directly", origin, errBlacklisted, originURL()))
	}
	limiter := a.rate
	if fromPeer {
		limiter = a.peerRate
	}
	if ok, wait := limiter.allow(requestClientAddr(r), now); !ok {
		if !fromPeer {
			w.Header().Set("Retry-After", retryAfterSeconds(wait))
		}
		return refuse(http.StatusTooManyRequests, "rate-limited", errRateLimited)
	}
	if a.budget.exceeded(now) {
		if fromPeer {
			return refuse(http.StatusGatewayTimeout, "over-budget", errOverBudget)
		}
		loc, err := noServeRedirect(originURL())
		if err != nil {
			return true, caddyhttp.Error(http.StatusInternalServerError, fmt.Errorf("%w; and the origin URL %q: %v", errOverBudget, originURL(), err))
		}
		// The redirect lasts only as long as the budget is exhausted.
		w.Header().Set("Cache-Control", "no-store")
		http.Redirect(w, r, loc, http.StatusFound)
		return true, nil
	}
	return false, nil
}

// charge makes w add the body bytes written through it to the bandwidth
// budget, if there is one.
func (a *abuseControls) charge(w *bodyCounter) {
	if a == nil || a.budget == nil {
		return
	}
	w.budget, w.now = a.budget, a.clock
}

// requestClientAddr is the client's address: Caddy's client_ip variable,
// which honours trusted_proxies, else the connection's remote address.
// Behind a load balancer that is not listed in trusted_proxies every
// client would share the balancer's address, and its rate.
func requestClientAddr(r *http.Request) netip.Addr {
	if s, ok := caddyhttp.GetVar(r.Context(), caddyhttp.ClientIPVarKey).(string); ok {
		if a, err := netip.ParseAddr(s); err == nil {
			return a
		}
	}
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return ap.Addr()
	}
	a, _ := netip.ParseAddr(r.RemoteAddr)
	return a
}

// retryAfterSeconds is d as a Retry-After value: whole seconds, rounded
// up, at least 1.
func retryAfterSeconds(d time.Duration) string {
	s := int64(math.Ceil(d.Seconds()))
	return strconv.FormatInt(max(s, 1), 10)
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

// noServeRedirect returns originURL, an absolute http or https URL, with
// coral-no-serve as the last query parameter. The existing query is kept
// as it is, parameter order included, except that bytes a URL may not
// carry (controls, spaces, non-ASCII, and '%' not followed by two hex
// digits) are percent-encoded. User information and the fragment are
// dropped, an empty path becomes "/", and a URL already ending in
// coral-no-serve is returned as it is (less those).
func noServeRedirect(originURL string) (string, error) {
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

// provisionAbuse sets up the blacklist, the rate limit and the budget.
func (h *Handler) provisionAbuse() error {
	a := &abuseControls{}
	if h.Blacklist != "" {
		every := time.Duration(h.BlacklistPoll)
		if every <= 0 {
			every = defaultBlacklistPoll
		}
		logger := h.logger
		bl, err := newBlacklist(h.Blacklist, every, func(format string, args ...any) { logger.Warn(fmt.Sprintf(format, args...)) })
		if err != nil {
			return err // it names coral_proxy, the blacklist and the file
		}
		a.blacklist = bl
	}
	rate, burst := h.RateLimit, h.RateBurst
	if rate == 0 {
		rate = defaultRate
	}
	if burst == 0 {
		burst = defaultBurst
	}
	a.rate = newRateLimiter(rate, burst, defaultMaxClients)
	a.peerRate = newRateLimiter(rate*peerRateFactor, burst*peerRateFactor, defaultMaxClients)
	window := time.Duration(h.BandwidthWindow)
	if window <= 0 {
		window = defaultBudgetWindow
	}
	a.budget = newBandwidthBudget(h.BandwidthBudget, window)
	h.abuse = a
	return nil
}
