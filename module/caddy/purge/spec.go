package purge

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/coralcdn/coral/coralname"
)

const (
	// Kind is the coraldht app message kind of a purge between proxies
	// (coraldht/PROTOCOL.md lists the kinds in use).
	Kind uint8 = 1

	// batch is how many keys a store walk collects under the store's
	// lock at a time.
	batch = 1024
	// PendingWait bounds how long an exact purge waits for a download of
	// the URL that has not reached the cache yet.
	PendingWait = 5 * time.Second
	// DefaultTimeout and MaxTimeout bound the network phase.
	DefaultTimeout = 10 * time.Second
	MaxTimeout     = 5 * time.Minute
	// parallel is how many peers are asked at once.
	parallel = 32
	// URLMax bounds the URL given.
	URLMax = 8192
	// peerMaxTime bounds one purge run for another proxy.
	peerMaxTime = 10 * time.Minute
)

// Spec is what to purge: one key, or every URL under a normalized prefix.
type Spec struct {
	Prefix bool
	Key    string // exact: the cache key (40 hex digits)
	Norm   string // the normalized URL or prefix ("//host[:port]/path[?query]"); for an exact purge from a peer, ""
}

// ErrURL is the cause of a 400 for the URL of a purge.
var ErrURL = errors.New("coral purge: url must be an absolute http(s) URL, Coralized (http://www.example.com.nyud.net/a.jpg) or the origin's (http://www.example.com/a.jpg)")

// ParseURL turns the URL of a purge into what it names, with the alias
// zones of the running proxies to recognize Coralized URLs.
func ParseURL(raw string, prefix bool, zones []string) (Spec, error) {
	bad := func(format string, args ...any) (Spec, error) {
		return Spec{}, fmt.Errorf("%w: %s", ErrURL, fmt.Sprintf(format, args...))
	}
	switch {
	case raw == "":
		return bad("missing (url=)")
	case len(raw) > URLMax:
		return bad("longer than %d bytes", URLMax)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return bad("%v", err)
	}
	scheme := strings.ToLower(u.Scheme) // url.Parse allows ASCII only
	switch {
	case u.Opaque != "":
		return bad("opaque URL %s", quote(raw))
	case scheme != "http" && scheme != "https":
		return bad("scheme %s", quote(u.Scheme))
	case u.User != nil:
		return bad("user information in the URL")
	case u.Host == "":
		return bad("no host")
	case strings.HasPrefix(u.Host, "["):
		return bad("IPv6 origins cannot be Coralized")
	}
	o, err := purgeOrigin(u, zones)
	if err != nil {
		return bad("%v", err)
	}
	spec := Spec{Prefix: prefix, Norm: coralname.NormalizeURL("http", o.Host, o.Port, u.EscapedPath(), u.RawQuery)}
	if !prefix {
		spec.Key = coralname.CacheKey("http", o.Host, o.Port, u.EscapedPath(), u.RawQuery)
	}
	return spec, nil
}

// purgeOrigin is the origin u names: through a Coralized host of one of
// zones (its own port, if any, is a proxy's), else u's own host and port,
// which must be an origin a Coralized URL can name: the same rules.
func purgeOrigin(u *url.URL, zones []string) (coralname.Origin, error) {
	for _, z := range zones {
		o, err := coralname.ParseHost(u.Host, z)
		if errors.Is(err, coralname.ErrNotCoralized) || errors.Is(err, coralname.ErrBadZone) {
			continue
		}
		if err != nil {
			return o, fmt.Errorf("coral_proxy: %v", err)
		}
		return o, nil
	}
	port, ok := coralname.URLPort(u)
	if !ok {
		return coralname.Origin{}, fmt.Errorf("port %s", quote(u.Port()))
	}
	zone := "coral.invalid"
	if len(zones) > 0 {
		zone = zones[0]
	}
	name := strings.TrimSuffix(u.Hostname(), ".")
	o, err := coralname.ParseHost(coralname.Coralize(coralname.Origin{Host: name, Port: port}, zone), zone)
	if err != nil {
		var e *coralname.Error
		if errors.As(err, &e) {
			return o, fmt.Errorf("origin host %s: %v", quote(u.Hostname()), e.Err)
		}
		return o, fmt.Errorf("origin host %s: %v", quote(u.Hostname()), err)
	}
	return o, nil
}

// quote is s quoted for an error message, cut to 200 bytes.
func quote(s string) string {
	const max = 200
	if len(s) > max {
		s = s[:max] + "…"
	}
	return fmt.Sprintf("%q", s)
}

// StoredNorm is the normalized form (coralname.NormalizeURL) of a stored
// object's URL (Extra["url"], the origin URL it was fetched as), and
// whether it parses; its SHA-1 is the key of the URL's entry.
func StoredNorm(raw string) (string, bool) {
	if raw == "" {
		return "", false
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return "", false
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" {
		return "", false
	}
	port := 0
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil {
			return "", false
		}
		if n != coralname.DefaultPort(scheme) {
			port = n
		}
	}
	return coralname.NormalizeURL("http", u.Hostname(), port, u.EscapedPath(), u.RawQuery), true
}

// KeyOfNorm is the cache key of a normalized URL (coralname.CacheKey's
// hash).
func KeyOfNorm(norm string) string {
	sum := sha1.Sum([]byte(norm))
	return hex.EncodeToString(sum[:])
}

// Query is a purge's parameters: URL, Prefix, Mode (network=: "",
// "references", "known" or "all") and Timeout.
type Query struct {
	URL     string
	Prefix  bool
	Mode    string
	Timeout time.Duration
}

// ParseQuery reads a purge's parameters from its form, refusing unknown
// and repeated ones.
func ParseQuery(r *http.Request) (Query, error) {
	q := Query{Timeout: DefaultTimeout}
	if err := r.ParseForm(); err != nil {
		return q, fmt.Errorf("coral purge: parameters: %v", err)
	}
	param := func(name string) (string, error) {
		vs := r.Form[name]
		if len(vs) > 1 {
			return "", fmt.Errorf("coral purge: %s given %d times", name, len(vs))
		}
		if len(vs) == 0 {
			return "", nil
		}
		return vs[0], nil
	}
	for name := range r.Form {
		switch name {
		case "url", "prefix", "network", "timeout":
		default:
			return q, fmt.Errorf("coral purge: unknown parameter %q (url, prefix, network, timeout)", name)
		}
	}
	var err error
	if q.URL, err = param("url"); err != nil {
		return q, err
	}
	if q.Prefix, err = boolParam(param("prefix")); err != nil {
		return q, fmt.Errorf("coral purge: prefix: %v", err)
	}
	netParam, err := param("network")
	if err != nil {
		return q, err
	}
	switch strings.ToLower(netParam) {
	case "", "0", "false":
	case "1", "true":
		q.Mode = "references"
		if q.Prefix {
			q.Mode = "known"
		}
	case "all":
		q.Mode = "all"
	default:
		return q, fmt.Errorf("coral purge: network %q: want 1 or all", netParam)
	}
	if v, err := param("timeout"); err != nil {
		return q, err
	} else if v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > MaxTimeout {
			return q, fmt.Errorf("coral purge: timeout %q: want a duration up to %v", v, MaxTimeout)
		}
		q.Timeout = d
	}
	return q, nil
}

// boolParam parses an optional boolean parameter ("" is false).
func boolParam(v string, err error) (bool, error) {
	if err != nil || v == "" {
		return false, err
	}
	return strconv.ParseBool(v)
}

// Response is the answer of POST /coral/purge.
type Response struct {
	URL        string `json:"url"`        // as given
	Normalized string `json:"normalized"` // what is matched: "//host[:port]/path[?query]"
	Key        string `json:"key,omitempty"`
	Prefix     bool   `json:"prefix"`
	// Local is what this Caddy's caches did; Network, with network=,
	// what the other proxies did.
	Local   LocalResult    `json:"local"`
	Network *NetworkResult `json:"network,omitempty"`
	// DurationMS is the time the whole purge took.
	DurationMS float64 `json:"duration_ms"`
}
