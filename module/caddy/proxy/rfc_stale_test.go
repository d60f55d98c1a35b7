package proxy

import (
	"net/http"
	"testing"
	"time"
)

// Serving stale responses (RFC 9111 §4.2.4, RFC 5861): strict mode serves
// a stale copy only when the origin cannot be reached or the response
// allows it (stale-while-revalidate, stale-if-error), never against
// no-cache, must-revalidate, proxy-revalidate or s-maxage; Coral's policy
// also serves it when the origin answers with an error.
func TestRFCStale(t *testing.T) {
	with := func(h ...string) rfcResponse { return rfcResponse{header: append([]string{"Date", "@0"}, h...)} }
	closed := rfcResponse{close: true}
	status := func(code int) rfcResponse { return rfcResponse{status: code, header: []string{"Date", "@0"}} }
	runRFCCases(t, []rfcCase{
		{name: "origin unreachable: the stale copy is served", section: "RFC 9111 §4.2.4 (disconnected)", steps: []rfcStep{
			{resp: with("Cache-Control", "max-age=2"), origin: true},
			{advance: 3 * time.Second, resp: closed, origin: true, want: rfcWant{body: "body 1", header: map[string]string{"Cache-Status": `coral; hit; fwd=stale; detail="stale"`}}},
		}},
		{name: "no-cache forbids it", section: "RFC 9111 §4.2.4, §5.2.2.4", steps: []rfcStep{
			{resp: with("Cache-Control", "max-age=2, no-cache"), origin: true},
			{advance: 3 * time.Second, resp: closed, origin: true, want: rfcWant{status: http.StatusBadGateway}},
		}},
		{name: "must-revalidate forbids it", section: "RFC 9111 §5.2.2.2", steps: []rfcStep{
			{resp: with("Cache-Control", "max-age=2, must-revalidate"), origin: true},
			{advance: 3 * time.Second, resp: closed, origin: true, want: rfcWant{status: http.StatusBadGateway}},
		}},
		{name: "proxy-revalidate forbids it", section: "RFC 9111 §5.2.2.8", steps: []rfcStep{
			{resp: with("Cache-Control", "max-age=2, proxy-revalidate"), origin: true},
			{advance: 3 * time.Second, resp: closed, origin: true, want: rfcWant{status: http.StatusBadGateway}},
		}},
		{name: "s-maxage forbids it", section: "RFC 9111 §5.2.2.10", steps: []rfcStep{
			{resp: with("Cache-Control", "s-maxage=2"), origin: true},
			{advance: 3 * time.Second, resp: closed, origin: true, want: rfcWant{status: http.StatusBadGateway}},
		}},
		{name: "a 503 is passed on in strict mode", section: "RFC 9111 §4.2.4", steps: []rfcStep{
			{resp: with("Cache-Control", "max-age=2"), origin: true},
			{advance: 3 * time.Second, resp: status(503), origin: true, want: rfcWant{status: 503}},
		}},
		{name: "a 503 within stale-if-error: the stale copy", section: "RFC 5861 §4", steps: []rfcStep{
			{resp: with("Cache-Control", "max-age=2, stale-if-error=60"), origin: true},
			{advance: 30 * time.Second, resp: status(503), origin: true, want: rfcWant{body: "body 1"}},
		}},
		{name: "a 503 past stale-if-error is passed on", section: "RFC 5861 §4", steps: []rfcStep{
			{resp: with("Cache-Control", "max-age=2, stale-if-error=60"), origin: true},
			{advance: 90 * time.Second, resp: status(503), origin: true, want: rfcWant{status: 503}},
		}},
		{name: "Coral's policy serves stale for a 503, even with no-cache", section: "Coral policy (serve stale on error)", coral: true, steps: []rfcStep{
			{resp: with("Cache-Control", "max-age=600, no-cache"), origin: true},
			{advance: 6 * time.Minute, resp: status(503), origin: true, want: rfcWant{body: "body 1"}},
		}},
		{name: "Coral's policy still honours must-revalidate", section: "RFC 9111 §5.2.2.2", coral: true, steps: []rfcStep{
			{resp: with("Cache-Control", "max-age=600, must-revalidate"), origin: true},
			{advance: 11 * time.Minute, resp: status(503), origin: true, want: rfcWant{status: 503}},
		}},
		{name: "stale-while-revalidate serves the stale copy and refreshes it", section: "RFC 5861 §3", steps: []rfcStep{
			{resp: with("Cache-Control", "max-age=1, stale-while-revalidate=60"), origin: true},
			{advance: 2 * time.Second, resp: with("Cache-Control", "max-age=600"), origin: true, want: rfcWant{body: "body 1"}},
			{advance: time.Second, origin: false, want: rfcWant{body: "body 2"}},
		}},
		{name: "past the stale-while-revalidate window, a normal miss", section: "RFC 5861 §3", steps: []rfcStep{
			{resp: with("Cache-Control", "max-age=1, stale-while-revalidate=4"), origin: true},
			{advance: 10 * time.Second, resp: with("Cache-Control", "max-age=600"), origin: true, want: rfcWant{body: "body 2"}},
		}},
	})
}
