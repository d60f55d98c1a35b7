package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coralcdn/coral/coralname"
	"github.com/coralcdn/coral/eval/internal/evalrun"
	"github.com/coralcdn/coral/internal/lab/labconf"
	"github.com/coralcdn/coral/internal/lab/proc"
)

// Fixed parts of the set-up.
const (
	zone      = "nyud.test"
	dhtPort   = 4000
	adminPort = 2019
	// objPrefix is the origin's path for the proxy-memory objects.
	objPrefix = "/obj/"
	objBytes  = 1024
	// respondSnippet is the Caddyfile snippet of the respond sites: one
	// respond directive per object, its body the origin's bytes.
	respondSnippet = "respond_bodies"
)

// startWithin bounds the wait for a server to answer after it starts. The
// wait ends as soon as it answers, or as soon as it exits; the bound only
// turns a server that never answers into an error, so it is generous: on
// a loaded machine, with -sizes up to 64 MiB (whose bodies the respond
// sites carry in the Caddyfile), Caddy once took longer than the 20 s
// this used to be.
const startWithin = 3 * time.Minute

// lastModified is the origin's Last-Modified, and the files' modification
// time, so both kinds of response carry the same one.
var lastModified = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// target is one server under test.
type target struct {
	name   string // coral, file, respond, respond-head, nginx; over TLS coral-tls, file-tls, respond-tls; the A/B's coral-old
	server string // what answers: coral (coral_proxy), file (file_server), respond (Caddy's respond), nginx
	addr   netip.AddrPort
	// host is the name the target is asked for. Over HTTP it is the Host
	// header ("": the address). Over TLS it is the URL's host, and so the
	// SNI and, with the port, the Host header, as wrk sends them.
	host  string
	tls   bool
	roots *x509.CertPool // over TLS: Caddy's local CA, read once Caddy has made it
	srv   *proc.Process
}

func (t *target) url(path string) string {
	if t.tls {
		return "https://" + t.hostHeader() + path
	}
	return "http://" + t.addr.String() + path
}

// hostHeader is the Host the target is asked for.
func (t *target) hostHeader() string {
	switch {
	case t.tls:
		return net.JoinHostPort(t.host, strconv.Itoa(int(t.addr.Port())))
	case t.host != "":
		return t.host
	}
	return t.addr.String()
}

// bench is the running set-up: the origin, Caddy, nginx, the files.
type bench struct {
	p       params
	dir     string
	origin  *origin
	caddy   *proc.Process
	nginx   *proc.Process
	base    *proc.Process // the -baseline Caddy (nil: no A/B)
	targets []*target     // coral, file, respond[, coral-tls, file-tls, respond-tls][, nginx][, coral-old]
	files   string        // file_server's root
	// wrkScript is the Lua script that points wrk at Caddy's address for
	// the TLS targets' names (tls.go); "" without TLS.
	wrkScript string

	caddyfile     string
	baseCaddyfile string // the -baseline Caddy's: caddyfile's HTTP sites on its address
	nginxConf     string
	commands      []string
}

func newBench(p params) (*bench, error) {
	var addrs []netip.Addr
	for _, s := range []string{p.OriginAddr, p.CaddyAddr, p.NginxAddr, p.BaselineAddr} {
		a, err := netip.ParseAddr(s)
		if err != nil || !a.Is4() || !a.IsLoopback() {
			return nil, fmt.Errorf("address %q: want an IPv4 loopback address (127.0.0.0/8)", s)
		}
		for _, other := range addrs {
			if a == other {
				return nil, errors.New("-origin-addr, -caddy-addr, -nginx-addr and -baseline-addr must differ")
			}
		}
		addrs = append(addrs, a)
	}
	// Caddy's sites: coral_proxy on Port, file_server on Port+1, respond on
	// Port+4, respond with coral_proxy's head on Port+6; over TLS the first
	// three on Port+2, Port+3 and Port+5.
	lastPort := p.Port + 6
	if p.Port < 1 || lastPort > 65535 || (adminPort >= p.Port && adminPort <= lastPort) {
		return nil, fmt.Errorf("-port %d: want 1..%d, Caddy's ports %d..%d clear of the admin port %d", p.Port, 65535-(lastPort-p.Port), p.Port, lastPort, adminPort)
	}
	dir, err := os.MkdirTemp("", "coral-httpbench-")
	if err != nil {
		return nil, fmt.Errorf("temporary directory: %w", err)
	}
	b := &bench{p: p, dir: dir, files: filepath.Join(dir, "files")}
	if err := b.setUp(addrs); err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

// setUp writes the files, the configurations and, over TLS, wrk's script,
// and lays out the targets: the origin on addrs[0], Caddy on addrs[1],
// nginx on addrs[2], the -baseline Caddy on addrs[3].
func (b *bench) setUp(addrs []netip.Addr) error {
	p := b.p
	b.origin = newOrigin(p.Sizes)
	if err := os.Mkdir(b.files, 0o755); err != nil {
		return err
	}
	for _, size := range p.Sizes {
		path := filepath.Join(b.files, sizeName(size))
		if err := os.WriteFile(path, b.origin.bodies["/"+sizeName(size)], 0o644); err != nil {
			return err
		}
		if err := os.Chtimes(path, lastModified, lastModified); err != nil {
			return err
		}
	}
	if p.LargeSize > 0 {
		var err error
		if b.origin.large, err = writeLargeObject(b.files, p.LargeSize); err != nil {
			return fmt.Errorf("the large object: %w", err)
		}
	}
	port := uint16(p.Port)
	b.origin.addr = netip.AddrPortFrom(addrs[0], port)
	origin := coralname.Origin{Host: addrs[0].String(), Port: p.Port}
	b.targets = []*target{
		{name: "coral", server: "coral", addr: netip.AddrPortFrom(addrs[1], port), host: coralname.Coralize(origin, zone)},
		{name: "file", server: "file", addr: netip.AddrPortFrom(addrs[1], port+1)},
		{name: "respond", server: "respond", addr: netip.AddrPortFrom(addrs[1], port+4)},
		{name: "respond-head", server: "respond", addr: netip.AddrPortFrom(addrs[1], port+6)},
	}
	if p.TLS {
		tlsTargets, err := b.tlsTargets(origin, addrs[1])
		if err != nil {
			return err
		}
		b.targets = append(b.targets, tlsTargets...)
	}
	var err error
	if b.caddyfile, err = b.caddyfileText(addrs[1], b.dir, true); err != nil {
		return err
	}
	if err := labconf.WriteFile(filepath.Join(b.dir, "Caddyfile"), b.caddyfile); err != nil {
		return fmt.Errorf("writing the Caddyfile: %w", err)
	}
	if p.Nginx != "" {
		b.targets = append(b.targets, &target{name: "nginx", server: "nginx", addr: netip.AddrPortFrom(addrs[2], port)})
		b.nginxConf = b.nginxConfText(addrs[2])
		for _, d := range []string{"nginx", "nginx/tmp", "nginx/cache"} {
			if err := os.Mkdir(filepath.Join(b.dir, d), 0o755); err != nil {
				return err
			}
		}
		if err := os.WriteFile(filepath.Join(b.dir, "nginx", "nginx.conf"), []byte(b.nginxConf), 0o644); err != nil {
			return fmt.Errorf("nginx.conf: %w", err)
		}
	}
	if p.Baseline != "" {
		return b.setUpBaseline(addrs[3], origin)
	}
	return nil
}

func (b *bench) target(name string) *target {
	for _, t := range b.targets {
		if t.name == name {
			return t
		}
	}
	return nil
}

// caddyfileText is the configuration of a Caddy on addr whose data lives in
// dir: the coral app, coral_proxy and file_server over HTTP, no access logs
// (Caddy's default). The Caddy under test (measured) also has the respond
// site and, with -tls, the TLS sites (addTLSSites); the -baseline Caddy
// has only coral_proxy and file_server over HTTP.
func (b *bench) caddyfileText(addr netip.Addr, dir string, measured bool) (string, error) {
	admin := netip.AddrPortFrom(addr, adminPort)
	conf := labconf.Caddy{
		Comment:      "One Caddy for both: coral_proxy (under test) and file_server (the\nbaseline) serving the same bytes. No access logs, no TLS.",
		Admin:        admin,
		AdminOrigins: []string{admin.String()},
		HTTPSOff:     true,
		Coral:        labconf.Node{Listen: netip.AddrPortFrom(addr, dhtPort)},
		Sites: []labconf.Directive{
			labconf.D(fmt.Sprintf("http://:%d", b.p.Port)).With(
				labconf.D("bind", addr),
				b.proxyDirective(dir),
			).Commented("coral_proxy: the origin's objects, from the on-disk cache once fetched.\nRequests carry Host " + b.target("coral").host + "."),
			labconf.D(fmt.Sprintf("http://:%d", b.p.Port+1)).With(
				labconf.D("bind", addr),
				labconf.D("root", "*", b.files),
				labconf.D("file_server"),
			).Commented("file_server: the same bytes from files."),
		},
	}
	if !measured {
		return conf.String(), nil
	}
	snippet, err := b.respondSnippetText()
	if err != nil {
		return "", err
	}
	conf.Comment = "One Caddy for all: coral_proxy (under test), file_server and respond\n" +
		"(the baselines) serving the same bytes. No access logs, no TLS."
	if b.p.TLS {
		conf.Comment = "One Caddy for all: coral_proxy (under test), file_server and respond\n" +
			"(the baselines) serving the same bytes, over HTTP and over TLS. No access logs."
	}
	conf.Sites = append([]labconf.Directive{snippet}, conf.Sites...)
	conf.Sites = append(conf.Sites,
		labconf.D(fmt.Sprintf("http://:%d", b.target("respond").addr.Port())).With(
			labconf.D("bind", addr),
			labconf.D("import", respondSnippet),
		).Commented("respond: the same bytes from the configuration, Caddy's floor."),
		b.respondHeadSite(addr))
	if b.p.TLS {
		b.addTLSSites(&conf, addr)
	}
	return conf.String(), nil
}

// respondHeadSite is the respond-head site: respond with the same bytes
// and, set by Caddy's header directive, the header fields of a
// coral_proxy hit of them, value for value (the origin's Content-Type,
// Cache-Control, Last-Modified and Content-Length, a Date, and Via,
// Cache-Status, Age and Accept-Ranges): the floor of the same response,
// where respond's map holds two fields (Server, Content-Type). coral_proxy
// against it leaves out what any handler pays for those fields (the
// response's map outgrowing a small Go map, net/http cloning, sorting
// and writing them), and so measures the handler's own work.
// responseProblems checks that the two heads have the same fields.
func (b *bench) respondHeadSite(addr netip.Addr) labconf.Directive {
	// The origin's Date when coral_proxy fetched the object: a fixed
	// time, as a stored response's is.
	date := `"` + time.Now().UTC().Format(http.TimeFormat) + `"`
	site := labconf.D(fmt.Sprintf("http://:%d", b.target("respond-head").addr.Port())).With(
		labconf.D("bind", addr),
		labconf.D("header").With(
			labconf.D("Content-Type", "application/octet-stream"),
			labconf.D("Cache-Control", `"public, max-age=86400"`),
			labconf.D("Last-Modified", `"`+lastModified.Format(http.TimeFormat)+`"`),
			labconf.D("Date", date),
			labconf.D("Via", `"1.1 coral"`),
			labconf.D("Cache-Status", "`"+`coral; hit; detail="local"`+"`"),
			labconf.D("Age", 0),
			labconf.D("Accept-Ranges", "bytes"),
		),
	)
	for _, size := range b.p.Sizes {
		site.Block = append(site.Block, labconf.D("header", "/"+sizeName(size), "Content-Length", len(b.origin.bodies["/"+sizeName(size)])))
	}
	site.Block = append(site.Block, labconf.D("import", respondSnippet))
	return site.Commented("respond-head: the same bytes with the header fields of a coral_proxy hit\n(set by the header directive): the floor of the same response.")
}

// respondSnippetText is the snippet the respond sites import: for each
// object, respond with the origin's bytes as a backtick-quoted token (the
// Caddyfile takes it verbatim: no escapes, no placeholders, as the bytes
// are letters and digits) and status 200. Any other path gets Caddy's
// empty 200.
func (b *bench) respondSnippetText() (labconf.Directive, error) {
	var lines []labconf.Directive
	for _, size := range b.p.Sizes {
		path := "/" + sizeName(size)
		tok, err := caddyfileToken(b.origin.bodies[path])
		if err != nil {
			return labconf.Directive{}, fmt.Errorf("respond body %s: %w", path, err)
		}
		lines = append(lines, labconf.D("respond", path, tok, 200))
	}
	return labconf.D("(" + respondSnippet + ")").With(lines...).
		Commented("The origin's objects, answered by Caddy's respond (static_response)."), nil
}

// caddyfileToken quotes body as one Caddyfile token with backticks. labconf
// writes arguments as they are, so the quoting is done here; it refuses
// bytes that a backtick token would not carry as themselves (a backtick
// ends it, braces start a placeholder, which respond would expand).
func caddyfileToken(body []byte) (string, error) {
	if len(body) == 0 {
		return "", errors.New("empty")
	}
	for i, c := range body {
		if !isAlnum(c) {
			return "", fmt.Errorf("byte %d is %q: only letters and digits go into the Caddyfile", i, c)
		}
	}
	return "`" + string(body) + "`", nil
}

func isAlnum(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// proxyDirective is coral_proxy's configuration, the same over HTTP and
// TLS: one cache directory, so one store (coral_proxy shares a store among
// the handlers that name its directory) and one cache key per object. Its
// cache is in dir.
func (b *bench) proxyDirective(dir string) labconf.Directive {
	px := labconf.Proxy{Zone: zone, CacheDir: filepath.Join(dir, "coral-cache"), CacheSize: "1GiB",
		AllowOrigins: []string{"127.0.0.0/8"},
		// The per-client limiter runs, as by default, but never
		// refuses: wrk is a single client.
		RateLimit: "1000000 1000000"}
	if b.p.LargeSize > proxyCacheBytes/8 {
		// max_object_size defaults to an eighth of cache_size.
		px.Extra = append(px.Extra, labconf.D("max_object_size", fmt.Sprintf("%dMiB", b.p.LargeSize>>20)))
	}
	return px.Directive()
}

// proxyCacheBytes is coral_proxy's cache_size, 1GiB.
const proxyCacheBytes = 1 << 30

// nginxConfText is nginx's configuration: proxy_cache in front of the
// origin, with sendfile as in the Debian package's nginx.conf, no access
// log, and keep-alive connections never closed by a request count (wrk
// keeps its connections; Caddy has no such limit). Debian's tcp_nopush on
// is left out: over loopback (MTU 65536) it holds back the last segment of
// a 100 KiB response until the client's delayed ACK, 40 ms, which caps
// nginx at about 900 req/s with 32 connections instead of some 15,000.
func (b *bench) nginxConfText(addr netip.Addr) string {
	user := ""
	if os.Geteuid() == 0 {
		// Workers would otherwise run as nobody, who cannot use the
		// temporary directory.
		user = "user root root;\n"
	}
	workers := "auto"
	if b.p.NginxWorkers > 0 {
		workers = strconv.Itoa(b.p.NginxWorkers)
	}
	d := filepath.Join(b.dir, "nginx")
	return fmt.Sprintf(`# nginx with proxy_cache in front of the origin.
%[1]sworker_processes %[2]s;
pid %[3]s/nginx.pid;
error_log %[3]s/error.log warn;
events {
	worker_connections 4096;
}
http {
	access_log off;
	sendfile on;
	keepalive_requests 1000000;
	client_body_temp_path %[3]s/tmp/body;
	proxy_temp_path %[3]s/tmp/proxy;
	fastcgi_temp_path %[3]s/tmp/fastcgi;
	uwsgi_temp_path %[3]s/tmp/uwsgi;
	scgi_temp_path %[3]s/tmp/scgi;
	proxy_cache_path %[3]s/cache levels=1:2 keys_zone=origin:16m max_size=1g inactive=1d use_temp_path=off;
	upstream origin {
		server %[4]v;
		keepalive 16;
	}
	server {
		listen %[5]v:%[6]d;
		location / {
			proxy_pass http://origin;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_cache origin;
			add_header X-Cache-Status $upstream_cache_status always;
		}
	}
}
`, user, workers, d, b.origin.addr, addr, b.p.Port)
}

// start runs the origin, Caddy and nginx, and waits until they answer.
func (b *bench) start(ctx context.Context) error {
	var tcp []netip.AddrPort
	for _, t := range b.targets {
		tcp = append(tcp, t.addr)
	}
	caddyAddrs := []netip.Addr{b.target("coral").addr.Addr()}
	if t := b.target("coral-old"); t != nil {
		caddyAddrs = append(caddyAddrs, t.addr.Addr())
	}
	for _, a := range caddyAddrs {
		tcp = append(tcp, netip.AddrPortFrom(a, adminPort), netip.AddrPortFrom(a, uint16(b.p.Port+1)))
	}
	for _, a := range tcp {
		ln, err := net.Listen("tcp", a.String())
		if err != nil {
			return fmt.Errorf("TCP %v is taken (another run?): %v", a, err)
		}
		ln.Close()
	}
	for _, a := range caddyAddrs {
		c, err := net.ListenPacket("udp", fmt.Sprintf("%v:%d", a, dhtPort))
		if err != nil {
			return fmt.Errorf("UDP %v:%d is taken (another run?): %v", a, dhtPort, err)
		}
		c.Close()
	}
	var err error
	if err := b.origin.start(); err != nil {
		return fmt.Errorf("origin: %w", err)
	}

	// Caddy's data and configuration directories go to the temporary
	// directory, not the user's.
	b.caddy, err = startServer("caddy", b.dir, labconf.CaddyArgv(b.p.Caddy, filepath.Join(b.dir, "Caddyfile")), labconf.CaddyEnv(b.dir))
	if err != nil {
		return err
	}
	b.commands = append(b.commands, shellJoin(b.caddy.Argv))
	for _, t := range b.targets {
		if t.server != "nginx" && t.name != "coral-old" {
			t.srv = b.caddy
		}
	}
	if err := evalrun.WaitFor(ctx, "Caddy to answer", startWithin, b.caddy.Exited, func() error {
		_, err := get(b.target("file"), "/"+sizeName(b.p.Sizes[0]))
		return err
	}); err != nil {
		return err
	}
	if b.p.TLS {
		if err := b.waitTLS(ctx); err != nil {
			return err
		}
	}
	if err := b.startBaseline(ctx); err != nil {
		return err
	}
	if t := b.target("nginx"); t != nil {
		d := filepath.Join(b.dir, "nginx")
		b.nginx, err = startServer("nginx", d, []string{b.p.Nginx, "-p", d, "-c", filepath.Join(d, "nginx.conf"), "-e", filepath.Join(d, "error.log"), "-g", "daemon off;"}, os.Environ())
		if err != nil {
			return err
		}
		b.commands = append(b.commands, shellJoin(b.nginx.Argv))
		t.srv = b.nginx
		if err := evalrun.WaitFor(ctx, "nginx to answer", startWithin, b.nginx.Exited, func() error {
			_, err := get(t, "/nonexistent")
			return err
		}); err != nil {
			if raw, rerr := os.ReadFile(filepath.Join(d, "error.log")); rerr == nil {
				err = fmt.Errorf("%w\nnginx's error.log:\n%s", err, raw)
			}
			return err
		}
	}
	return nil
}

// close stops everything start started and removes the files.
func (b *bench) close() {
	for _, s := range []*proc.Process{b.nginx, b.caddy, b.base} {
		if s != nil {
			_ = s.Stop(5 * time.Second)
		}
	}
	if b.origin != nil {
		b.origin.close()
	}
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
}

// alive reports an error if a server has exited.
func (b *bench) alive() error {
	for _, s := range []*proc.Process{b.caddy, b.nginx, b.base} {
		if s == nil {
			continue
		}
		if err := s.Exited(); err != nil {
			return err
		}
	}
	return nil
}

// --- the origin ------------------------------------------------------------

// origin serves the objects and counts the requests it gets.
type origin struct {
	addr     netip.AddrPort
	bodies   map[string][]byte // by path
	srv      *http.Server
	requests atomic.Int64 // for the benchmark objects, the large one included
	objects  atomic.Int64 // for objPrefix
	// large is the large object, served from its file (nil: none).
	large *largeObject
}

// bodyAlphabet is what the objects' bytes are drawn from: letters and
// digits, so that the respond sites can carry them in the Caddyfile.
const bodyAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// newOrigin makes the objects, the same in every run: pseudo-random letters
// and digits from a fixed seed.
func newOrigin(sizes []int) *origin {
	o := &origin{bodies: map[string][]byte{}}
	rng := rand.New(rand.NewChaCha8([32]byte{'c', 'o', 'r', 'a', 'l'}))
	for _, n := range sizes {
		body := make([]byte, n)
		for i := range body {
			body[i] = bodyAlphabet[rng.IntN(len(bodyAlphabet))]
		}
		o.bodies["/"+sizeName(n)] = body
	}
	return o
}

// elideBodies replaces, in a Caddyfile, every respond body (a backtick
// token of an object's bytes) with its size, path and SHA-256: the record
// of the configuration without the objects themselves.
func (o *origin) elideBodies(caddyfile string) string {
	for path, body := range o.bodies {
		sum := sha256.Sum256(body)
		caddyfile = strings.ReplaceAll(caddyfile, "`"+string(body)+"`",
			fmt.Sprintf("`<%d letters and digits: the origin's %s, sha256 %s>`", len(body), path, hex.EncodeToString(sum[:])))
	}
	return caddyfile
}

func (o *origin) start() error {
	ln, err := net.Listen("tcp", o.addr.String())
	if err != nil {
		return err
	}
	o.srv = &http.Server{Handler: o, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = o.srv.Serve(ln) }()
	return nil
}

func (o *origin) close() {
	if o.srv != nil {
		_ = o.srv.Close()
	}
}

func (o *origin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if o.large != nil && r.URL.Path == o.large.Path {
		o.requests.Add(1)
		o.large.serve(w, r)
		return
	}
	body, ok := o.bodies[r.URL.Path]
	switch {
	case ok:
		o.requests.Add(1)
	case strings.HasPrefix(r.URL.Path, objPrefix):
		o.objects.Add(1)
		n, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, objPrefix))
		if err != nil || n < 0 {
			http.NotFound(w, r)
			return
		}
		body = objectBody(n)
	default:
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Cache-Control", "public, max-age=86400")
	h.Set("Last-Modified", lastModified.Format(http.TimeFormat))
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}

// objectBody is the body of /obj/<n>: objBytes bytes that differ by n.
func objectBody(n int) []byte {
	b := bytes.Repeat([]byte{byte(n)}, objBytes)
	copy(b, strconv.Itoa(n))
	return b
}

// --- one request, counted on the wire ----------------------------------------

// response is one response as received, with its size on the wire.
type response struct {
	Status      int         `json:"status"`
	Header      http.Header `json:"header"`
	HeaderBytes int         `json:"header_bytes"` // status line and header, CRLFs included
	BodyBytes   int         `json:"body_bytes"`
	WireBytes   int         `json:"wire_bytes"`
	BodySHA256  string      `json:"body_sha256"`
	TLS         string      `json:"tls,omitempty"` // over TLS: version, cipher suite, certificate
	body        []byte
}

// countingConn counts the bytes read. With idle set, every read must
// make progress within idle: a stalled server fails the request, a slow
// one (a large body on a loaded machine) does not.
type countingConn struct {
	net.Conn
	n    int64
	idle time.Duration
}

func (c *countingConn) Read(p []byte) (int, error) {
	if c.idle > 0 {
		_ = c.Conn.SetReadDeadline(time.Now().Add(c.idle))
	}
	n, err := c.Conn.Read(p)
	c.n += int64(n)
	return n, err
}

// get sends the request wrk sends (GET, HTTP/1.1, Host, nothing else) on a
// new connection, over TLS for a TLS target, and reads one response,
// counting its bytes (over TLS, the bytes inside it, as wrk counts them).
func get(t *target, path string) (*response, error) {
	var body bytes.Buffer
	r, err := getTo(t, path, &body, 0)
	if err != nil {
		return nil, err
	}
	r.body = body.Bytes()
	return r, nil
}

// getTo is get with the body streamed to w instead of kept, for bodies
// too large to hold (the large object), hashed on the way. With idle > 0,
// the response may take as long as it needs as long as no read waits
// longer than idle; with 0, the whole exchange has 10 s.
func getTo(t *target, path string, w io.Writer, idle time.Duration) (*response, error) {
	conn, err := dial(t)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if idle > 0 {
		_ = conn.SetWriteDeadline(time.Now().Add(idle))
	} else {
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	}
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, t.hostHeader()); err != nil {
		return nil, err
	}
	cc := &countingConn{Conn: conn, idle: idle}
	br := bufio.NewReader(cc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, err
	}
	headerBytes := int(cc.n) - br.Buffered()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	r := &response{Status: resp.StatusCode, Header: resp.Header, HeaderBytes: headerBytes, BodyBytes: int(n),
		WireBytes: int(cc.n) - br.Buffered(), BodySHA256: hex.EncodeToString(h.Sum(nil))}
	if tc, ok := conn.(*tls.Conn); ok {
		r.TLS = tlsSummary(tc.ConnectionState())
	}
	return r, nil
}

// --- processes ------------------------------------------------------------------

// startServer starts a server (Caddy, nginx) in a process group of its own,
// so that it is stopped with its children (nginx's workers), its output in
// dir/NAME.log; it is killed if this process dies without cleaning up.
func startServer(name, dir string, argv, env []string) (*proc.Process, error) {
	return proc.Start(argv, proc.Options{Name: name, Dir: dir, Env: env, Log: filepath.Join(dir, name+".log"), TailLines: 200})
}

// --- CPU accounting --------------------------------------------------------

// cpuSnap is the CPU time used so far, in seconds.
type cpuSnap struct {
	caddy float64 // Caddy's process group
	nginx float64 // nginx's: master and workers
	base  float64 // the -baseline Caddy's
	self  float64 // this process: the origin, the checks
	busy  float64 // the whole machine, not idle
}

// serverCPU is the CPU time t's server used between c0 and c1.
func (b *bench) serverCPU(t *target, c0, c1 cpuSnap) float64 {
	switch t.srv {
	case b.caddy:
		return c1.caddy - c0.caddy
	case b.nginx:
		return c1.nginx - c0.nginx
	case b.base:
		return c1.base - c0.base
	}
	return 0
}

// servers is the CPU time of every server: the Caddys and nginx.
func (s cpuSnap) servers() float64 { return s.caddy + s.nginx + s.base }

func (b *bench) cpu() cpuSnap {
	var s cpuSnap
	groups := map[int]*float64{}
	if b.caddy != nil {
		groups[b.caddy.Pid()] = &s.caddy
	}
	if b.nginx != nil {
		groups[b.nginx.Pid()] = &s.nginx
	}
	if b.base != nil {
		groups[b.base.Pid()] = &s.base
	}
	groupCPU(groups)
	s.self = evalrun.SelfCPU()
	s.busy = evalrun.MachineBusy()
	return s
}

// groupCPU adds up the CPU time (user and system, all threads) of every
// live process in the given process groups.
func groupCPU(groups map[int]*float64) {
	if len(groups) == 0 {
		return
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		raw, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		pgrp, cpu, ok := evalrun.ParseStat(raw)
		if dst := groups[pgrp]; ok && dst != nil {
			*dst += cpu
		}
	}
}

// otherCPU is the CPU time, in seconds, used so far by everything but the
// Caddys, nginx and this process (evalrun.WaitQuiet).
func (b *bench) otherCPU() float64 {
	c := b.cpu()
	return c.busy - c.servers() - c.self
}

// vmRSS is a process's resident set size in bytes (0 if unknown).
func vmRSS(pid int) int64 { return procStatusBytes(pid, "VmRSS:") }

// procStatusBytes is a size field of /proc/PID/status (VmRSS:, VmHWM:)
// in bytes (0 if unknown).
func procStatusBytes(pid int, field string) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}
