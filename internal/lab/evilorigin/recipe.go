// Package evilorigin is an HTTP/1.1 origin that misbehaves on purpose, for
// the labs and experiments that attack coral_proxy (internal/lab/hostilelab,
// test/hostilelab, eval/hostile). It listens on a raw TCP socket and writes
// every response byte by hand, so it can lie in ways net/http never would:
// headers that never end, Content-Length that is not the body's length,
// "Transfer-Encoding: gzip, chunked" over a decompression bomb, bodies that
// stall forever, 304s to unconditional requests, error pages keyed on
// fields no cache key holds.
//
// A response is a [Recipe]: one choice along each of five dimensions —
// the head (how the header section is written), the framing (how the body
// is delimited), the body (what and how fast), the policy (caching fields,
// redirects, answers that depend on request fields) and the status. Every
// choice is a named function in one of the tables [Heads], [Framings],
// [Bodies] and [Policies]. A recipe travels in the request's query string
// (see [Recipe.Query]), so the proxy under attack keys each recipe as an
// object of its own and the origin needs no state. [Catalogue] names the
// misbehaviours one at a time; [Mix] picks a combination from a seed,
// reproducibly.
//
//	o, _ := evilorigin.Listen(netip.MustParseAddr("127.0.90.3"), 8080)
//	defer o.Close()
//	r, _ := evilorigin.Lookup("endless-headers")
//	url := "http://" + o.Addr().String() + r.Recipe.Path("/a") // /a?h=endless&...
//
// Every write has a deadline ([WriteTimeout]): a reader that stops reading
// ends the behaviour rather than pinning a goroutine here. [Server.Drop]
// closes every open connection (what a lab does between attacks).
package evilorigin

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/url"
	"slices"
	"strconv"
)

// Recipe is one response. The zero value of a field means its default:
// head "plain", framing "length", body "fixed", policy "max-age", status
// 200, N 64 KiB.
type Recipe struct {
	Head    string // a key of Heads
	Framing string // a key of Framings
	Body    string // a key of Bodies
	Policy  string // a key of Policies
	Status  int    // the status code (a policy may override it)
	// N is the body's length where the body has one (fixed, stall,
	// trickle, zeros), in bytes.
	N int64
	// HeadN is the size parameter of the head (huge-field: the field's
	// length; many-fields: how many), 0 for its default.
	HeadN int
	// Tag makes otherwise equal recipes distinct objects (a different
	// query string, so a different cache key); it changes nothing else.
	Tag string
}

// DefaultN is the body length of a recipe that sets none.
const DefaultN = 64 << 10

func (r Recipe) withDefaults() Recipe {
	if r.Head == "" {
		r.Head = "plain"
	}
	if r.Framing == "" {
		r.Framing = "length"
	}
	if r.Body == "" {
		r.Body = "fixed"
	}
	if r.Policy == "" {
		r.Policy = "max-age"
	}
	if r.Status == 0 {
		r.Status = 200
	}
	if r.N <= 0 {
		r.N = DefaultN
	}
	return r
}

// Query is the recipe as query parameters: h, f, b, p, s, n, hn, tag.
func (r Recipe) Query() url.Values {
	r = r.withDefaults()
	q := url.Values{}
	q.Set("h", r.Head)
	q.Set("f", r.Framing)
	q.Set("b", r.Body)
	q.Set("p", r.Policy)
	q.Set("s", strconv.Itoa(r.Status))
	q.Set("n", strconv.FormatInt(r.N, 10))
	if r.HeadN > 0 {
		q.Set("hn", strconv.Itoa(r.HeadN))
	}
	if r.Tag != "" {
		q.Set("tag", r.Tag)
	}
	return q
}

// Path is path with the recipe as its query string.
func (r Recipe) Path(path string) string { return path + "?" + r.Query().Encode() }

// String is the recipe in a short form for tables and logs.
func (r Recipe) String() string {
	r = r.withDefaults()
	return fmt.Sprintf("%s/%s/%s/%s/%d", r.Head, r.Framing, r.Body, r.Policy, r.Status)
}

// ParseRecipe reads a recipe from a query string. Unknown names are an
// error, as are sizes out of range (N up to 1 TiB, HeadN up to 64 Mi).
func ParseRecipe(q url.Values) (Recipe, error) {
	r := Recipe{Head: q.Get("h"), Framing: q.Get("f"), Body: q.Get("b"), Policy: q.Get("p"), Tag: q.Get("tag")}
	if s := q.Get("s"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 100 || v > 999 {
			return Recipe{}, fmt.Errorf("evilorigin: bad status %q", s)
		}
		r.Status = v
	}
	if s := q.Get("n"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 || v > 1<<40 {
			return Recipe{}, fmt.Errorf("evilorigin: bad n %q", s)
		}
		r.N = v
	}
	if s := q.Get("hn"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 || v > 64<<20 {
			return Recipe{}, fmt.Errorf("evilorigin: bad hn %q", s)
		}
		r.HeadN = v
	}
	r = r.withDefaults()
	if _, ok := Heads[r.Head]; !ok {
		return Recipe{}, fmt.Errorf("evilorigin: unknown head %q", r.Head)
	}
	if _, ok := Framings[r.Framing]; !ok {
		return Recipe{}, fmt.Errorf("evilorigin: unknown framing %q", r.Framing)
	}
	if _, ok := Bodies[r.Body]; !ok {
		return Recipe{}, fmt.Errorf("evilorigin: unknown body %q", r.Body)
	}
	if _, ok := Policies[r.Policy]; !ok {
		return Recipe{}, fmt.Errorf("evilorigin: unknown policy %q", r.Policy)
	}
	return r, nil
}

// Behaviour is one named misbehaviour of the catalogue.
type Behaviour struct {
	Name string
	// Class groups behaviours by the attack they belong to (the rows of
	// eval/hostile's table).
	Class  string
	Doc    string
	Recipe Recipe
}

// Attack classes of the catalogue.
const (
	ClassHeaders     = "headers"      // endless, slow, huge and many header fields
	ClassFraming     = "framing"      // Transfer-Encoding and Content-Length lies
	ClassBombs       = "bombs"        // compression bombs
	ClassBodies      = "bodies"       // never-ending, stalling, trickling bodies
	ClassRedirects   = "redirects"    // redirect games
	ClassValidators  = "validators"   // 304s without validators
	ClassVary        = "vary"         // Vary explosions
	ClassUnkeyed     = "unkeyed"      // answers keyed on fields the cache key lacks
	ClassCombination = "combinations" // Mix
)

// Catalogue is every misbehaviour, one dimension at a time.
var Catalogue = []Behaviour{
	{"slow-headers", ClassHeaders, "the header section one byte every 100 ms", Recipe{Head: "slow"}},
	{"endless-headers", ClassHeaders, "header fields without end, as fast as they are read", Recipe{Head: "endless"}},
	{"huge-field", ClassHeaders, "one header field of 1 MiB", Recipe{Head: "huge-field"}},
	{"many-fields", ClassHeaders, "20,000 header fields", Recipe{Head: "many-fields"}},
	{"te-gzip-endless-headers", ClassFraming, "Transfer-Encoding: gzip, chunked; asked again (as a proxy does when its HTTP client refuses the coding), header fields without end", Recipe{Head: "endless-on-retry", Framing: "gzip-chunked"}},
	{"short-length", ClassFraming, "Content-Length twice the body, then the connection closes", Recipe{Framing: "short-length"}},
	{"long-length", ClassFraming, "Content-Length half the body, the whole body sent", Recipe{Framing: "long-length"}},
	{"length-and-chunked", ClassFraming, "both Content-Length and Transfer-Encoding: chunked", Recipe{Framing: "length-and-chunked"}},
	{"bad-chunks", ClassFraming, "chunk sizes that are not hex, then a chunk longer than announced", Recipe{Framing: "bad-chunks"}},
	{"te-gzip-bomb", ClassBombs, "1 GiB of zeros as Transfer-Encoding: gzip, chunked (about 1 MiB on the wire)", Recipe{Framing: "gzip-chunked", Body: "zeros", N: 1 << 30}},
	{"ce-gzip-bomb", ClassBombs, "1 GiB of zeros gzipped as Content-Encoding: gzip (about 1 MiB)", Recipe{Body: "gzip-bomb", N: 1 << 30}},
	{"endless-body", ClassBodies, "a chunked body without end, as fast as it is read", Recipe{Framing: "chunked", Body: "endless"}},
	{"endless-close", ClassBodies, "a close-delimited body without end", Recipe{Framing: "close", Body: "endless"}},
	{"stall-body", ClassBodies, "half the announced body, then silence until the connection closes", Recipe{Body: "stall"}},
	{"trickle-body", ClassBodies, "the body at 4 KiB/s", Recipe{Body: "trickle"}},
	{"redirect-self", ClassRedirects, "302 to the very URL", Recipe{Policy: "redirect-self"}},
	{"redirect-chain", ClassRedirects, "302 to the next URL of a chain without end", Recipe{Policy: "redirect-chain"}},
	{"redirect-https", ClassRedirects, "301 from this one path to its https:// form", Recipe{Policy: "redirect-https"}},
	{"304-always", ClassValidators, "304 without validators to every request, conditional or not", Recipe{Policy: "304-always"}},
	{"304-revalidate", ClassValidators, "200 fresh for 1 s with an ETag, then 304s without validators", Recipe{Policy: "304-revalidate"}},
	{"vary-explosion", ClassVary, "Vary: User-Agent, Accept, Accept-Language; a body per value", Recipe{Policy: "vary-explosion", N: 4 << 10}},
	{"vary-star", ClassVary, "Vary: * on a cacheable response", Recipe{Policy: "vary-star"}},
	{"error-on-unkeyed", ClassUnkeyed, "a cacheable 500 when User-Agent or Accept says evil (or comes twice), else a cacheable 200", Recipe{Policy: "error-on-unkeyed"}},
	{"error-on-unkeyed-short", ClassUnkeyed, "error-on-unkeyed with the 200 fresh for 2 s, so caches revalidate", Recipe{Policy: "error-on-unkeyed-short"}},
	{"vary-ua-error", ClassUnkeyed, "Vary: User-Agent, a 200 fresh for 2 s, a cacheable 500 for an evil User-Agent or two User-Agent lines", Recipe{Policy: "vary-ua-error"}},
	{"vary-then-error", ClassUnkeyed, "a 200 with Vary: Accept-Language; a cacheable 404 without Vary for an evil User-Agent", Recipe{Policy: "vary-then-error"}},
}

// Lookup finds a behaviour of the catalogue by name.
func Lookup(name string) (Behaviour, bool) {
	i := slices.IndexFunc(Catalogue, func(b Behaviour) bool { return b.Name == name })
	if i < 0 {
		return Behaviour{}, false
	}
	return Catalogue[i], true
}

// Classes are the catalogue's classes in order of first appearance.
func Classes() []string {
	var out []string
	for _, b := range Catalogue {
		if !slices.Contains(out, b.Class) {
			out = append(out, b.Class)
		}
	}
	return out
}

// Mix picks a recipe from seed: each dimension at random, the honest
// choice more often than any one misbehaviour (so a combination usually
// gets past its first lie to the next one), sizes from 1 KiB to 8 MiB. The
// same seed gives the same recipe; the seed is its Tag, so two seeds never
// share a cache key.
func Mix(seed uint64) Recipe {
	rng := rand.New(rand.NewPCG(seed, 0x6576696c)) // "evil"
	pick := func(honest string, table []string) string {
		if rng.IntN(3) == 0 {
			return honest
		}
		return table[rng.IntN(len(table))]
	}
	statuses := []int{200, 200, 200, 203, 204, 301, 304, 404, 410, 500, 503}
	return Recipe{
		Head:    pick("plain", sortedKeys(Heads)),
		Framing: pick("length", sortedKeys(Framings)),
		Body:    pick("fixed", mixBodies),
		Policy:  pick("max-age", sortedKeys(Policies)),
		Status:  statuses[rng.IntN(len(statuses))],
		N:       1 << (10 + rng.IntN(14)),
		Tag:     "mix" + strconv.FormatUint(seed, 10),
	}
}

// mixBodies leaves out the bombs' 1 GiB defaults: Mix sizes bodies itself.
var mixBodies = []string{"fixed", "stall", "trickle", "endless", "zeros"}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Content is the honest body of path: n bytes that depend on the path only,
// so a client can check every byte it got. It is a block of contentBlock
// pseudo-random bytes seeded by the path, repeated: cheap to make at the
// rates the lab needs, and no two paths share a block.
func Content(path string, n int64) []byte {
	b := make([]byte, n)
	newContentStream(path).fill(b)
	return b
}

const contentBlock = 64 << 10

// contentStream produces Content(path, ...) in pieces.
type contentStream struct {
	block []byte
	off   int
}

func newContentStream(path string) *contentStream {
	h := fnv.New64a()
	h.Write([]byte(path))
	rng := rand.NewPCG(h.Sum64(), 1)
	block := make([]byte, contentBlock)
	for i := 0; i < len(block); i += 8 {
		v := rng.Uint64()
		for j := i; j < i+8; j++ {
			block[j] = contentAlphabet[v%uint64(len(contentAlphabet))]
			v >>= 8
		}
	}
	return &contentStream{block: block}
}

const contentAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789\n"

// fill writes the next len(b) bytes of the content into b.
func (s *contentStream) fill(b []byte) {
	for len(b) > 0 {
		k := copy(b, s.block[s.off:])
		b = b[k:]
		s.off = (s.off + k) % len(s.block)
	}
}
