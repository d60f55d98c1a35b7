package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coralcdn/coral/module/caddy/diskcache"
)

// The harness behind the RFC conformance tests (rfc_*_test.go): a proxy
// behind a real HTTP server, an origin that answers what each step
// scripts, and time the test moves, so that "an hour later" takes no time.
// Each case is a list of steps; a step moves time on, sends one request
// and checks whether the origin was asked and what the client got. Every
// case names the section it checks.
//
// Time moves on by ageing the cache: an hour later is, to a cache, every
// copy it holds being an hour older. So the harness moves each stored
// response's times (when it was stored, when it stops being fresh, and the
// Date, Expires and Last-Modified of its header) an hour into the past;
// the proxy reads the real clock, as it does in production, and the origin
// dates its answers by it.

// rfcCase is one scripted exchange.
type rfcCase struct {
	name    string
	section string // e.g. "RFC 9111 §4.2.3"
	coral   bool   // Coral's deployed policy (12 h / 5 min) instead of strict (default_ttl 0, min_ttl 0)
	// varies: the proxy knows the origin looks at clients' fields, so it
	// asks with them first, not neutral (neutral.go, which its own tests
	// cover); the steps then count the origin's answers as RFC 9111 does.
	varies bool
	steps  []rfcStep
}

// rfcStep is one request. The origin answers it with resp if the proxy
// asks; origin says whether it must ask (true), must not (false).
type rfcStep struct {
	advance time.Duration // move time on this much first
	req     []string      // request fields, name and value pairs
	resp    rfcResponse
	origin  bool // the origin must be asked (a miss or a revalidation)
	want    rfcWant
}

// rfcResponse is what the origin answers. Header values starting with
// "@" are times relative to when the origin answers ("@0" now, "@+1h",
// "@-30s"), written as IMF-fixdates.
type rfcResponse struct {
	status int // default 200
	header []string
	body   string // default "body <n>", n counting the origin's answers
	close  bool   // drop the connection instead of answering
	nobody bool   // no body at all (304)
}

// rfcWant is what the client must get.
type rfcWant struct {
	status      int               // default 200
	body        string            // the body of the origin's answer number n: "body <n>"; "" = not checked
	header      map[string]string // exact values; "" = must be absent
	ageAtLeast  int64             // Age in seconds, when ageChecked
	ageAtMost   int64
	ageChecked  bool
	conditional bool // the origin's request must be conditional (If-None-Match or If-Modified-Since)
}

// age is a want for an Age between lo and hi seconds.
func age(lo, hi int64) rfcWant { return rfcWant{ageAtLeast: lo, ageAtMost: hi, ageChecked: true} }

// scriptedOrigin answers with the response the current step scripts.
type scriptedOrigin struct {
	*recordingOrigin
	mu   sync.Mutex
	next rfcResponse
	n    int
}

func newScriptedOrigin(t *testing.T) *scriptedOrigin {
	o := &scriptedOrigin{}
	o.recordingOrigin = newRecordingOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.n++
		resp, n := o.next, o.n
		o.mu.Unlock()
		if resp.close {
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					c.Close()
				}
			}
			return
		}
		if resp.status == http.StatusNotModified && r.Header.Get("If-None-Match") == "" && r.Header.Get("If-Modified-Since") == "" {
			// As a real origin: a 304 only answers a conditional
			// request; an unconditional one gets the whole response.
			resp.status = http.StatusOK
		}
		for i := 0; i+1 < len(resp.header); i += 2 {
			w.Header().Add(resp.header[i], o.value(resp.header[i+1]))
		}
		status := resp.status
		if status == 0 {
			status = http.StatusOK
		}
		w.WriteHeader(status)
		if resp.nobody || status == http.StatusNotModified {
			return
		}
		body := resp.body
		if body == "" {
			body = fmt.Sprintf("body %d", n)
		}
		io.WriteString(w, body)
	})
	return o
}

// value expands "@<offset>" into an HTTP-date relative to now.
func (o *scriptedOrigin) value(v string) string {
	rest, ok := strings.CutPrefix(v, "@")
	if !ok {
		return v
	}
	d, err := time.ParseDuration(strings.TrimPrefix(rest, "+"))
	if err != nil {
		panic("bad time offset " + v)
	}
	return time.Now().Add(d).UTC().Format(http.TimeFormat)
}

// runRFCCases runs each case against a fresh proxy and origin.
func runRFCCases(t *testing.T, cases []rfcCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.section+" "+tc.name, func(t *testing.T) {
			runRFCCase(t, tc)
		})
	}
}

func runRFCCase(t *testing.T, tc rfcCase) {
	origin := newScriptedOrigin(t)
	p := startLocalProxy(t, 0, func(c *Config, _ *diskcache.Options) {
		if !tc.coral {
			c.Policy.DefaultTTL, c.Policy.MinTTL = 0, 0
		}
	})
	host := origin.coralHost()
	if tc.varies {
		p.px.fieldsMatter.put(origin.hostPort(), time.Now().Add(time.Hour))
	}
	for i, st := range tc.steps {
		p.age(t, st.advance)
		origin.mu.Lock()
		origin.next = st.resp
		origin.mu.Unlock()
		before := len(origin.requests())
		resp, body := p.get(t, host, "/rfc", st.req...)
		p.idle(t)
		reqs := origin.requests()
		asked := len(reqs) > before
		where := fmt.Sprintf("step %d", i+1)
		if asked != st.origin {
			t.Errorf("%s: origin asked %v, want %v (Cache-Status %q)", where, asked, st.origin, resp.Header.Get("Cache-Status"))
		}
		if st.want.conditional && asked {
			last := reqs[len(reqs)-1].Header
			if last.Get("If-None-Match") == "" && last.Get("If-Modified-Since") == "" {
				t.Errorf("%s: the origin's request was not conditional", where)
			}
		}
		wantStatus := st.want.status
		if wantStatus == 0 {
			wantStatus = http.StatusOK
		}
		if resp.StatusCode != wantStatus {
			t.Errorf("%s: status %d, want %d (%q)", where, resp.StatusCode, wantStatus, body)
		}
		if st.want.body != "" && body != st.want.body {
			t.Errorf("%s: body %q, want %q", where, body, st.want.body)
		}
		for k, v := range st.want.header {
			if got := strings.Join(resp.Header.Values(k), ", "); got != v {
				t.Errorf("%s: %s = %q, want %q", where, k, got, v)
			}
		}
		if st.want.ageChecked {
			a, err := strconv.ParseInt(resp.Header.Get("Age"), 10, 64)
			if err != nil || a < st.want.ageAtLeast || a > st.want.ageAtMost {
				t.Errorf("%s: Age %q, want %d..%d", where, resp.Header.Get("Age"), st.want.ageAtLeast, st.want.ageAtMost)
			}
		}
	}
}

// age makes every response p's cache holds d older: what d passing is to a
// cache (see the top of this file).
func (p *localProxy) age(t *testing.T, d time.Duration) {
	t.Helper()
	if d == 0 {
		return
	}
	var keys []string
	p.store.Range(func(in diskcache.Info) bool {
		keys = append(keys, in.Key)
		return true
	})
	for _, key := range keys {
		m, ok := p.store.Peek(key)
		if !ok {
			continue
		}
		m = m.Clone()
		m.Stored, m.Expires = m.Stored.Add(-d), m.Expires.Add(-d)
		for _, field := range []string{"Date", "Expires", "Last-Modified"} {
			if at, err := http.ParseTime(m.Header.Get(field)); err == nil {
				m.Header.Set(field, at.Add(-d).UTC().Format(http.TimeFormat))
			}
		}
		if err := p.store.UpdateMeta(key, m); err != nil {
			t.Fatalf("ageing %s: %v", key, err)
		}
	}
}
