package proxy

import (
	"net/http"
	"testing"
	"time"
)

// Validation (RFC 9111 §4.3, RFC 9110 §13): stale copies are revalidated
// with their validators, a 304 freshens the stored response, a 304 for
// another representation is not taken, and clients' conditional requests
// are answered from the cache.
func TestRFCValidation(t *testing.T) {
	with := func(h ...string) rfcResponse { return rfcResponse{header: append([]string{"Date", "@0"}, h...)} }
	notModified := func(h ...string) rfcResponse {
		return rfcResponse{status: http.StatusNotModified, header: append([]string{"Date", "@0"}, h...)}
	}
	runRFCCases(t, []rfcCase{
		{name: "a stale copy is revalidated with If-None-Match", section: "RFC 9111 §4.3.1", steps: []rfcStep{
			{resp: with("Cache-Control", "max-age=1", "ETag", `"v1"`), origin: true},
			{advance: 2 * time.Second, resp: notModified("Cache-Control", "max-age=60", "ETag", `"v1"`), origin: true,
				want: rfcWant{body: "body 1", conditional: true, header: map[string]string{"Cache-Status": `coral; hit; fwd=stale; fwd-status=304; detail="revalidated"`}}},
			{advance: 30 * time.Second, origin: false, want: rfcWant{body: "body 1"}},
		}},
		{name: "a stale copy is revalidated with If-Modified-Since", section: "RFC 9111 §4.3.1", steps: []rfcStep{
			{resp: with("Cache-Control", "max-age=1", "Last-Modified", "@-1h"), origin: true},
			{advance: 2 * time.Second, resp: notModified("Cache-Control", "max-age=60"), origin: true, want: rfcWant{body: "body 1", conditional: true}},
		}},
		{name: "the 304's fields replace the stored ones", section: "RFC 9111 §4.3.4, §3.2", steps: []rfcStep{
			{resp: with("Cache-Control", "max-age=1", "ETag", `"v1"`, "X-Version", "old"), origin: true},
			{advance: 2 * time.Second, resp: notModified("Cache-Control", "max-age=60", "ETag", `"v1"`, "X-Version", "new"), origin: true,
				want: rfcWant{header: map[string]string{"X-Version": "new", "Cache-Control": "max-age=60"}}},
			{origin: false, want: rfcWant{header: map[string]string{"X-Version": "new"}}},
		}},
		{name: "a 304 with another ETag is not taken for the copy: the whole response is fetched", section: "RFC 9111 §4.3.4", steps: []rfcStep{
			{resp: with("Cache-Control", "max-age=1", "ETag", `"v1"`), origin: true},
			{advance: 2 * time.Second, resp: notModified("Cache-Control", "max-age=60", "ETag", `"v2"`), origin: true, want: rfcWant{body: "body 3"}},
			{origin: false, want: rfcWant{body: "body 3", header: map[string]string{"ETag": `"v2"`}}},
		}},
		{name: "a changed response replaces the copy", section: "RFC 9111 §4.3.3", steps: []rfcStep{
			{resp: with("Cache-Control", "max-age=1", "ETag", `"v1"`), origin: true},
			{advance: 2 * time.Second, resp: with("Cache-Control", "max-age=60", "ETag", `"v2"`), origin: true, want: rfcWant{body: "body 2"}},
			{origin: false, want: rfcWant{body: "body 2", header: map[string]string{"ETag": `"v2"`}}},
		}},
		{name: "a client's If-None-Match is answered from the cache", section: "RFC 9111 §4.3.2, RFC 9110 §13.1.2", steps: []rfcStep{
			{resp: with("Cache-Control", "max-age=600", "ETag", `"v1"`), origin: true},
			{req: []string{"If-None-Match", `W/"v0", "v1"`}, origin: false, want: rfcWant{status: http.StatusNotModified}},
			{req: []string{"If-None-Match", `"v0"`}, origin: false, want: rfcWant{body: "body 1"}},
		}},
		{name: "a client's If-Modified-Since is answered from the cache", section: "RFC 9111 §4.3.2, RFC 9110 §13.1.3", steps: []rfcStep{
			{resp: with("Cache-Control", "max-age=600", "Last-Modified", "Tue, 24 Nov 2026 12:00:00 GMT"), origin: true},
			{req: []string{"If-Modified-Since", "Tue, 24 Nov 2026 12:00:00 GMT"}, origin: false, want: rfcWant{status: http.StatusNotModified}},
			{req: []string{"If-Modified-Since", "Mon, 23 Nov 2026 12:00:00 GMT"}, origin: false, want: rfcWant{body: "body 1"}},
		}},
		{name: "a client's conditional request never reaches the origin as such", section: "RFC 9111 §4.3.1", steps: []rfcStep{
			{req: []string{"If-None-Match", `"mine"`}, resp: with("Cache-Control", "max-age=600", "ETag", `"v1"`), origin: true, want: rfcWant{body: "body 1"}},
		}},
	})
}
