package proxy

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
func (p *Proxy) staleExtension() time.Duration {
	return max(p.policy.MinTTL, time.Minute)
}

// revalidate asks the origin whether a stale copy is still good, with the
// copy's validators. 304: the copy is freshened and fresh again. A new
// response: it replaces the copy. Failure (unreachable, or 403, 404, 408,
// 500, 502, 503, 504) where the copy allows it: the stale copy is served and
// its expiry extended, so a dead origin does not take its content with it.
//
// Only a copy the origin itself sent is revalidated with its validators: a
// copy from a peer carries whatever validators the peer wrote, and the
// origin's 304 would then confirm a body it never sent (and the peer's
// headers would decide how long it stays fresh). A peer's copy is fetched
// again unconditionally: after at most maxPeerFreshness, what the origin
// sends replaces it.
func (p *Proxy) revalidate(ctx context.Context, fr fetchRequest, d *download, readyOnce func()) {
	m := fr.stale.Clone()
	conditional := fromOrigin(m)
	var adjust func(http.Header)
	if conditional {
		adjust = func(h http.Header) { httpcache.AddValidators(h, m.Header, m.Stored) }
	}
	requested := time.Now()
	d.askingPeers(nil, -1)
	resp, err := p.fetchForCache(ctx, &fr, adjust)
	now := time.Now()
	if err == nil {
		resp.Body = newIdleTimeoutBody(resp.Body, p.originTimeout, d.cancel)
	}
	status := 0
	if err == nil {
		status = resp.StatusCode
	}
	policy := p.policy.ForRequest(fr.header)
	switch {
	case err == nil && status == http.StatusNotModified:
		resp.Body.Close()
		if conditional && httpcache.Freshen(m.Header, storedHeader(resp.Header)) {
			// The 304 is the response now: its age is the copy's age.
			age := httpcache.CorrectedInitialAge(resp.Header, requested, now)
			freshFor, _ := httpcache.Lifetime(policy, now, m.Status, m.Header)
			m.Stored, m.Expires = now, now.Add(freshFor-age)
			m.Extra[ageField] = formatAge(age)
			if p.store.UpdateMeta(fr.key, m) == nil {
				if fr.key != fr.baseKey {
					if index, ok := p.store.Peek(fr.baseKey); ok && index.Extra[varyIndexField] != "" {
						p.noteFreshVariant(fr.baseKey, index, m.Expires)
					}
				}
				d.revalidated, d.source = true, "origin"
				return
			}
		}
		// The 304 does not match the copy: fetch it whole.
		requested = time.Now()
		resp, err = p.fetchForCache(ctx, &fr, nil)
		if err != nil {
			d.err = err
			return
		}
		resp.Body = newIdleTimeoutBody(resp.Body, p.originTimeout, d.cancel)
		d.source = "origin"
		p.keep(ctx, fr, d, resp, "origin", requested, readyOnce)
	case (conditional || status == 0 || status >= 500) && policy.StaleOnError(status, m.Header, staleness(policy, m, now)):
		// A peer's copy outlives a failing origin (unreachable, 5xx), but
		// not an origin that answers 403 or 404: the origin is there and
		// never sent this copy.
		if resp != nil {
			resp.Body.Close()
		}
		m.Expires = now.Add(p.staleExtension())
		if uerr := p.store.UpdateMeta(fr.key, m); uerr != nil {
			p.logger.Debug("extending a stale copy failed", zap.Error(uerr))
		}
		p.logger.Info("origin failed; serving the stale copy", zap.String("url", m.Extra["url"]), zap.Int("status", status), zap.Error(err))
		d.stale, d.source = true, "local"
	case err != nil:
		d.err = err
	default:
		d.source = "origin"
		p.keep(ctx, fr, d, resp, "origin", requested, readyOnce)
	}
}

// fromOrigin reports whether a stored copy came from the origin itself
// (fetched, or revalidated, by this proxy), not from a peer.
func fromOrigin(m diskcache.Meta) bool { return m.Extra["source"] == "origin" }

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
