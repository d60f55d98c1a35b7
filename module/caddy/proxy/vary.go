package proxy

import (
	"crypto/sha1"
	"encoding/hex"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/coralcdn/coral/module/caddy/diskcache"
	"go.uber.org/zap"
)

// Vary. Origins are asked for the identity encoding, so Accept-Encoding
// selects nothing here. A response that varies on other request fields is
// kept per variant: the URL's key holds a small index entry (no body,
// Extra[varyIndexField] naming the fields), and each variant lives under
// variantKey(URL key, VaryKey(fields, its request)). The index is only a
// pointer: it is read whatever its age, and rewritten when a response
// names other fields.
const varyIndexField = "vary-index"

// IsVaryIndex reports whether m is a URL's Vary index, not an object.
func IsVaryIndex(m diskcache.Meta) bool { return m.Extra[varyIndexField] != "" }

// varyFields returns the request fields a response varies on, other than
// Accept-Encoding: lower case, sorted, without duplicates, joined with
// commas; "" when there are none. Vary: * is refused before (Storable).
func varyFields(h http.Header) string {
	var names []string
	for _, v := range h.Values("Vary") {
		for _, f := range strings.Split(v, ",") {
			f = strings.ToLower(strings.TrimSpace(f))
			if f != "" && f != "accept-encoding" {
				names = append(names, f)
			}
		}
	}
	slices.Sort(names)
	return strings.Join(slices.Compact(names), ",")
}

// variantKey is the store key of one variant of the object under base.
func variantKey(base, varyKey string) string {
	sum := sha1.Sum([]byte(base + "\n" + varyKey))
	return hex.EncodeToString(sum[:])
}

// writeVaryIndex makes the URL's entry an index of variants varying on
// fields, unless it already is one, and notes that one of its variants is
// fresh for freshFor from now (noteFreshVariant). It reports whether the
// index is in place.
func (p *Proxy) writeVaryIndex(fr fetchRequest, fields string, now time.Time, freshFor time.Duration) bool {
	if m, ok := p.store.Peek(fr.baseKey); ok && m.Extra[varyIndexField] == fields {
		p.noteFreshVariant(fr.baseKey, m, now.Add(freshFor))
		return true
	}
	m := diskcache.Meta{
		Key:     fr.baseKey,
		Status:  http.StatusOK,
		Header:  http.Header{"Vary": {fields}},
		Stored:  now,
		Expires: now.Add(freshFor),
		Size:    0,
		Extra:   map[string]string{varyIndexField: fields, "url": fr.originURL().String()},
	}
	w, err := p.store.Create(fr.baseKey, m)
	if err != nil {
		p.logger.Debug("no vary index", zap.String("url", m.Extra["url"]), zap.Error(err))
		return false
	}
	if err := w.Commit(m); err != nil {
		p.logger.Debug("no vary index", zap.String("url", m.Extra["url"]), zap.Error(err))
		return false
	}
	return true
}

// An index's Expires is when the last of its variants stored or
// revalidated so far stops being fresh: while it is in the future, some
// variant may still be served, and the index must not be wiped by a
// response without Vary (wouldHideFresh). The index itself is read
// whatever its age.

// noteFreshVariant moves the expiry of the index m (stored under base)
// to until, if that is later.
func (p *Proxy) noteFreshVariant(base string, m diskcache.Meta, until time.Time) {
	if !until.After(m.Expires) {
		return
	}
	m = m.Clone()
	m.Expires = until
	if err := p.store.UpdateMeta(base, m); err != nil {
		p.logger.Debug("vary index expiry not extended", zap.String("url", m.Extra["url"]), zap.Error(err))
	}
}

// wouldHideFresh reports whether storing a response with status, varying
// on fields (varyFields), under key would replace or hide a copy that
// others are being served, which a response provoked by request fields
// outside the cache key (a firewall refusing a User-Agent) must never do
// ("Your Cache Has Fallen", Nguyen et al., CCS 2019):
//
//   - an error (400 and above) never replaces a stored success, fresh or
//     stale, whether it would land on the same key or write a Vary index
//     over it: an origin that fails for one request's unkeyed fields may
//     mark its error fresh for an hour, and a success that has just gone
//     stale is exactly what the next request revalidates;
//   - an error never rewrites a Vary index, and a response without Vary
//     never rewrites one that still has fresh variants (the index's
//     Expires), which would hide them all.
//
// Such a response still answers the request that brought it, uncached.
// The price: while a stale success is stored, an origin that really
// turned the URL into an error is asked again on every miss (as a stale
// copy is revalidated anyway), until the copy is evicted or the origin
// sends a success again.
func (p *Proxy) wouldHideFresh(fr fetchRequest, key, fields string, status int, now time.Time) bool {
	isError := status >= 400
	if base, ok := p.store.Peek(fr.baseKey); ok {
		switch index := base.Extra[varyIndexField]; {
		case index != "" && index != fields && isError:
			return true
		case index != "" && index != fields && fields == "" && now.Before(base.Expires):
			return true
		case index == "" && isError && base.Status < 400:
			return true
		}
	}
	if isError && key != fr.baseKey {
		if m, ok := p.store.Peek(key); ok && m.Status < 400 {
			return true
		}
	}
	return false
}
