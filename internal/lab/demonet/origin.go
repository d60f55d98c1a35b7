package demonet

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// Page is one resource of the demo site.
type Page struct {
	Path         string
	ContentType  string
	CacheControl string
	Body         []byte
	ETag         string
	// SetCookie, if set, is sent as a Set-Cookie header (the proxies must
	// strip it).
	SetCookie string
}

// siteModTime is the Last-Modified of every page: fixed, so revalidation
// with If-Modified-Since works and every run serves the same bytes.
var siteModTime = time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)

// Site returns the demo site's pages by path: an index page with three
// embedded images, an about page, and a news page that goes stale after
// five seconds. Everything is generated deterministically, so every run
// (and every test) sees the same bytes.
func Site() map[string]*Page {
	siteOnce.Do(func() { site = buildSite() })
	return site
}

var (
	siteOnce sync.Once
	site     map[string]*Page
)

// The site's paths.
const (
	PathIndex = "/"
	PathAbout = "/about.html"
	PathNews  = "/news.html"
	PathPNG1  = "/img/coral-1.png"
	PathPNG2  = "/img/coral-2.png"
	PathJPEG  = "/img/reef.jpg"
)

func buildSite() map[string]*Page {
	pages := map[string]*Page{}
	add := func(p *Page) {
		sum := sha1.Sum(p.Body)
		p.ETag = `"` + hex.EncodeToString(sum[:8]) + `"`
		pages[p.Path] = p
	}
	png1, png2, jpg := makePNG(1, 240, 160), makePNG(2, 200, 200), makeJPEG(3, 640, 400)
	add(&Page{Path: PathIndex, ContentType: "text/html; charset=utf-8", CacheControl: "public, max-age=60",
		SetCookie: "demo_session=s3cr3t; Path=/; HttpOnly", Body: []byte(indexHTML(len(png1), len(png2), len(jpg)))})
	add(&Page{Path: PathAbout, ContentType: "text/html; charset=utf-8", CacheControl: "public, max-age=3600", Body: []byte(aboutHTML)})
	add(&Page{Path: PathNews, ContentType: "text/html; charset=utf-8", CacheControl: "public, max-age=5", Body: []byte(newsHTML)})
	add(&Page{Path: PathPNG1, ContentType: "image/png", CacheControl: "public, max-age=86400", Body: png1})
	add(&Page{Path: PathPNG2, ContentType: "image/png", CacheControl: "public, max-age=86400", Body: png2})
	add(&Page{Path: PathJPEG, ContentType: "image/jpeg", CacheControl: "public, max-age=86400", Body: jpg})
	return pages
}

func indexHTML(png1, png2, jpg int) string {
	return fmt.Sprintf(`<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Coral demo origin</title></head>
<body>
<h1>A small site behind Coral</h1>
<p>This page comes from the demo's origin server. Fetched through a
Coralized name, it is served by a nearby Coral proxy, from its own cache,
from a peer's cache, or from here, once.</p>
<p><img src="/img/coral-1.png" width="240" height="160" alt="coral, %d bytes">
<img src="/img/coral-2.png" width="200" height="200" alt="coral, %d bytes"></p>
<p><img src="/img/reef.jpg" width="640" height="400" alt="reef, %d bytes"></p>
<p>The origin sets a cookie on this page; no proxy passes it on.</p>
<ul><li><a href="/about.html">About</a></li><li><a href="/news.html">News</a> (fresh for 5 s)</li></ul>
</body>
</html>
`, png1, png2, jpg)
}

const aboutHTML = `<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>About</title></head>
<body><h1>About</h1><p>Relative links stay Coralized because the host name is.</p>
<p><a href="/">Home</a></p></body>
</html>
`

const newsHTML = `<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>News</title></head>
<body><h1>News</h1><p>This page is fresh for five seconds. Stop the origin and the
proxies keep serving their stale copy.</p><p><a href="/">Home</a></p></body>
</html>
`

// makePNG draws a deterministic coral-coloured pattern with noise, so the
// image does not compress to nothing (some tens of KB).
func makePNG(seed uint64, w, h int) []byte {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	paint(img, seed)
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		panic(err)
	}
	return b.Bytes()
}

func makeJPEG(seed uint64, w, h int) []byte {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	paint(img, seed)
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: 80}); err != nil {
		panic(err)
	}
	return b.Bytes()
}

func paint(img *image.RGBA, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x636f72616c))
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			fx, fy := float64(x)/float64(b.Dx()), float64(y)/float64(b.Dy())
			wave := math.Sin(fx*9+float64(seed)) * math.Cos(fy*7)
			n := func() float64 { return float64(rng.IntN(16)) }
			img.SetRGBA(x, y, color.RGBA{
				R: uint8(min(255, 200+40*wave+n())),
				G: uint8(min(255, 90+60*fy+20*wave+n())),
				B: uint8(min(255, 80+120*fx+n())),
				A: 255,
			})
		}
	}
}

// OriginRequest is one request the origin received.
type OriginRequest struct {
	At     time.Time
	Remote string
	Method string
	URI    string
	Header http.Header
	Status int
}

// Origin is the demo's origin web server: an in-process net/http server
// serving Site on one address, port 80. It records every request, so
// tests can count origin fetches and check what the proxies sent.
type Origin struct {
	Addr netip.AddrPort

	logw io.Writer // access log; nil for none

	mu       sync.Mutex
	srv      *http.Server
	done     chan struct{}
	requests []OriginRequest
}

// NewOrigin returns an origin for addr, not yet serving. Its access log
// goes to logw (nil: none).
func NewOrigin(addr netip.AddrPort, logw io.Writer) *Origin {
	return &Origin{Addr: addr, logw: logw}
}

// Start serves the site until Stop. Starting a running origin is an error.
func (o *Origin) Start() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.srv != nil {
		return errors.New("demonet: origin already running")
	}
	ln, err := net.Listen("tcp", o.Addr.String())
	if err != nil {
		return fmt.Errorf("origin: %w", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(o.serve), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	o.srv, o.done = srv, done
	return nil
}

// Stop closes the listener and every connection at once, as if the
// machine went away; the proxies then see connections refused.
func (o *Origin) Stop() error {
	o.mu.Lock()
	srv, done := o.srv, o.done
	o.srv = nil
	o.mu.Unlock()
	if srv == nil {
		return nil
	}
	err := srv.Close()
	<-done
	return err
}

// Running reports whether the origin is serving.
func (o *Origin) Running() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.srv != nil
}

// Requests returns every request received so far.
func (o *Origin) Requests() []OriginRequest {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.requests)
}

// RequestsFor returns the requests whose request URI is uri (path and
// query, as sent).
func (o *Origin) RequestsFor(uri string) []OriginRequest {
	var out []OriginRequest
	for _, r := range o.Requests() {
		if r.URI == uri {
			out = append(out, r)
		}
	}
	return out
}

func (o *Origin) serve(w http.ResponseWriter, r *http.Request) {
	status := o.respond(w, r)
	rec := OriginRequest{At: time.Now(), Remote: r.RemoteAddr, Method: r.Method, URI: r.RequestURI, Header: r.Header.Clone(), Status: status}
	o.mu.Lock()
	o.requests = append(o.requests, rec)
	o.mu.Unlock()
	if o.logw != nil {
		fmt.Fprintf(o.logw, "%s %s %s %s %d cookie=%q ua=%q via=%q xff=%q\n", rec.At.Format(time.RFC3339Nano), rec.Remote,
			rec.Method, rec.URI, status, r.Header.Get("Cookie"), r.UserAgent(), r.Header.Get("Via"), r.Header.Get("X-Forwarded-For"))
	}
}

// respond serves one request and returns the status it sent.
func (o *Origin) respond(w http.ResponseWriter, r *http.Request) int {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return http.StatusMethodNotAllowed
	}
	p := Site()[r.URL.Path]
	if p == nil {
		w.Header().Set("Cache-Control", "public, max-age=60")
		http.NotFound(w, r)
		return http.StatusNotFound
	}
	h := w.Header()
	h.Set("Content-Type", p.ContentType)
	h.Set("Cache-Control", p.CacheControl)
	h.Set("ETag", p.ETag)
	if p.SetCookie != "" {
		h.Set("Set-Cookie", p.SetCookie)
	}
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	http.ServeContent(sw, r, "", siteModTime, bytes.NewReader(p.Body))
	return sw.status
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}
