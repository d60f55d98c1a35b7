package proxy

import (
	"testing"
	"time"
)

// Age (RFC 9111 §4.2.3, §5.1): the Age a response is served with is its
// current age, the corrected initial age (what it arrived with, Date skew
// and the request's round trip included) plus the time it has been in the
// cache; a response that arrives already older than its lifetime is stale.
func TestRFCAge(t *testing.T) {
	maxAge := func(s string, extra ...string) rfcResponse {
		return rfcResponse{header: append([]string{"Date", "@0", "Cache-Control", "max-age=" + s}, extra...)}
	}
	runRFCCases(t, []rfcCase{
		{name: "a miss passes the origin's Age on", section: "RFC 9111 §4.2.3", steps: []rfcStep{
			{resp: maxAge("3600", "Age", "30"), origin: true, want: age(30, 31)},
		}},
		{name: "a hit's Age is the initial age plus resident time", section: "RFC 9111 §4.2.3", steps: []rfcStep{
			{resp: maxAge("3600", "Age", "30"), origin: true, want: age(30, 31)},
			{advance: 3 * time.Second, origin: false, want: age(33, 34)},
			{advance: time.Hour - 40*time.Second, origin: false, want: age(3593, 3594)},
		}},
		{name: "Age beyond max-age: served once, then stale", section: "RFC 9111 §4.2.1, §4.2.3", steps: []rfcStep{
			{resp: maxAge("3600", "Age", "7200"), origin: true, want: age(7200, 7201)},
			{resp: maxAge("3600"), origin: true, want: rfcWant{body: "body 2"}},
		}},
		{name: "Age beyond Expires minus Date", section: "RFC 9111 §4.2.3", steps: []rfcStep{
			{resp: rfcResponse{header: []string{"Date", "@0", "Expires", "@+20s", "Age", "25"}}, origin: true, want: age(25, 26)},
			{resp: maxAge("3600"), origin: true},
		}},
		{name: "a slow origin clock (Date in the past) ages the response", section: "RFC 9111 §4.2.3 apparent_age", steps: []rfcStep{
			{resp: rfcResponse{header: []string{"Date", "@-30m", "Cache-Control", "max-age=1800"}}, origin: true, want: age(1800, 1801)},
			{resp: maxAge("3600"), origin: true},
		}},
		{name: "a fast origin clock (Date in the future) does not make it younger", section: "RFC 9111 §4.2.3", steps: []rfcStep{
			{resp: rfcResponse{header: []string{"Date", "@+1h", "Cache-Control", "max-age=60", "Age", "15"}}, origin: true, want: age(15, 16)},
			{advance: 40 * time.Second, origin: false, want: age(55, 56)},
			{advance: 10 * time.Second, resp: maxAge("3600"), origin: true},
		}},
		{name: "non-numeric Age is ignored", section: "RFC 9111 §5.1", steps: []rfcStep{
			{resp: maxAge("3600", "Age", "abc"), origin: true, want: age(0, 1)},
			{origin: false},
		}},
		{name: "negative Age is ignored", section: "RFC 9111 §5.1", steps: []rfcStep{
			{resp: maxAge("3600", "Age", "-7200"), origin: true},
			{origin: false},
		}},
		{name: "decimal Age is ignored", section: "RFC 9111 §5.1", steps: []rfcStep{
			{resp: maxAge("3600", "Age", "7200.0"), origin: true},
			{origin: false},
		}},
		{name: "Age of 2^31 - 1 is stale", section: "RFC 9111 §1.2.2", steps: []rfcStep{
			{resp: maxAge("3600", "Age", "2147483647"), origin: true},
			{resp: maxAge("3600"), origin: true},
		}},
		{name: "a huge Age is clamped to 2^31 and never sent larger", section: "RFC 9111 §1.2.2, §5.1", steps: []rfcStep{
			{resp: maxAge("3600", "Age", "99999999999999999999"), origin: true, want: age(2147483648, 2147483648)},
			{resp: maxAge("3600"), origin: true},
		}},
		{name: "a list Age counts by its first member (old, 0)", section: "RFC 9111 §5.1", steps: []rfcStep{
			{resp: maxAge("3600", "Age", "7200, 0"), origin: true},
			{resp: maxAge("3600"), origin: true},
		}},
		{name: "a list Age counts by its first member (0, old)", section: "RFC 9111 §5.1", steps: []rfcStep{
			{resp: maxAge("3600", "Age", "0, 7200"), origin: true},
			{origin: false},
		}},
		{name: "two Age lines count by the first (old, 0)", section: "RFC 9111 §5.1", steps: []rfcStep{
			{resp: maxAge("3600", "Age", "7200", "Age", "0"), origin: true},
			{resp: maxAge("3600"), origin: true},
		}},
		{name: "two Age lines count by the first (0, old)", section: "RFC 9111 §5.1", steps: []rfcStep{
			{resp: maxAge("3600", "Age", "0", "Age", "7200"), origin: true},
			{origin: false},
		}},
		{name: "revalidation: the 304's age becomes the copy's", section: "RFC 9111 §4.3.4, §4.2.3", steps: []rfcStep{
			{resp: maxAge("10", "ETag", `"v1"`), origin: true},
			{advance: time.Minute, resp: rfcResponse{status: 304, header: []string{"Date", "@0", "Cache-Control", "max-age=10", "ETag", `"v1"`, "Age", "4"}},
				origin: true, want: rfcWant{body: "body 1", conditional: true, ageAtLeast: 4, ageAtMost: 5, ageChecked: true}},
			{advance: 2 * time.Second, origin: false, want: age(6, 7)},
		}},
		{name: "Coral's minimum freshness is measured as age too", section: "Coral policy, RFC 9111 §4.2.3", coral: true, steps: []rfcStep{
			{resp: maxAge("10", "Age", "290"), origin: true, want: age(290, 291)},
			{advance: 5 * time.Second, origin: false}, // 5 s short, not 1 s: see TestRFCFreshness' max-age case
			{advance: 6 * time.Second, resp: maxAge("10"), origin: true},
		}},
	})
}
