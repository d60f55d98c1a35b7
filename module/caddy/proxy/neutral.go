package proxy

// The neutral request: what the proxy asks an origin for an answer it may
// keep for everyone.
//
// A response without Vary is stored once under the URL's key and served
// to every client, so whatever fields the request that fetched it carried
// chose everyone's answer. Sending the first client's Accept,
// Accept-Language and User-Agent along gave the origin nothing it could
// use (it did not say it selects on them), and gave that client a way to
// choose what everyone gets: a User-Agent a filter answers with 404 ("Your
// Cache Has Fallen", Nguyen et al., CCS 2019). So a fetch whose answer
// would be stored under the URL's own key (no Vary index is stored for
// the URL) goes to the origin neutral: none of the client's default
// fields (Accept, Accept-Language, User-Agent: the proxy's own instead),
// no X-Forwarded-For (a client's address can be what a filter keys on
// too). The fields an operator added with forward_fields still go: naming
// one says the origins need it on every request (a request ID, a test
// suite's bookkeeping), and an operator who names a field an origin
// selects on without Vary has chosen that. What the origin answers that is the answer
// for every client, as the origin said by sending no Vary on those fields
// (RFC 9110 §12.5.5): an error it answers need not be confirmed by a
// second request (confirmNegative), so a crowd on a page that is gone
// costs its origin one request per negative lifetime, not two.
//
// Origins that look at clients' fields get them: an origin whose answer
// names a forwarded field in Vary (or Vary: *), or that refuses the
// neutral request with 403 (a filter that wants a browser's User-Agent),
// is remembered for fieldsMatterMemory, and this request is sent again
// with the client's own fields; while remembered, its URLs are fetched
// with the client's fields first, as every URL whose Vary index is stored
// is. Those fetches keep the older protection: a bare error is kept only
// if the neutral request gets it too (confirmNegative).

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/coralcdn/coral/module/caddy/httpcache"
)

// fieldsMatterMemory is how long an origin that showed it looks at
// clients' fields is asked with them first. Forgetting one costs its next
// missed URL one more origin request (neutral, then the client's);
// remembering one costs its bare errors the confirmation request.
const fieldsMatterMemory = time.Hour

// asNeutral is fr as a request with none of the client's default fields:
// the forwarded view holds only the operator's forward_fields (so the
// proxy's own User-Agent), no client address.
func (fr fetchRequest) asNeutral() fetchRequest {
	fr.view = forwardedView(fr.header, operatorFields(fr.allow), "")
	fr.clientIP, fr.neutral = "", true
	return fr
}

// operatorFields is the part of an allow-list (ForwardFields) the
// operator added: allow less defaultForwardFields.
func operatorFields(allow []string) []string {
	return slices.DeleteFunc(slices.Clone(allow), func(f string) bool { return slices.Contains(defaultForwardFields, f) })
}

// fetchForCache fetches fr from the origin (adjust, if not nil, changes
// the request header) for a download whose answer the cache may keep:
// neutral (asNeutral) when no Vary index is stored for the URL and its
// origin is not remembered as looking at clients' fields, else with the
// client's fields. fr becomes the request the returned response answers,
// for keep to store and key it by what was sent. When the neutral answer
// shows the origin looks at the client's fields (originUsesFields) and the
// client's fields would select something else, the origin is asked again
// with them.
func (p *Proxy) fetchForCache(ctx context.Context, fr *fetchRequest, adjust func(http.Header)) (*http.Response, error) {
	if fr.varyIndex != "" {
		return p.fetchFromOriginWith(ctx, *fr, adjust)
	}
	if until, ok := p.fieldsMatter.get(fr.originSlot()); ok && time.Now().Before(until) {
		return p.fetchFromOriginWith(ctx, *fr, adjust)
	}
	neutral := fr.asNeutral()
	resp, err := p.fetchFromOriginWith(ctx, neutral, adjust)
	if err != nil || !p.originUsesFields(neutral, resp) || !selectsOther(neutral, fr, resp) {
		if err == nil {
			*fr = neutral
		}
		return resp, err
	}
	resp.Body.Close()
	return p.fetchFromOriginWith(ctx, *fr, adjust)
}

// originUsesFields reports whether resp, the origin's answer to fr, shows
// that the origin looks at clients' fields: its Vary names a forwarded
// field (fr.allow) or is "*", or it refused a neutral request (403). It
// remembers such an origin for fieldsMatterMemory from now.
func (p *Proxy) originUsesFields(fr fetchRequest, resp *http.Response) bool {
	uses := (fr.neutral && resp.StatusCode == http.StatusForbidden) || forwardedVary(resp.Header, fr.allow) != ""
	if uses {
		p.fieldsMatter.put(fr.originSlot(), time.Now().Add(fieldsMatterMemory))
	}
	return uses
}

// selectsOther reports whether the client's own request (client) may get
// another answer than the neutral one (neutral) to it, resp: always for a
// refusal (the origin may want what the client sends), else when a field
// resp's Vary names has another value (or presence) in the client's
// fields.
func selectsOther(neutral fetchRequest, client *fetchRequest, resp *http.Response) bool {
	fields := forwardedVary(resp.Header, neutral.allow)
	if resp.StatusCode == http.StatusForbidden || fields == "*" {
		return true
	}
	nk, nok := httpcache.VaryKey(fields, neutral.forwarded())
	ck, cok := httpcache.VaryKey(fields, client.forwarded())
	return !nok || !cok || nk != ck
}

// forwardedVary is the forwarded fields (allow) the Vary of a response
// with header h names, lower case and comma-separated as varyFields
// gives them; "*" when it is Vary: *; "" when it names none.
func forwardedVary(h http.Header, allow []string) string {
	var named []string
	for f := range strings.SplitSeq(varyFields(h), ",") {
		if f == "*" {
			return "*"
		}
		if f != "" && slices.ContainsFunc(allow, func(a string) bool { return strings.EqualFold(a, f) }) {
			named = append(named, f)
		}
	}
	return strings.Join(named, ",")
}
