package proxy

// What a client's request may carry to an origin or a peer.
//
// Coral is an open, public cache: whatever one anonymous client makes a
// proxy fetch and store, every later visitor of that URL gets. So nothing
// of a request that is not part of the cache key may shape what the origin
// sends back, and the URL fetched must be exactly the URL the key is
// computed from:
//
//   - the request target is origin-form ("/path?query") or the absolute
//     form of a Coralized URL ("http://www.example.com.nyud.net/path");
//     anything else (an opaque "http:@evil.com/", user information,
//     "*", authority-form, other schemes) is refused with 400
//     (requestPath, in admit.go);
//   - the origin URL is built field by field with net/url from the parsed
//     target's normalized path and query, the same strings the key hashes
//     (target.OriginURL), so "/a/%2e%2e/b" is fetched as "/b", stored as
//     "/b", and a userinfo trick cannot change the host;
//   - only an allow-list of request fields reaches the origin (and peers):
//     Accept, Accept-Language and User-Agent (and what forward_fields
//     adds), plus the fields a stored
//     response's Vary names (so the origin sees what selects the variant it
//     is asked for), never cookies, credentials, conditionals, ranges,
//     hop-by-hop fields or the override fields some servers act on
//     (X-Original-URL, X-HTTP-Method-Override, X-Forwarded-Host, …).
//     The proxy adds its own Via, X-Forwarded-For and, for revalidation,
//     validators of the stored copy.

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/coralcdn/coral/module/caddy/httpcache"
)

// defaultForwardFields are the request fields that reach origins and
// peers whatever the response: what content negotiation commonly uses, and
// the client's User-Agent (which origins log, and some vary on).
// Accept-Encoding is not among them: origins are asked for the identity
// encoding, so that one stored copy serves every client. An operator adds
// fields with forward_fields (ForwardFields).
var defaultForwardFields = []string{"Accept", "Accept-Language", "User-Agent"}

// ForwardFields is the allow-list of a configuration with extra
// (Config.ForwardFields): the defaults and the extra fields, canonical. A
// field that is never forwarded is an error.
func ForwardFields(extra []string) ([]string, error) {
	out := slices.Clone(defaultForwardFields)
	for _, f := range extra {
		k := http.CanonicalHeaderKey(strings.TrimSpace(f))
		if !httpcache.IsToken(k) {
			return nil, fmt.Errorf("coral_proxy: forward_fields: %q is not a field name", f)
		}
		if neverForwarded[k] {
			return nil, fmt.Errorf("coral_proxy: forward_fields: %s is never forwarded (credentials, hop-by-hop, conditional, or an override of the URL, host, method or client)", k)
		}
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out, nil
}

// neverForwarded are fields no request carries to an origin or a peer,
// even when a stored Vary names them: credentials and cookies (Coral
// serves public content), hop-by-hop fields (RFC 9110 §7.6.1),
// conditionals and ranges (the proxy fetches whole objects and answers
// those itself), the proxy's own fields, and fields some servers and
// frameworks take as overrides of the URL, host, method or client address.
var neverForwarded = func() map[string]bool {
	m := make(map[string]bool)
	for _, k := range []string{
		"Cookie", "Cookie2", "Authorization", "Proxy-Authorization",
		"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
		"Host", "Content-Length", "Content-Type", "Expect", "Max-Forwards", "Accept-Encoding",
		"Range", "If-Range", "If-None-Match", "If-Modified-Since", "If-Match", "If-Unmodified-Since",
		"Cache-Control", "Pragma", "Via", "Forwarded",
		"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Port", "X-Forwarded-Proto", "X-Forwarded-Scheme",
		"X-Forwarded-Server", "X-Forwarded-Prefix", "X-Forwarded-Uri", "X-Forwarded-Ssl", "Front-End-Https",
		"X-Original-Url", "X-Rewrite-Url", "X-Original-Host", "X-Original-Uri", "X-Host", "X-Http-Host-Override",
		"X-Http-Method-Override", "X-Http-Method", "X-Method-Override",
		"X-Real-Ip", "X-Client-Ip", "True-Client-Ip", "Client-Ip", "Cf-Connecting-Ip", "Fastly-Client-Ip",
		"X-Cluster-Client-Ip", "X-Proxyuser-Ip",
		peerAskerField, // the proxy's own (peers.go)
	} {
		m[http.CanonicalHeaderKey(k)] = true
	}
	return m
}()

// forwardedView is the part of a client's request header that reaches
// origins and peers: the allow-listed fields (ForwardFields), and the
// fields listed in vary (a stored Vary index's lower-case, comma-separated
// field names), less neverForwarded and anything the client's Connection
// field names. Each field is one line, its lines combined and normalized
// (httpcache.NormalizeFieldValue): originRequestHeader sends exactly
// these values, and a stored variant is keyed by them (VaryKey), so the
// origin's response is stored under the key of what the origin was sent,
// and a field the origin never saw can never select a variant. (Two
// User-Agent lines used to be keyed joined while the origin got only the
// first.)
func forwardedView(in http.Header, allow []string, vary string) http.Header {
	out := make(http.Header, len(allow)+2)
	hop := connectionFields(in)
	take := func(name string) {
		k := http.CanonicalHeaderKey(name)
		if neverForwarded[k] || hop[k] {
			return
		}
		if v, ok := in[k]; ok {
			out[k] = []string{httpcache.NormalizeFieldValue(v)}
		}
	}
	for _, k := range allow {
		take(k)
	}
	for f := range strings.SplitSeq(vary, ",") {
		if f = strings.TrimSpace(f); f != "" {
			take(f)
		}
	}
	return out
}

// connectionFields are the field names a Connection header lists.
func connectionFields(h http.Header) map[string]bool {
	vals := h.Values("Connection")
	if len(vals) == 0 {
		return nil
	}
	m := make(map[string]bool)
	for _, v := range vals {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				m[http.CanonicalHeaderKey(f)] = true
			}
		}
	}
	return m
}

// originRequestHeader is the header of a request to an origin or a peer:
// view (from forwardedView, one line per field) plus Via, X-Forwarded-For
// with the client's address as this proxy saw it (never the client's own
// claim), and a User-Agent naming the proxy after the client's (the same
// suffix always, so the variant key, computed from view, still tells
// apart exactly the values the origin tells apart).
func originRequestHeader(view http.Header, clientIP, ua string) http.Header {
	h := view.Clone()
	if h == nil {
		h = make(http.Header)
	}
	h.Set("Via", "1.1 coral")
	if clientIP != "" {
		h.Set("X-Forwarded-For", clientIP)
	}
	if cu := view.Get("User-Agent"); cu != "" {
		h.Set("User-Agent", cu+" "+ua)
	} else {
		h.Set("User-Agent", ua)
	}
	return h
}

// hopHeaders are never stored or relayed from a response (RFC 9110
// §7.6.1).
var hopHeaders = []string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// storedHeader is what the cache keeps of an origin response's header:
// no hop-by-hop fields, those its Connection names, and never Set-Cookie.
func storedHeader(in http.Header) http.Header {
	h := in.Clone()
	for k := range connectionFields(in) {
		h.Del(k)
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
	h.Del("Set-Cookie")
	h.Del("Set-Cookie2")
	h.Del(peerFreshnessField)
	return h
}
