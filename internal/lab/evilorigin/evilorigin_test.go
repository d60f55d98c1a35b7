package evilorigin

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/textproto"
	"strconv"
	"strings"
	"testing"
	"time"
)

func start(t *testing.T) *Server {
	t.Helper()
	s, err := Listen(netip.MustParseAddr("127.0.91.3"), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// exchange sends a GET of target with extra header lines and reads what
// comes back within d, at most limit bytes. It returns the bytes and
// whether the connection ended (EOF) rather than the time or the limit.
func exchange(t *testing.T, s *Server, target string, d time.Duration, limit int64, lines ...string) ([]byte, bool) {
	t.Helper()
	c, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := "GET " + target + " HTTP/1.1\r\nHost: " + s.Addr().String() + "\r\n"
	for _, l := range lines {
		req += l + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(d))
	var b bytes.Buffer
	_, err = io.Copy(&b, io.LimitReader(c, limit))
	var ne net.Error
	timedOut := errors.As(err, &ne) && ne.Timeout()
	return b.Bytes(), err == nil && !timedOut && int64(b.Len()) < limit
}

// readTimed sends a GET of target and reads n bytes of the response, or
// with n 0 the head and then 8 KiB of body (returning the body), within a
// minute.
func readTimed(t *testing.T, s *Server, target string, n int) []byte {
	t.Helper()
	c, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", target)
	br := bufio.NewReader(c)
	if n == 0 {
		if _, err := http.ReadResponse(br, nil); err != nil {
			t.Fatal(err)
		}
		n = 8 << 10
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(br, b); err != nil {
		t.Fatal(err)
	}
	return b
}

// split cuts a response at the end of its head.
func split(t *testing.T, raw []byte) (head string, body []byte) {
	t.Helper()
	h, b, ok := bytes.Cut(raw, []byte("\r\n\r\n"))
	if !ok {
		t.Fatalf("no end of head in %d bytes: %.200q", len(raw), raw)
	}
	return string(h) + "\r\n", b
}

// field returns the values of a field of a head.
func field(t *testing.T, head, name string) []string {
	t.Helper()
	_, fields, _ := strings.Cut(head, "\r\n")
	hdr, err := textproto.NewReader(bufio.NewReader(strings.NewReader(fields + "\r\n"))).ReadMIMEHeader()
	if err != nil {
		t.Fatalf("head: %v", err)
	}
	return hdr.Values(name)
}

func status(t *testing.T, head string) int {
	t.Helper()
	f := strings.Fields(head)
	if len(f) < 2 {
		t.Fatalf("status line: %q", head)
	}
	v, _ := strconv.Atoi(f[1])
	return v
}

func dechunk(t *testing.T, b []byte) []byte {
	t.Helper()
	out, err := io.ReadAll(httputil.NewChunkedReader(bytes.NewReader(b)))
	if err != nil {
		t.Fatalf("dechunk: %v", err)
	}
	return out
}

func path(name string, mod ...func(*Recipe)) string {
	b, ok := Lookup(name)
	if !ok {
		panic(name)
	}
	r := b.Recipe
	for _, m := range mod {
		m(&r)
	}
	return r.Path("/t/" + name)
}

// countZeros reads r to the end and returns how many bytes it had, failing
// on a byte other than zero.
func countZeros(t *testing.T, r io.Reader) int64 {
	t.Helper()
	var n int64
	buf, zero := make([]byte, 1<<20), make([]byte, 1<<20)
	for {
		k, err := r.Read(buf)
		if !bytes.Equal(buf[:k], zero[:k]) {
			t.Fatal("a byte other than zero")
		}
		n += int64(k)
		if err == io.EOF {
			return n
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestCatalogue checks that each behaviour writes the bytes it claims.
func TestCatalogue(t *testing.T) {
	s := start(t)
	const sec = time.Second
	cases := map[string]func(t *testing.T){
		"slow-headers": func(t *testing.T) {
			// Ten bytes one every 100 ms take at least 900 ms, however
			// loaded the machine.
			start := time.Now()
			raw := readTimed(t, s, path("slow-headers"), 10)
			if string(raw) != "HTTP/1.1 2" || time.Since(start) < 900*time.Millisecond {
				t.Errorf("%q after %v, want the status line's first 10 bytes after 900 ms or more", raw, time.Since(start))
			}
		},
		"endless-headers": func(t *testing.T) {
			raw, ended := exchange(t, s, path("endless-headers"), 60*sec, 4<<20)
			if ended || len(raw) != 4<<20 || bytes.Contains(raw, []byte("\r\n\r\n")) || bytes.Count(raw, []byte("X-Endless-")) < 30000 {
				t.Errorf("%d bytes, ended %v, end of head %v", len(raw), ended, bytes.Contains(raw, []byte("\r\n\r\n")))
			}
		},
		"huge-field": func(t *testing.T) {
			raw, _ := exchange(t, s, path("huge-field"), 60*sec, 8<<20)
			head, _ := split(t, raw)
			if v := field(t, head, "X-Huge"); len(v) != 1 || len(v[0]) != 1<<20 {
				t.Errorf("X-Huge: %d values, want one of 1 MiB", len(v))
			}
		},
		"many-fields": func(t *testing.T) {
			raw, _ := exchange(t, s, path("many-fields"), 60*sec, 8<<20)
			head, _ := split(t, raw)
			if n := strings.Count(head, "\r\nX-Many-"); n != 20000 {
				t.Errorf("%d X-Many fields, want 20000", n)
			}
		},
		"te-gzip-endless-headers": func(t *testing.T) {
			p := path("te-gzip-endless-headers")
			raw, _ := exchange(t, s, p, 60*sec, 4<<20)
			if head, _ := split(t, raw); field(t, head, "Transfer-Encoding")[0] != "gzip, chunked" {
				t.Errorf("first time: %q, want an ordinary head with gzip, chunked", head)
			}
			raw, ended := exchange(t, s, p, 60*sec, 2<<20)
			if ended || len(raw) != 2<<20 || !bytes.Contains(raw, []byte("\r\nTransfer-Encoding: gzip, chunked\r\n")) || bytes.Contains(raw, []byte("\r\n\r\n")) {
				t.Errorf("again: %d bytes, ended %v: want gzip, chunked and a head without end", len(raw), ended)
			}
		},
		"short-length": func(t *testing.T) {
			raw, ended := exchange(t, s, path("short-length"), 60*sec, 1<<20)
			head, body := split(t, raw)
			if cl := field(t, head, "Content-Length"); !ended || len(body) != DefaultN || len(cl) != 1 || cl[0] != strconv.Itoa(2*DefaultN) {
				t.Errorf("Content-Length %q, %d bytes of body, ended %v", cl, len(body), ended)
			}
		},
		"long-length": func(t *testing.T) {
			raw, _ := exchange(t, s, path("long-length"), 60*sec, 1<<20)
			head, body := split(t, raw)
			if cl := field(t, head, "Content-Length"); len(body) != DefaultN || len(cl) != 1 || cl[0] != strconv.Itoa(DefaultN/2) {
				t.Errorf("Content-Length %q, %d bytes of body", cl, len(body))
			}
		},
		"length-and-chunked": func(t *testing.T) {
			raw, _ := exchange(t, s, path("length-and-chunked"), 60*sec, 1<<20)
			head, body := split(t, raw)
			if len(field(t, head, "Content-Length")) != 1 || field(t, head, "Transfer-Encoding")[0] != "chunked" {
				t.Errorf("head %q: want both fields", head)
			}
			if got := dechunk(t, body); !bytes.Equal(got, Content("/t/length-and-chunked", DefaultN)) {
				t.Errorf("dechunked body: %d bytes, not the content", len(got))
			}
		},
		"bad-chunks": func(t *testing.T) {
			raw, _ := exchange(t, s, path("bad-chunks"), 60*sec, 1<<20)
			_, body := split(t, raw)
			if _, err := io.ReadAll(httputil.NewChunkedReader(bytes.NewReader(body))); err == nil {
				t.Errorf("the chunked body %q decodes", body)
			}
		},
		"te-gzip-bomb": func(t *testing.T) {
			if b, _ := Lookup("te-gzip-bomb"); b.Recipe.N != 1<<30 {
				t.Errorf("N %d, want 1 GiB", b.Recipe.N)
			}
			// 16 MiB here: the race detector makes gunzip slow.
			raw, ended := exchange(t, s, path("te-gzip-bomb", func(r *Recipe) { r.N = 16 << 20 }), 60*sec, 4<<20)
			head, body := split(t, raw)
			if !ended || field(t, head, "Transfer-Encoding")[0] != "gzip, chunked" || len(raw) > 256<<10 {
				t.Fatalf("head %q, %d bytes on the wire, ended %v", head, len(raw), ended)
			}
			zr, err := gzip.NewReader(bytes.NewReader(dechunk(t, body)))
			if err != nil {
				t.Fatal(err)
			}
			if n := countZeros(t, zr); n != 16<<20 {
				t.Errorf("%d zeros, want 16 MiB", n)
			}
		},
		"ce-gzip-bomb": func(t *testing.T) {
			raw, ended := exchange(t, s, path("ce-gzip-bomb", func(r *Recipe) { r.N = 16 << 20 }), 60*sec, 4<<20)
			head, body := split(t, raw)
			if !ended || field(t, head, "Content-Encoding")[0] != "gzip" || field(t, head, "Content-Length")[0] != strconv.Itoa(len(body)) {
				t.Fatalf("head %q, %d bytes of body, ended %v", head, len(body), ended)
			}
			zr, err := gzip.NewReader(bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			if n := countZeros(t, zr); n != 16<<20 {
				t.Errorf("%d zeros, want 16 MiB", n)
			}
		},
		"endless-body": func(t *testing.T) {
			raw, ended := exchange(t, s, path("endless-body"), 60*sec, 8<<20)
			head, body := split(t, raw)
			if ended || len(raw) != 8<<20 || field(t, head, "Transfer-Encoding")[0] != "chunked" || bytes.HasSuffix(body, []byte("0\r\n\r\n")) {
				t.Errorf("%d bytes, ended %v", len(raw), ended)
			}
		},
		"endless-close": func(t *testing.T) {
			raw, ended := exchange(t, s, path("endless-close"), 60*sec, 8<<20)
			head, _ := split(t, raw)
			if ended || len(raw) != 8<<20 || field(t, head, "Content-Length") != nil || field(t, head, "Transfer-Encoding") != nil {
				t.Errorf("head %q, %d bytes, ended %v", head, len(raw), ended)
			}
		},
		"stall-body": func(t *testing.T) {
			go func() { time.Sleep(time.Second); s.Drop() }()
			start := time.Now()
			raw, ended := exchange(t, s, path("stall-body"), 60*sec, 1<<20)
			head, body := split(t, raw)
			if !ended || time.Since(start) < 900*time.Millisecond || len(body) != DefaultN/2 || field(t, head, "Content-Length")[0] != strconv.Itoa(DefaultN) {
				t.Errorf("%d bytes of body of %v, ended %v after %v (the drop came after 1 s)", len(body), field(t, head, "Content-Length"), ended, time.Since(start))
			}
		},
		"trickle-body": func(t *testing.T) {
			// The head and 8 KiB of body at 1 KiB per 250 ms take at
			// least 1.75 s.
			start := time.Now()
			raw := readTimed(t, s, path("trickle-body"), 0)
			if time.Since(start) < 1750*time.Millisecond || !bytes.Equal(raw, Content("/t/trickle-body", 8<<10)) {
				t.Errorf("8 KiB of body after %v, want the content after 1.75 s or more", time.Since(start))
			}
		},
		"redirect-self": func(t *testing.T) {
			p := path("redirect-self")
			raw, _ := exchange(t, s, p, 60*sec, 1<<20)
			head, _ := split(t, raw)
			if status(t, head) != 302 || field(t, head, "Location")[0] != p {
				t.Errorf("head %q, want 302 to %s", head, p)
			}
		},
		"redirect-chain": func(t *testing.T) {
			raw, _ := exchange(t, s, path("redirect-chain"), 60*sec, 1<<20)
			head, _ := split(t, raw)
			if status(t, head) != 302 || !strings.Contains(field(t, head, "Location")[0], "hop=1") {
				t.Errorf("head %q, want 302 to hop=1", head)
			}
		},
		"redirect-https": func(t *testing.T) {
			p := path("redirect-https")
			raw, _ := exchange(t, s, p, 60*sec, 1<<20)
			head, _ := split(t, raw)
			if want := "https://" + s.Addr().String() + p; status(t, head) != 301 || field(t, head, "Location")[0] != want {
				t.Errorf("head %q, want 301 to %s", head, want)
			}
		},
		"304-always": func(t *testing.T) {
			raw, ended := exchange(t, s, path("304-always"), 60*sec, 1<<20)
			head, body := split(t, raw)
			if !ended || status(t, head) != 304 || len(body) != 0 || field(t, head, "ETag") != nil || field(t, head, "Last-Modified") != nil {
				t.Errorf("%q + %d bytes: want a bare 304", head, len(body))
			}
		},
		"304-revalidate": func(t *testing.T) {
			raw, _ := exchange(t, s, path("304-revalidate"), 60*sec, 1<<20)
			head, body := split(t, raw)
			tag := field(t, head, "ETag")
			if status(t, head) != 200 || len(tag) != 1 || len(body) != DefaultN {
				t.Fatalf("%q: want 200 with an ETag", head)
			}
			raw, _ = exchange(t, s, path("304-revalidate"), 60*sec, 1<<20, "If-None-Match: "+tag[0])
			head, _ = split(t, raw)
			if status(t, head) != 304 || field(t, head, "ETag") != nil || field(t, head, "Last-Modified") != nil {
				t.Errorf("%q: want 304 without validators", head)
			}
		},
		"vary-explosion": func(t *testing.T) {
			bodies := map[string][]byte{}
			for _, ua := range []string{"a", "b", "a"} {
				raw, _ := exchange(t, s, path("vary-explosion"), 60*sec, 1<<20, "User-Agent: "+ua)
				head, body := split(t, raw)
				if v := field(t, head, "Vary"); len(v) != 1 || v[0] != "User-Agent, Accept, Accept-Language" {
					t.Errorf("Vary %q", v)
				}
				if prev, ok := bodies[ua]; ok && !bytes.Equal(prev, body) {
					t.Errorf("User-Agent %s: two bodies", ua)
				}
				bodies[ua] = body
			}
			if bytes.Equal(bodies["a"], bodies["b"]) {
				t.Error("two User-Agents, one body")
			}
		},
		"vary-star": func(t *testing.T) {
			raw, _ := exchange(t, s, path("vary-star"), 60*sec, 1<<20)
			head, _ := split(t, raw)
			if v := field(t, head, "Vary"); len(v) != 1 || v[0] != "*" {
				t.Errorf("Vary %q", v)
			}
		},
		"error-on-unkeyed": func(t *testing.T) {
			for _, tc := range []struct {
				lines  []string
				status int
			}{
				{[]string{"User-Agent: honest"}, 200},
				{[]string{"User-Agent: evil"}, 500},
				{[]string{"Accept: text/evil"}, 500},
				{[]string{"User-Agent: a", "User-Agent: b"}, 500},
			} {
				raw, _ := exchange(t, s, path("error-on-unkeyed"), 60*sec, 1<<20, tc.lines...)
				head, body := split(t, raw)
				poisoned := string(body) == Poison
				if status(t, head) != tc.status || poisoned != (tc.status == 500) || field(t, head, "Cache-Control")[0] != "max-age=3600" {
					t.Errorf("%q: %q, poisoned %v; want %d", tc.lines, head, poisoned, tc.status)
				}
			}
		},
		"error-on-unkeyed-short": func(t *testing.T) {
			raw, _ := exchange(t, s, path("error-on-unkeyed-short"), 60*sec, 1<<20)
			head, _ := split(t, raw)
			if status(t, head) != 200 || field(t, head, "Cache-Control")[0] != "s-maxage=2" {
				t.Errorf("honest: %q", head)
			}
			raw, _ = exchange(t, s, path("error-on-unkeyed-short"), 60*sec, 1<<20, "User-Agent: evil")
			head, body := split(t, raw)
			if status(t, head) != 500 || field(t, head, "Cache-Control")[0] != "max-age=3600" || string(body) != Poison {
				t.Errorf("evil: %q", head)
			}
		},
		"vary-ua-error": func(t *testing.T) {
			raw, _ := exchange(t, s, path("vary-ua-error"), 60*sec, 1<<20, "User-Agent: a")
			head, _ := split(t, raw)
			if status(t, head) != 200 || field(t, head, "Vary")[0] != "User-Agent" {
				t.Errorf("honest: %q", head)
			}
			raw, _ = exchange(t, s, path("vary-ua-error"), 60*sec, 1<<20, "User-Agent: a", "User-Agent: a")
			head, body := split(t, raw)
			if status(t, head) != 500 || field(t, head, "Vary")[0] != "User-Agent" || string(body) != Poison {
				t.Errorf("two User-Agent lines: %q", head)
			}
		},
		"vary-then-error": func(t *testing.T) {
			raw, _ := exchange(t, s, path("vary-then-error"), 60*sec, 1<<20)
			head, _ := split(t, raw)
			if status(t, head) != 200 || field(t, head, "Vary")[0] != "Accept-Language" {
				t.Errorf("honest: %q", head)
			}
			raw, _ = exchange(t, s, path("vary-then-error"), 60*sec, 1<<20, "User-Agent: evil")
			head, body := split(t, raw)
			if status(t, head) != 404 || field(t, head, "Vary") != nil || string(body) != Poison {
				t.Errorf("evil: %q", head)
			}
		},
	}
	for _, b := range Catalogue {
		check, ok := cases[b.Name]
		if !ok {
			t.Errorf("behaviour %s has no test", b.Name)
			continue
		}
		t.Run(b.Name, check)
	}
	if len(cases) != len(Catalogue) {
		t.Errorf("%d cases for %d behaviours", len(cases), len(Catalogue))
	}
}

// TestHonestDefault: the zero recipe is an honest, cacheable response.
func TestHonestDefault(t *testing.T) {
	s := start(t)
	resp, err := http.Get("http://" + s.Addr().String() + Recipe{}.Path("/plain"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 || !bytes.Equal(body, Content("/plain", DefaultN)) || resp.Header.Get("ETag") == "" {
		t.Errorf("%v %d, %d bytes, ETag %q", err, resp.StatusCode, len(body), resp.Header.Get("ETag"))
	}
	if s.RequestsFor("/plain") != 1 || s.Requests() != 1 {
		t.Errorf("counted %d for /plain, %d in all", s.RequestsFor("/plain"), s.Requests())
	}
}

// TestBadRecipes are refused with 400, and a request head too long with 431.
func TestBadRecipes(t *testing.T) {
	s := start(t)
	for _, q := range []string{"h=nope", "f=nope", "b=nope", "p=nope", "s=99", "n=-1", "n=x", "hn=1e9"} {
		raw, _ := exchange(t, s, "/bad?"+q, 10*time.Second, 1<<20)
		if head, _ := split(t, raw); status(t, head) != 400 {
			t.Errorf("%s: %q, want 400", q, head)
		}
	}
	raw, _ := exchange(t, s, "/long", 10*time.Second, 1<<20, "X-Long: "+strings.Repeat("l", MaxRequestHead))
	if head, _ := split(t, raw); status(t, head) != 431 {
		t.Errorf("a long request head: %q, want 431", head)
	}
}

// TestMix: a seed gives one recipe, every choice of every dimension comes
// up within a few hundred seeds, and the origin serves any of them.
func TestMix(t *testing.T) {
	if a, b := Mix(7), Mix(7); a != b {
		t.Errorf("Mix(7) twice: %v and %v", a, b)
	}
	if Mix(7) == Mix(8) {
		t.Error("Mix(7) and Mix(8) are one recipe")
	}
	seen := map[string]bool{}
	for seed := range uint64(500) {
		r := Mix(seed)
		if _, err := ParseRecipe(r.Query()); err != nil {
			t.Fatalf("Mix(%d) = %v: %v", seed, r, err)
		}
		seen["h="+r.Head], seen["f="+r.Framing], seen["b="+r.Body], seen["p="+r.Policy] = true, true, true, true
	}
	for dim, keys := range map[string][]string{"h=": sortedKeys(Heads), "f=": sortedKeys(Framings), "p=": sortedKeys(Policies), "b=": mixBodies} {
		for _, k := range keys {
			if !seen[dim+k] {
				t.Errorf("%s%s never chosen in 500 seeds", dim, k)
			}
		}
	}
	s := start(t)
	for seed := range uint64(20) {
		r := Mix(seed)
		raw, _ := exchange(t, s, r.Path(fmt.Sprintf("/mix/%d", seed)), time.Minute, 9)
		if string(raw) != "HTTP/1.1 " {
			t.Errorf("Mix(%d) = %v: %.100q", seed, r, raw)
		}
	}
	s.Drop()
}

// TestDropEndsEverything: Drop ends behaviours that would go on for
// minutes, and Close waits for their goroutines.
func TestDropEndsEverything(t *testing.T) {
	s := start(t)
	var conns []net.Conn
	for _, name := range []string{"stall-body", "trickle-body", "slow-headers"} {
		c, err := net.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path(name))
		conns = append(conns, c)
	}
	time.Sleep(200 * time.Millisecond) // let the behaviours start (not a race: Drop works either way)
	s.Drop()
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Errorf("connection %d: %v, want EOF after Drop", i, err)
		}
	}
	done := make(chan struct{})
	go func() { _ = s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Error("Close did not return within 10 s")
	}
}

// TestTLSRefusedAtOnce: a TLS client (a proxy that thinks the origin
// speaks https) gets an error at once, not after ReadTimeout.
func TestTLSRefusedAtOnce(t *testing.T) {
	s := start(t)
	began := time.Now()
	c, err := tls.Dial("tcp", s.Addr().String(), &tls.Config{InsecureSkipVerify: true})
	if err == nil {
		c.Close()
		t.Fatal("a TLS handshake succeeded")
	}
	if d := time.Since(began); d > ReadTimeout/2 {
		t.Errorf("the handshake failed after %v, want at once (ReadTimeout is %v)", d, ReadTimeout)
	}
	if s.Requests() != 0 {
		t.Errorf("counted %d requests", s.Requests())
	}
}

func TestListenRefusesNonLoopback(t *testing.T) {
	if _, err := Listen(netip.MustParseAddr("192.0.2.1"), 0); err == nil {
		t.Error("listened on 192.0.2.1")
	}
}
