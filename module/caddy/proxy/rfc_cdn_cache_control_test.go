package proxy

import (
	"net/http"
	"testing"
	"time"
)

// Targeted cache control (RFC 9213): CDN-Cache-Control, and Coral's own
// Coral-Cache-Control before it, decide for the proxy in place of
// Cache-Control and Expires, and are not passed on to clients.
func TestRFCCDNCacheControl(t *testing.T) {
	with := func(h ...string) rfcResponse { return rfcResponse{header: append([]string{"Date", "@0"}, h...)} }
	// CDN-Cache-Control is passed on (RFC 9213 §3), Coral-Cache-Control
	// never leaves Coral.
	passed := map[string]string{"Cdn-Cache-Control": "max-age=3600"}
	hidden := map[string]string{"Coral-Cache-Control": ""}
	runRFCCases(t, []rfcCase{
		{name: "a positive max-age is reused", section: "RFC 9213 §2.1", steps: []rfcStep{
			{resp: with("CDN-Cache-Control", "max-age=3600"), origin: true, want: rfcWant{header: passed}},
			{advance: time.Minute, origin: false, want: rfcWant{body: "body 1", header: passed}},
		}},
		{name: "max-age beyond 2^31 is clamped, and reused", section: "RFC 9213 §2.1, RFC 9111 §1.2.2", steps: []rfcStep{
			{resp: with("CDN-Cache-Control", "max-age=99999999999"), origin: true},
			{advance: time.Hour, origin: false},
		}},
		{name: "max-age=0 is not reused", section: "RFC 9213 §2.1", steps: []rfcStep{
			{resp: with("CDN-Cache-Control", "max-age=0"), origin: true},
			{origin: true},
		}},
		{name: "max-age=0 wins over a future Expires", section: "RFC 9213 §2.1", steps: []rfcStep{
			{resp: with("CDN-Cache-Control", "max-age=0", "Expires", "@+3h"), origin: true},
			{origin: true},
		}},
		{name: "a positive max-age wins over a past Expires", section: "RFC 9213 §2.1", steps: []rfcStep{
			{resp: with("CDN-Cache-Control", "max-age=3600", "Expires", "@-3h"), origin: true},
			{origin: false},
		}},
		{name: "a long max-age wins over a short Cache-Control max-age", section: "RFC 9213 §2.1", steps: []rfcStep{
			{resp: with("Cache-Control", "max-age=1", "CDN-Cache-Control", "max-age=3600"), origin: true},
			{advance: time.Minute, origin: false, want: rfcWant{header: map[string]string{"Cache-Control": "max-age=1"}}},
		}},
		{name: "a short max-age wins over a long Cache-Control max-age", section: "RFC 9213 §2.1", steps: []rfcStep{
			{resp: with("Cache-Control", "max-age=3600", "CDN-Cache-Control", "max-age=1"), origin: true},
			{advance: 2 * time.Second, origin: true},
		}},
		{name: "private is not stored despite Cache-Control and Expires", section: "RFC 9213 §2.1, RFC 9111 §5.2.2.7", steps: []rfcStep{
			{resp: with("CDN-Cache-Control", "private", "Cache-Control", "max-age=10000", "Expires", "@+3h"), origin: true},
			{origin: true},
		}},
		{name: "no-cache is revalidated despite Cache-Control", section: "RFC 9213 §2.1, RFC 9111 §5.2.2.4", steps: []rfcStep{
			{resp: with("CDN-Cache-Control", "no-cache", "Cache-Control", "max-age=10000", "Expires", "@+3h", "ETag", `"a"`), origin: true},
			{resp: rfcResponse{status: http.StatusNotModified, header: []string{"ETag", `"a"`}}, origin: true, want: rfcWant{conditional: true, body: "body 1"}},
		}},
		{name: "no-store is not stored despite Cache-Control", section: "RFC 9213 §2.1, RFC 9111 §5.2.2.5", steps: []rfcStep{
			{resp: with("Cache-Control", "max-age=10000", "CDN-Cache-Control", "no-store", "Expires", "@+3h"), origin: true},
			{origin: true},
		}},
		{name: "a fresh max-age is stored despite Cache-Control no-store", section: "RFC 9213 §2.1", steps: []rfcStep{
			{resp: with("Cache-Control", "no-store", "CDN-Cache-Control", "max-age=10000"), origin: true},
			{origin: false, want: rfcWant{header: map[string]string{"Cache-Control": "no-store"}}},
		}},
		{name: "Age above its max-age makes it stale", section: "RFC 9213 §2.1, RFC 9111 §4.2.3", steps: []rfcStep{
			{resp: with("CDN-Cache-Control", "max-age=3600", "Age", "7200"), origin: true, want: age(7200, 7201)},
			{origin: true},
		}},
		{name: "an extension directive does not invalidate the field", section: "RFC 9213 §2.2", steps: []rfcStep{
			{resp: with("CDN-Cache-Control", "foobar, max-age=3600"), origin: true},
			{origin: false},
		}},
		{name: "an invalid Structured Field is ignored", section: "RFC 9213 §2.2, RFC 8941", steps: []rfcStep{
			{resp: with("CDN-Cache-Control", "max-age=10000, &&&&&", "Cache-Control", "no-store"), origin: true},
			{origin: true},
		}},
		{name: "a value of the wrong type makes the field invalid", section: "RFC 9213 §2.2", steps: []rfcStep{
			{resp: with("CDN-Cache-Control", `max-age="10000"`, "Cache-Control", "no-store"), origin: true},
			{origin: true},
		}},
		{name: "Coral-Cache-Control comes before CDN-Cache-Control", section: "RFC 9213 §2.1 (target list)", steps: []rfcStep{
			{resp: with("CDN-Cache-Control", "no-store", "Coral-Cache-Control", "max-age=600"), origin: true, want: rfcWant{header: hidden}},
			{advance: 5 * time.Minute, origin: false, want: rfcWant{header: hidden}},
			{advance: 6 * time.Minute, origin: true},
		}},
		{name: "an invalid Coral-Cache-Control falls back to CDN-Cache-Control", section: "RFC 9213 §2.1", steps: []rfcStep{
			{resp: with("Coral-Cache-Control", "max-age=?", "CDN-Cache-Control", "max-age=600", "Cache-Control", "no-store"), origin: true},
			{origin: false},
		}},
		{name: "targeted fields override Coral's minimum like Cache-Control does", section: "Coral policy, RFC 9213 §2.1", coral: true, steps: []rfcStep{
			{resp: with("Cache-Control", "max-age=86400", "CDN-Cache-Control", "max-age=30, must-revalidate"), origin: true},
			{advance: 31 * time.Second, origin: true},
		}},
	})
}
