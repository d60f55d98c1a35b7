package coralcaddy

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
// fields, unless it already is one. It reports whether the index is in
// place.
func (e *engine) writeVaryIndex(fr fetchRequest, fields string, now time.Time, freshFor time.Duration) bool {
	if m, ok := e.store.Peek(fr.baseKey); ok && m.Extra[varyIndexField] == fields {
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
	w, err := e.store.Create(fr.baseKey, m)
	if err != nil {
		e.logger.Debug("no vary index", zap.String("url", m.Extra["url"]), zap.Error(err))
		return false
	}
	if err := w.Commit(m); err != nil {
		e.logger.Debug("no vary index", zap.String("url", m.Extra["url"]), zap.Error(err))
		return false
	}
	return true
}
