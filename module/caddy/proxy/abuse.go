package proxy

// The proxy's side of the abuse controls (package abuse): it asks them
// whether to serve a request and turns a refusal into a response.

import (
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/coralcdn/coral/module/caddy/abuse"
)

// admitAbuse asks a (nil: no controls) whether a Coralized request may be
// served. origin is the origin host (from parseTarget), client the
// client's address (Config.ClientAddr), fromPeer whether the request
// carries only-if-cached (a peer's), and originURL returns the absolute
// URL of the object at the origin (called only for a refusal or a
// redirect, so a request that is admitted does not pay for building it).
// When done is true the request has been answered or refused and
// ServeHTTP should return err: an *Error for a refusal, nil after a
// redirect has been written. A peer's refusal says why in Cache-Status.
func admitAbuse(a Abuse, w http.ResponseWriter, r *http.Request, origin string, client netip.Addr, fromPeer bool, originURL func() string) (done bool, err error) {
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
			return true, statusError(http.StatusInternalServerError, fmt.Errorf("%w; and the origin URL %q: %v", abuse.ErrOverBudget, originURL(), err))
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
	return true, statusError(ref.Status, ref.Err(originURL))
}

// chargeAbuse makes w add the body bytes written through it to the
// bandwidth budget of a, if there is one.
func chargeAbuse(a Abuse, w *bodyCounter) {
	if a != nil {
		w.charge = a.Charger()
	}
}

// retryAfterSeconds is d as a Retry-After value: whole seconds, rounded
// up, at least 1.
func retryAfterSeconds(d time.Duration) string {
	s := int64(math.Ceil(d.Seconds()))
	return strconv.FormatInt(max(s, 1), 10)
}
