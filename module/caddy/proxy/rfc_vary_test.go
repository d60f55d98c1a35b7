package proxy

import "testing"

// Vary (RFC 9111 §4.1): a stored response is used only for requests
// whose nominated fields match the request that produced it.
func TestRFCVary(t *testing.T) {
	vary := func(v string) rfcResponse {
		return rfcResponse{header: []string{"Date", "@0", "Cache-Control", "max-age=600", "Vary", v}}
	}
	runRFCCases(t, []rfcCase{
		{name: "matching field: reused", section: "RFC 9111 §4.1", varies: true, steps: []rfcStep{
			{req: []string{"Accept-Language", "fr"}, resp: vary("Accept-Language"), origin: true},
			{req: []string{"Accept-Language", "fr"}, origin: false, want: rfcWant{body: "body 1"}},
		}},
		{name: "different value: not reused", section: "RFC 9111 §4.1", varies: true, steps: []rfcStep{
			{req: []string{"Accept-Language", "fr"}, resp: vary("Accept-Language"), origin: true},
			{req: []string{"Accept-Language", "de"}, resp: vary("Accept-Language"), origin: true, want: rfcWant{body: "body 2"}},
			{req: []string{"Accept-Language", "fr"}, origin: false, want: rfcWant{body: "body 1"}},
		}},
		{name: "absent is not the same as present", section: "RFC 9111 §4.1", varies: true, steps: []rfcStep{
			{resp: vary("Accept-Language"), origin: true},
			{req: []string{"Accept-Language", "fr"}, resp: vary("Accept-Language"), origin: true},
		}},
		{name: "whitespace in the value is normalized", section: "RFC 9111 §4.1", varies: true, steps: []rfcStep{
			{req: []string{"Accept", "text/html,  image/png"}, resp: vary("Accept"), origin: true},
			{req: []string{"Accept", "text/html, image/png"}, origin: false},
		}},
		{name: "field names are case-insensitive", section: "RFC 9111 §4.1", varies: true, steps: []rfcStep{
			{req: []string{"Accept-Language", "fr"}, resp: vary("accept-LANGUAGE"), origin: true},
			{req: []string{"Accept-Language", "fr"}, origin: false},
		}},
		{name: "Vary: * is never reused", section: "RFC 9111 §4.1", varies: true, steps: []rfcStep{
			{resp: vary("*"), origin: true},
			{origin: true},
		}},
		{name: "two fields, both must match", section: "RFC 9111 §4.1", varies: true, steps: []rfcStep{
			{req: []string{"Accept", "a", "Accept-Language", "fr"}, resp: vary("Accept, Accept-Language"), origin: true},
			{req: []string{"Accept", "a", "Accept-Language", "de"}, resp: vary("Accept, Accept-Language"), origin: true},
			{req: []string{"Accept", "a", "Accept-Language", "fr"}, origin: false, want: rfcWant{body: "body 1"}},
		}},
	})
}
