package coralcaddy

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/coralcdn/coral/module/caddy/diskcache"
	"github.com/coralcdn/coral/module/caddy/httpcache"
	"go.uber.org/zap"
)

// staleExtension is how long a stale copy stays servable after a failed
// revalidation before the proxy tries the origin again.
func (e *engine) staleExtension() time.Duration {
	return max(e.policy.MinTTL, time.Minute)
}

// revalidate asks the origin whether a stale copy is still good, with the
// copy's validators. 304: the copy is freshened and fresh again. A new
// response: it replaces the copy. Failure (unreachable, or 403, 404, 408,
// 500, 502, 503, 504) where the copy allows it: the stale copy is served and
// its expiry extended, so a dead origin does not take its content with it.
func (e *engine) revalidate(ctx context.Context, fr fetchRequest, d *download, readyOnce func()) {
	m := fr.stale.Clone()
	requested := e.now()
	resp, err := e.fetchFromOriginWith(ctx, fr, func(h http.Header) { httpcache.AddValidators(h, m.Header) })
	now := e.now()
	if err == nil {
		resp.Body = newIdleTimeoutBody(resp.Body, e.originTimeout, d.cancel)
	}
	status := 0
	if err == nil {
		status = resp.StatusCode
	}
	policy := e.policy.ForRequest(fr.header)
	switch {
	case err == nil && status == http.StatusNotModified:
		resp.Body.Close()
		if httpcache.Freshen(m.Header, storedHeader(resp.Header)) {
			// The 304 is the response now: its age is the copy's age.
			age := httpcache.CorrectedInitialAge(resp.Header, requested, now)
			freshFor, _ := httpcache.Lifetime(policy, now, m.Status, m.Header)
			m.Stored, m.Expires = now, now.Add(freshFor-age)
			m.Extra[ageField] = formatAge(age)
			if e.store.UpdateMeta(fr.key, m) == nil {
				d.revalidated, d.source = true, "origin"
				return
			}
		}
		// The 304 does not match the copy: fetch it whole.
		requested = e.now()
		resp, err = e.fetchFromOrigin(ctx, fr)
		if err != nil {
			d.err = err
			return
		}
		resp.Body = newIdleTimeoutBody(resp.Body, e.originTimeout, d.cancel)
		d.source = "origin"
		e.keep(ctx, fr, d, resp, "origin", requested, readyOnce)
	case policy.StaleOnError(status, m.Header, staleness(policy, m, now)):
		if resp != nil {
			resp.Body.Close()
		}
		m.Expires = now.Add(e.staleExtension())
		if uerr := e.store.UpdateMeta(fr.key, m); uerr != nil {
			e.logger.Debug("extending a stale copy failed", zap.Error(uerr))
		}
		e.logger.Info("origin failed; serving the stale copy", zap.String("url", m.Extra["url"]), zap.Int("status", status), zap.Error(err))
		d.stale, d.source = true, "local"
	case err != nil:
		d.err = err
	default:
		d.source = "origin"
		e.keep(ctx, fr, d, resp, "origin", requested, readyOnce)
	}
}

// ageField is the Meta.Extra entry that keeps a stored response's
// corrected initial age (RFC 9111 §4.2.3), in whole seconds: its age when
// it arrived. Its current age, what Age says when it is served, is that
// plus the time since Meta.Stored (storedAge).
const ageField = "age"

func formatAge(d time.Duration) string { return strconv.FormatInt(int64(d/time.Second), 10) }

// storedAge is the current age of a stored response at now: its corrected
// initial age plus its resident time, never more than 2^31 s.
func storedAge(m *diskcache.Meta, now time.Time) time.Duration {
	var initial time.Duration
	if v, ok := m.Extra[ageField]; ok {
		initial, _ = httpcache.ParseDeltaSeconds(v)
	}
	return min(httpcache.AddSaturating(initial, max(now.Sub(m.Stored), 0)), httpcache.MaxDelta)
}

// staleness is how long a stored response has been stale at now by its
// own freshness lifetime (not by Meta.Expires, which a failed
// revalidation extends): current age minus lifetime.
func staleness(p httpcache.Policy, m diskcache.Meta, now time.Time) time.Duration {
	lifetime, _ := httpcache.Lifetime(p, m.Stored, m.Status, m.Header)
	return max(storedAge(&m, now)-lifetime, 0)
}
