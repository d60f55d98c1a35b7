package coralcaddy

// The handler's side of the abuse controls (package abuse): it asks them
// whether to serve a request and turns a refusal into a response.

import (
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/coralcdn/coral/module/caddy/abuse"
)

// abuseControl is what the handler asks of its abuse controls
// (*abuse.Controls).
type abuseControl interface {
	// Admit returns nil for a request to serve, else why not.
	Admit(origin string, client netip.Addr, fromPeer bool) *abuse.Refusal
	// Charger returns what adds bytes served to the bandwidth budget, or
	// nil.
	Charger() func(n int64)
	Close()
}

// admitAbuse asks a (nil: no controls) whether a Coralized request may be
// served. origin is the origin host (from ParseTarget), client the
// client's address (requestClientAddr: Caddy's client_ip, which honours
// trusted_proxies, else the connection's), fromPeer whether the request
// carries only-if-cached (a peer's), and originURL returns the absolute
// URL of the object at the origin (called only for a refusal or a
// redirect, so a request that is admitted does not pay for building it).
// When done is true the request has been answered or refused and
// ServeHTTP should return err: a caddyhttp.HandlerError for a refusal,
// nil after a redirect has been written. A peer's refusal says why in
// Cache-Status.
func admitAbuse(a abuseControl, w http.ResponseWriter, r *http.Request, origin string, client netip.Addr, fromPeer bool, originURL func() string) (done bool, err error) {
	if a == nil {
		return false, nil
	}
	ref := a.Admit(origin, client, fromPeer)
	switch {
	case ref == nil:
		return false, nil
	case ref.Status == http.StatusFound:
		loc, err := abuse.NoServeRedirect(originURL())
		if err != nil {
			return true, caddyhttp.Error(http.StatusInternalServerError, fmt.Errorf("%w; and the origin URL %q: %v", abuse.ErrOverBudget, originURL(), err))
		}
		// The redirect lasts only as long as the budget is exhausted.
		w.Header().Set("Cache-Control", "no-store")
		http.Redirect(w, r, loc, http.StatusFound)
		return true, nil
	}
	if fromPeer {
		w.Header().Set("Cache-Status", notCachedHeaderValue(ref.Detail))
	}
	if ref.RetryAfter > 0 {
		w.Header().Set("Retry-After", retryAfterSeconds(ref.RetryAfter))
	}
	return true, caddyhttp.Error(ref.Status, ref.Err(originURL))
}

// chargeAbuse makes w add the body bytes written through it to the
// bandwidth budget of a, if there is one.
func chargeAbuse(a abuseControl, w *bodyCounter) {
	if a != nil {
		w.charge = a.Charger()
	}
}

// provisionAbuse sets up the blacklist, the rate limit and the budget.
func (h *Handler) provisionAbuse() error {
	logger := h.logger
	a, err := abuse.New(abuse.Config{
		BlacklistPath: h.Blacklist,
		BlacklistPoll: time.Duration(h.BlacklistPoll),
		Logf:          func(format string, args ...any) { logger.Warn(fmt.Sprintf(format, args...)) },
		Rate:          h.RateLimit,
		Burst:         h.RateBurst,
		BudgetBytes:   h.BandwidthBudget,
		BudgetWindow:  time.Duration(h.BandwidthWindow),
	})
	if err != nil {
		return err
	}
	h.abuse = a
	return nil
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
