package coralcaddy

import (
	"bytes"
	"cmp"
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html/template"
	"math"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/coralcdn/coral/module/caddy/proxy"
	"github.com/dustin/go-humanize"
)

func init() { caddy.RegisterModule(StatusPage{}) }

// StatusPage is the HTTP handler "coral_status": a read-only page about
// this Coral node, for people (HTML) and programs (JSON, with ?format=json
// or Accept: application/json). It shows the DSHT node (ID, address,
// uptime, whether it joined), its clusters and routing tables per level,
// the node's DSHT load and drops, the caches of the coral_proxy handlers
// with their most recently used objects, requests by Cache-Status and
// source (hit ratios), and the most recent origin and peer fetches.
//
// It answers GET and HEAD only (405 otherwise) on any path it is given,
// and shows no key material. The JSON document is the admin API's
// /coral/status with a few more fields. It needs the coral app.
type StatusPage struct {
	// Recent is how many of the most recently used cached objects, and of
	// the most recent origin and peer fetches, the page lists. Default 20,
	// at most 64.
	Recent int `json:"recent,omitempty"`

	// ShowQueries shows the URLs of objects and fetches with their query
	// strings. Off by default: the page is for anyone who can reach it,
	// and query strings often carry tokens (signed links, session ids)
	// that the client who fetched the URL did not mean to publish.
	ShowQueries bool `json:"show_queries,omitempty"`

	app *App
}

// Bounds of Recent.
const (
	defaultStatusRecent = 20
	maxStatusRecent     = recentFetchCount
)

// CaddyModule returns the Caddy module information.
func (StatusPage) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.coral_status", New: func() caddy.Module { return new(StatusPage) }}
}

// Provision finds the coral app (and so the DSHT node).
func (s *StatusPage) Provision(ctx caddy.Context) error {
	app, err := ctx.App("coral")
	if err != nil {
		return fmt.Errorf("coral_status needs the coral app (the coral global option): %w", err)
	}
	s.app = app.(*App)
	if s.Recent == 0 {
		s.Recent = defaultStatusRecent
	}
	return nil
}

// Validate checks the configuration.
func (s *StatusPage) Validate() error {
	if s.Recent < 0 || s.Recent > maxStatusRecent {
		return fmt.Errorf("coral_status: recent %d: want 1..%d", s.Recent, maxStatusRecent)
	}
	return nil
}

// ServeHTTP serves the page, or its data as JSON.
func (s *StatusPage) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		return caddyhttp.Error(http.StatusMethodNotAllowed, fmt.Errorf("coral_status serves GET and HEAD only"))
	}
	doc := s.document(time.Now())
	hdr := w.Header()
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer")
	hdr.Add("Vary", "Accept")
	var body []byte
	if statusWantsJSON(r) {
		b, err := json.Marshal(doc)
		if err != nil {
			return caddyhttp.Error(http.StatusInternalServerError, err)
		}
		body = append(b, '\n')
		hdr.Set("Content-Type", "application/json")
	} else {
		nonce, err := statusNonce()
		if err != nil {
			return caddyhttp.Error(http.StatusInternalServerError, err)
		}
		var buf bytes.Buffer
		if err := statusPageTemplate.Execute(&buf, statusView{statusDoc: doc, Nonce: nonce}); err != nil {
			return caddyhttp.Error(http.StatusInternalServerError, err)
		}
		body = buf.Bytes()
		hdr.Set("Content-Type", "text/html; charset=utf-8")
		// Only this response's own inline style and script run; the
		// script may fetch this page again and nothing else.
		hdr.Set("Content-Security-Policy", fmt.Sprintf("default-src 'none'; style-src 'nonce-%[1]s'; script-src 'nonce-%[1]s'; "+
			"connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'", nonce))
		hdr.Set("X-Frame-Options", "DENY")
	}
	hdr.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return nil
	}
	_, err := w.Write(body)
	return err
}

// statusWantsJSON: ?format=json, or an Accept header that lists
// application/json and not text/html (browsers list text/html).
func statusWantsJSON(r *http.Request) bool {
	switch r.URL.Query().Get("format") {
	case "json":
		return true
	case "html":
		return false
	}
	wantJSON := false
	for part := range strings.SplitSeq(r.Header.Get("Accept"), ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		if q, ok := params["q"]; ok {
			if v, err := strconv.ParseFloat(q, 64); err != nil || v <= 0 {
				continue // not acceptable
			}
		}
		switch mt {
		case "text/html", "application/xhtml+xml":
			return false
		case "application/json":
			wantJSON = true
		}
	}
	return wantJSON
}

func statusNonce() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// statusDoc is the page's data and its JSON form: the admin API's status
// document (node, levels, dht, caches, recent_fetches, with at most Recent
// fetches) and what only the page has.
type statusDoc struct {
	Generated     time.Time `json:"generated"`
	UptimeSeconds float64   `json:"uptime_seconds"` // of the DSHT node; 0 if unknown
	adminStatus
	Requests statusRequests `json:"requests"`
	// RecentObjects are the caches' most recently used objects, most
	// recent first.
	RecentObjects []adminObject `json:"recent_objects"`
}

// statusRequests are coral_proxy's requests since Caddy started, over all
// its handlers.
type statusRequests struct {
	Total    uint64 `json:"total"`
	Answered uint64 `json:"answered"` // not refused
	// HitRatio is the share of answered requests that needed no origin
	// fetch of their own: local hits, stale, collapsed and from peers.
	HitRatio float64 `json:"hit_ratio"`
	// Kinds, in a fixed order: local_hit, peer, origin, stale, collapsed,
	// failed (no response from anywhere), refused, other.
	Kinds []statusKind `json:"kinds"`
	// ByStatusSource are the counts behind Kinds: requests by cache status
	// and source, as in caddy_coral_requests_total (non-zero ones only).
	ByStatusSource []requestCount `json:"by_cache_status_and_source"`
}

type statusKind struct {
	Kind  string  `json:"kind"`
	Count uint64  `json:"count"`
	Share float64 `json:"share"` // of Total
}

// The request kinds of the coral_status page and how it names them.
var statusKinds = []struct{ kind, label string }{
	{"local_hit", "local hit"},
	{"peer", "from a peer"},
	{"origin", "from the origin"},
	{"stale", "stale"},
	{"collapsed", "collapsed (joined a download)"},
	{"failed", "failed"},
	{"refused", "refused"},
	{"other", "other"},
}

// statusKindOf is the page's kind of the requests of a requests_total
// series (a CacheStatus's Label and a source): a miss is told apart by
// where its body came from.
func statusKindOf(label, source string) string {
	switch label {
	case "hit":
		return "local_hit"
	case "stale", "collapsed":
		return label
	case "refused", "redirect":
		// A redirect to https serves nothing either.
		return "refused"
	case "miss":
		switch {
		case source == proxy.SourceOrigin:
			return "origin"
		case source == proxy.SourceNone:
			return "failed"
		case strings.HasPrefix(source, "peer-l"):
			return "peer"
		}
	}
	return "other"
}

func statusRequestsOf(cells []requestCount) statusRequests {
	rs := statusRequests{ByStatusSource: cells}
	if rs.ByStatusSource == nil {
		rs.ByStatusSource = []requestCount{}
	}
	counts := map[string]uint64{}
	for _, c := range cells {
		counts[statusKindOf(c.CacheStatus, c.Source)] += c.Count
		rs.Total += c.Count
	}
	rs.Answered = rs.Total - counts["refused"]
	if rs.Answered > 0 {
		rs.HitRatio = float64(counts["local_hit"]+counts["peer"]+counts["stale"]+counts["collapsed"]) / float64(rs.Answered)
	}
	for _, k := range statusKinds {
		sk := statusKind{Kind: k.kind, Count: counts[k.kind]}
		if rs.Total > 0 {
			sk.Share = float64(sk.Count) / float64(rs.Total)
		}
		rs.Kinds = append(rs.Kinds, sk)
	}
	return rs
}

// document gathers the page's data.
func (s *StatusPage) document(now time.Time) *statusDoc {
	recent := s.Recent
	if recent <= 0 {
		recent = defaultStatusRecent
	}
	st := adminStatus{Levels: []adminLevel{}, Caches: adminCacheStats(), RecentFetches: adminLastFetches()}
	st.setNode(s.app)
	st.RecentFetches = st.RecentFetches[:min(len(st.RecentFetches), recent)]
	if !s.ShowQueries {
		for i := range st.RecentFetches {
			st.RecentFetches[i].URL = withoutQuery(st.RecentFetches[i].URL)
		}
	}
	doc := &statusDoc{Generated: now, adminStatus: st, Requests: statusRequestsOf(requestCounts())}
	if st.Node != nil && st.Node.Started != nil {
		doc.UptimeSeconds = math.Round(now.Sub(*st.Node.Started).Seconds())
	}
	objs := []adminObject{}
	for _, c := range runningCaches() {
		objs = append(objs, adminRecentObjects(c, recent)...)
	}
	slices.SortStableFunc(objs, func(a, b adminObject) int { return cmp.Compare(statusUnix(b.LastUsed), statusUnix(a.LastUsed)) })
	doc.RecentObjects = objs[:min(len(objs), recent)]
	for i := range doc.RecentObjects {
		// Clients choose these: cut them as recordFetch does, so that
		// the page stays small whatever was asked for.
		o := &doc.RecentObjects[i]
		if !s.ShowQueries {
			o.URL = withoutQuery(o.URL)
		}
		if len(o.URL) > recentFetchURLMax {
			o.URL = o.URL[:recentFetchURLMax]
		}
	}
	return doc
}

// withoutQuery is a URL as the status page shows it by default: up to its
// query string, with "?…" in place of a query it had.
func withoutQuery(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[:i] + "?…"
	}
	return u
}

func statusUnix(t *time.Time) int64 {
	if t == nil {
		return math.MinInt64
	}
	return t.UnixNano()
}

// The HTML page.

//go:embed statuspage.html
var statusPageHTML string

var statusPageTemplate = template.Must(template.New("statuspage.html").Funcs(template.FuncMap{
	"bytes": statusBytes,
	"num":   func(n any) string { return humanize.Comma(statusInt(n)) },
	"pct":   func(f float64) string { return strconv.FormatFloat(100*f, 'f', 1, 64) + "%" },
	"clip":  statusClip,
	"clusterSize": func(logSize float64) string {
		if logSize <= 0 {
			return "1"
		}
		return "≈" + humanize.Comma(int64(math.Round(math.Exp2(logSize))))
	},
}).Parse(statusPageHTML))

// statusView is what the template gets: the data, and the nonce of this
// response's inline style and script.
type statusView struct {
	*statusDoc
	Nonce string
}

// Label names a request kind.
func (statusView) Label(kind string) string {
	for _, k := range statusKinds {
		if k.kind == kind {
			return k.label
		}
	}
	return kind
}

// Ago says how long before the page was generated t was: "3m12s ago".
// t is a time.Time or *time.Time; nil or zero gives "–".
func (v statusView) Ago(t any) string {
	tt, ok := statusTime(t)
	if !ok {
		return "–"
	}
	d := v.Generated.Sub(tt)
	if d < 0 {
		return "in " + statusDuration(-d)
	}
	return statusDuration(d) + " ago"
}

// Until says how long after the page was generated t is: "in 11h59m",
// or "expired 2m ago".
func (v statusView) Until(t any) string {
	tt, ok := statusTime(t)
	if !ok {
		return "–"
	}
	d := tt.Sub(v.Generated)
	if d < 0 {
		return "expired " + statusDuration(-d) + " ago"
	}
	return "in " + statusDuration(d)
}

// Uptime is the node's uptime, or "–".
func (v statusView) Uptime() string {
	if v.Node == nil || v.Node.Started == nil {
		return "–"
	}
	return statusDuration(v.Generated.Sub(*v.Node.Started))
}

func statusTime(t any) (time.Time, bool) {
	switch t := t.(type) {
	case time.Time:
		return t, !t.IsZero()
	case *time.Time:
		if t != nil {
			return *t, !t.IsZero()
		}
	}
	return time.Time{}, false
}

// statusDuration rounds d to what a person wants to read: 45s, 3m12s,
// 5h03m, 2d4h.
func statusDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd%dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

func statusBytes(n any) string {
	v := statusInt(n)
	if v < 0 {
		return "–"
	}
	return humanize.IBytes(uint64(v))
}

func statusInt(n any) int64 {
	switch n := n.(type) {
	case int:
		return int64(n)
	case int64:
		return n
	case uint64:
		return int64(min(n, math.MaxInt64))
	}
	return 0
}

// statusClip shortens s to at most 200 runes for display (the title
// attribute keeps it whole).
func statusClip(s string) string {
	const most = 200
	if len(s) <= most {
		return s
	}
	r := []rune(s)
	if len(r) <= most {
		return s
	}
	return string(r[:most-1]) + "…"
}

// Caddyfile.

// Interface guards.
var (
	_ caddy.Provisioner           = (*StatusPage)(nil)
	_ caddy.Validator             = (*StatusPage)(nil)
	_ caddyhttp.MiddlewareHandler = (*StatusPage)(nil)
	_ caddyfile.Unmarshaler       = (*StatusPage)(nil)
)
