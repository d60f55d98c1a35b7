package coral

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// cookieTestSecret is the secret of the RFC 9018 Appendix A.1 to A.3
// examples.
var cookieTestSecret = cookieMustSecret("e5e973e5a6b2a43f48e7dc849e37bfcf")

func cookieMustSecret(s string) [16]byte {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 16 {
		panic("bad test secret " + s)
	}
	return [16]byte(b)
}

func cookieMustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
	return b
}

// cookieAt returns a serverCookies whose clock is stopped at unix.
func cookieAt(secret [16]byte, unix int64) *serverCookies {
	s := newServerCookies(secret)
	s.now = func() time.Time { return time.Unix(unix, 0) }
	return s
}

// cookieQueryWire returns the wire form of a query for example.org/A. When
// withOPT is set it ends in an OPT record (UDP size 1232) whose RDATA is
// rdata, written byte by byte, so that any option content, however
// malformed, reaches the parser as a client would send it.
func cookieQueryWire(t testing.TB, withOPT bool, rdata []byte) []byte {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion("example.org.", dns.TypeA)
	m.Id = 0x1234
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	if !withOPT {
		return b
	}
	binary.BigEndian.PutUint16(b[10:12], 1) // ARCOUNT
	// Root owner name, TYPE OPT, CLASS = UDP size, TTL = 0, RDLENGTH.
	b = append(b, 0, 0, byte(dns.TypeOPT), 0x04, 0xd0, 0, 0, 0, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(len(rdata)))
	return append(b, rdata...)
}

// cookieOptionWire returns an EDNS option (code, length, data) on the wire.
func cookieOptionWire(code uint16, data []byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, code)
	b = binary.BigEndian.AppendUint16(b, uint16(len(data)))
	return append(b, data...)
}

// cookieQuery unpacks a query from the wire, as the server would get it,
// with a COOKIE option holding cookie (nil: no COOKIE option, but an OPT
// record).
func cookieQuery(t testing.TB, cookie []byte) *dns.Msg {
	t.Helper()
	var rdata []byte
	if cookie != nil {
		rdata = cookieOptionWire(dns.EDNS0COOKIE, cookie)
	}
	m := new(dns.Msg)
	if err := m.Unpack(cookieQueryWire(t, true, rdata)); err != nil {
		t.Fatalf("unpack query: %v", err)
	}
	return m
}

// cookieFromReply packs resp, unpacks it as the client would and returns the
// content of its only COOKIE option (nil if it has none).
func cookieFromReply(t testing.TB, resp *dns.Msg) []byte {
	t.Helper()
	b, err := resp.Pack()
	if err != nil {
		t.Fatalf("pack reply: %v", err)
	}
	m := new(dns.Msg)
	if err := m.Unpack(b); err != nil {
		t.Fatalf("unpack reply: %v", err)
	}
	opt := m.IsEdns0()
	if opt == nil {
		return nil
	}
	var found []byte
	n := 0
	for _, o := range opt.Option {
		if c, ok := o.(*dns.EDNS0_COOKIE); ok {
			n++
			found = cookieMustHex(t, c.Cookie)
		}
	}
	if n > 1 {
		t.Fatalf("reply has %d COOKIE options", n)
	}
	return found
}

// cookieReply returns a reply to req with an OPT record, and the cookie a
// client gets back in it after attach.
func cookieReply(t testing.TB, s *serverCookies, req *dns.Msg, cc []byte, client netip.Addr) []byte {
	t.Helper()
	resp := new(dns.Msg)
	resp.SetReply(req)
	resp.SetEdns0(1232, false)
	s.attach(resp, cc, client)
	return cookieFromReply(t, resp)
}

func TestCookieCheck(t *testing.T) {
	const now = 1700000000
	cc := cookieMustHex(t, "0123456789abcdef")
	v4 := netip.MustParseAddr("192.0.2.1")
	v4other := netip.MustParseAddr("192.0.2.2")
	v4mapped := netip.MustParseAddr("::ffff:192.0.2.1")
	v6 := netip.MustParseAddr("2001:db8::1")

	// made returns the full cookie (client + server) our server hands
	// client at the given time.
	made := func(at int64, client netip.Addr) []byte {
		return cookieReply(t, cookieAt(cookieTestSecret, at), cookieQuery(t, cc), cc, client)
	}
	seq := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i + 1)
		}
		return b
	}
	withVersion := func(c []byte, v byte) []byte {
		c = bytes.Clone(c)
		c[8] = v
		return c
	}
	flip := func(c []byte, i int) []byte {
		c = bytes.Clone(c)
		c[i] ^= 0x01
		return c
	}

	tests := []struct {
		name   string
		wire   []byte // the request, raw
		client netip.Addr
		want   cookieVerdict
		wantCC []byte
	}{
		{name: "no OPT", wire: cookieQueryWire(t, false, nil), client: v4, want: cookieNone},
		{name: "OPT without options", wire: cookieQueryWire(t, true, nil), client: v4, want: cookieNone},
		{
			name:   "OPT with only other options",
			wire:   cookieQueryWire(t, true, cookieOptionWire(dns.EDNS0NSID, nil)),
			client: v4, want: cookieNone,
		},
		{
			name:   "client cookie only",
			wire:   cookieQueryWire(t, true, cookieOptionWire(dns.EDNS0COOKIE, cc)),
			client: v4, want: cookieClientOnly, wantCC: cc,
		},
		{
			name: "client cookie only, after other options",
			wire: cookieQueryWire(t, true, append(cookieOptionWire(dns.EDNS0NSID, nil),
				cookieOptionWire(dns.EDNS0COOKIE, cc)...)),
			client: v4, want: cookieClientOnly, wantCC: cc,
		},
		{
			name:   "valid IPv4",
			wire:   cookieQueryWire(t, true, cookieOptionWire(dns.EDNS0COOKIE, made(now, v4))),
			client: v4, want: cookieValid, wantCC: cc,
		},
		{
			name:   "valid IPv6",
			wire:   cookieQueryWire(t, true, cookieOptionWire(dns.EDNS0COOKIE, made(now, v6))),
			client: v6, want: cookieValid, wantCC: cc,
		},
		{
			name:   "made for IPv4-mapped, checked for IPv4",
			wire:   cookieQueryWire(t, true, cookieOptionWire(dns.EDNS0COOKIE, made(now, v4mapped))),
			client: v4, want: cookieValid, wantCC: cc,
		},
		{
			name:   "made for IPv4, checked for IPv4-mapped",
			wire:   cookieQueryWire(t, true, cookieOptionWire(dns.EDNS0COOKIE, made(now, v4))),
			client: v4mapped, want: cookieValid, wantCC: cc,
		},
		{
			name:   "IPv6 zone ignored",
			wire:   cookieQueryWire(t, true, cookieOptionWire(dns.EDNS0COOKIE, made(now, v6))),
			client: v6.WithZone("eth0"), want: cookieValid, wantCC: cc,
		},
		{
			name:   "wrong client IPv4",
			wire:   cookieQueryWire(t, true, cookieOptionWire(dns.EDNS0COOKIE, made(now, v4))),
			client: v4other, want: cookieInvalid, wantCC: cc,
		},
		{
			name:   "made for IPv4, from IPv6",
			wire:   cookieQueryWire(t, true, cookieOptionWire(dns.EDNS0COOKIE, made(now, v4))),
			client: v6, want: cookieInvalid, wantCC: cc,
		},
		{
			name:   "one hour old",
			wire:   cookieQueryWire(t, true, cookieOptionWire(dns.EDNS0COOKIE, made(now-3600, v4))),
			client: v4, want: cookieValid, wantCC: cc,
		},
		{
			name:   "expired, one hour and a second old",
			wire:   cookieQueryWire(t, true, cookieOptionWire(dns.EDNS0COOKIE, made(now-3601, v4))),
			client: v4, want: cookieInvalid, wantCC: cc,
		},
		{
			name:   "expired, a day old",
			wire:   cookieQueryWire(t, true, cookieOptionWire(dns.EDNS0COOKIE, made(now-86400, v4))),
			client: v4, want: cookieInvalid, wantCC: cc,
		},
		{
			name:   "five minutes in the future",
			wire:   cookieQueryWire(t, true, cookieOptionWire(dns.EDNS0COOKIE, made(now+300, v4))),
			client: v4, want: cookieValid, wantCC: cc,
		},
		{
			name:   "future, five minutes and a second ahead",
			wire:   cookieQueryWire(t, true, cookieOptionWire(dns.EDNS0COOKIE, made(now+301, v4))),
			client: v4, want: cookieInvalid, wantCC: cc,
		},
		{
			name:   "wrong hash",
			wire:   cookieQueryWire(t, true, cookieOptionWire(dns.EDNS0COOKIE, flip(made(now, v4), 23))),
			client: v4, want: cookieInvalid, wantCC: cc,
		},
		{
			name:   "tampered timestamp",
			wire:   cookieQueryWire(t, true, cookieOptionWire(dns.EDNS0COOKIE, flip(made(now, v4), 15))),
			client: v4, want: cookieInvalid, wantCC: cc,
		},
		{
			name:   "tampered reserved bytes",
			wire:   cookieQueryWire(t, true, cookieOptionWire(dns.EDNS0COOKIE, flip(made(now, v4), 10))),
			client: v4, want: cookieInvalid, wantCC: cc,
		},
		{
			name:   "other client cookie",
			wire:   cookieQueryWire(t, true, cookieOptionWire(dns.EDNS0COOKIE, flip(made(now, v4), 0))),
			client: v4, want: cookieInvalid, wantCC: flip(cc, 0),
		},
		{
			name:   "version 2",
			wire:   cookieQueryWire(t, true, cookieOptionWire(dns.EDNS0COOKIE, withVersion(made(now, v4), 2))),
			client: v4, want: cookieInvalid, wantCC: cc,
		},
		{
			name:   "8-byte server cookie (16 in all)",
			wire:   cookieQueryWire(t, true, cookieOptionWire(dns.EDNS0COOKIE, seq(16))),
			client: v4, want: cookieInvalid, wantCC: seq(8),
		},
		{
			name:   "32-byte server cookie (40 in all)",
			wire:   cookieQueryWire(t, true, cookieOptionWire(dns.EDNS0COOKIE, seq(40))),
			client: v4, want: cookieInvalid, wantCC: seq(8),
		},
		{
			name:   "our cookie with trailing garbage (25 in all)",
			wire:   cookieQueryWire(t, true, cookieOptionWire(dns.EDNS0COOKIE, append(made(now, v4), 0))),
			client: v4, want: cookieInvalid, wantCC: cc,
		},
		{
			name: "first COOKIE option counts",
			wire: cookieQueryWire(t, true, append(cookieOptionWire(dns.EDNS0COOKIE, made(now, v4)),
				cookieOptionWire(dns.EDNS0COOKIE, seq(7))...)),
			client: v4, want: cookieValid, wantCC: cc,
		},
		{name: "malformed, empty", wire: cookieQueryWire(t, true, cookieOptionWire(dns.EDNS0COOKIE, nil)), client: v4, want: cookieMalformed},
		{name: "malformed, 1 byte", wire: cookieQueryWire(t, true, cookieOptionWire(dns.EDNS0COOKIE, seq(1))), client: v4, want: cookieMalformed},
		{name: "malformed, 7 bytes", wire: cookieQueryWire(t, true, cookieOptionWire(dns.EDNS0COOKIE, seq(7))), client: v4, want: cookieMalformed},
		{name: "malformed, 9 bytes", wire: cookieQueryWire(t, true, cookieOptionWire(dns.EDNS0COOKIE, seq(9))), client: v4, want: cookieMalformed},
		{name: "malformed, 15 bytes", wire: cookieQueryWire(t, true, cookieOptionWire(dns.EDNS0COOKIE, seq(15))), client: v4, want: cookieMalformed},
		{name: "malformed, 41 bytes", wire: cookieQueryWire(t, true, cookieOptionWire(dns.EDNS0COOKIE, seq(41))), client: v4, want: cookieMalformed},
		{name: "malformed, 500 bytes", wire: cookieQueryWire(t, true, cookieOptionWire(dns.EDNS0COOKIE, seq(500))), client: v4, want: cookieMalformed},
	}

	s := cookieAt(cookieTestSecret, now)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := new(dns.Msg)
			if err := req.Unpack(tc.wire); err != nil {
				t.Fatalf("unpack: %v", err)
			}
			before := req.String()
			got, gotCC := s.check(req, tc.client)
			if got != tc.want {
				t.Errorf("verdict = %v, want %v", got, tc.want)
			}
			if !bytes.Equal(gotCC, tc.wantCC) {
				t.Errorf("client cookie = %x, want %x", gotCC, tc.wantCC)
			}
			if req.String() != before {
				t.Errorf("check modified the request")
			}
			if gotCC == nil {
				return
			}
			// Whatever came in, the cookie we attach to the reply is
			// valid for this client, now and for the next hour.
			c := cookieReply(t, s, req, gotCC, tc.client)
			if len(c) != 24 || !bytes.Equal(c[:8], gotCC) {
				t.Fatalf("attached cookie = %x", c)
			}
			for _, at := range []int64{now, now + 3600} {
				v, _ := cookieAt(cookieTestSecret, at).check(cookieQuery(t, c), tc.client)
				if v != cookieValid {
					t.Errorf("attached cookie at now%+d: verdict %v, want valid", at-now, v)
				}
			}
		})
	}
}

// TestCookieCheckBuiltInCode covers COOKIE options that only a message
// built in code (not unpacked from the wire) can hold.
func TestCookieCheckBuiltInCode(t *testing.T) {
	client := netip.MustParseAddr("192.0.2.1")
	s := cookieAt(cookieTestSecret, 1700000000)
	msg := func(opts ...dns.EDNS0) *dns.Msg {
		m := new(dns.Msg)
		m.SetQuestion("example.org.", dns.TypeA)
		m.SetEdns0(1232, false)
		o := m.IsEdns0()
		o.Option = append(o.Option, opts...)
		return m
	}
	tests := []struct {
		name string
		req  *dns.Msg
		want cookieVerdict
	}{
		{"nil message", nil, cookieNone},
		{"odd-length hex", msg(&dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0123456789abcdef0"}), cookieMalformed},
		{"not hex", msg(&dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0123456789abcdeg"}), cookieMalformed},
		{"huge", msg(&dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: string(make([]byte, 1<<16))}), cookieMalformed},
		{"upper-case hex", msg(&dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0123456789ABCDEF"}), cookieClientOnly},
		{"EDNS0_LOCAL code 10", msg(&dns.EDNS0_LOCAL{Code: dns.EDNS0COOKIE, Data: make([]byte, 8)}), cookieClientOnly},
		{"EDNS0_LOCAL code 10, 7 bytes", msg(&dns.EDNS0_LOCAL{Code: dns.EDNS0COOKIE, Data: make([]byte, 7)}), cookieMalformed},
		{"EDNS0_LOCAL other code", msg(&dns.EDNS0_LOCAL{Code: 65001, Data: make([]byte, 8)}), cookieNone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got, _ := s.check(tc.req, client); got != tc.want {
				t.Errorf("verdict = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCookieAttach(t *testing.T) {
	client := netip.MustParseAddr("2001:db8::53")
	s := cookieAt(cookieTestSecret, 1700000000)
	cc := cookieMustHex(t, "fedcba9876543210")

	t.Run("no OPT, nothing added", func(t *testing.T) {
		resp := new(dns.Msg)
		resp.SetQuestion("example.org.", dns.TypeA)
		s.attach(resp, cc, client)
		if len(resp.Extra) != 0 {
			t.Errorf("attach added %v", resp.Extra)
		}
	})

	t.Run("nil message", func(t *testing.T) {
		s.attach(nil, cc, client) // must not panic
	})

	for _, bad := range [][]byte{nil, {}, cc[:7], append(bytes.Clone(cc), 0)} {
		t.Run(fmt.Sprintf("client cookie of %d bytes", len(bad)), func(t *testing.T) {
			resp := new(dns.Msg)
			resp.SetEdns0(1232, false)
			s.attach(resp, bad, client)
			if n := len(resp.IsEdns0().Option); n != 0 {
				t.Errorf("attach added %d options", n)
			}
		})
	}

	t.Run("replaces cookies, keeps other options", func(t *testing.T) {
		resp := new(dns.Msg)
		resp.SetQuestion("example.org.", dns.TypeA)
		resp.Response = true
		resp.SetEdns0(1232, true)
		opt := resp.IsEdns0()
		nsid := &dns.EDNS0_NSID{Code: dns.EDNS0NSID, Nsid: "6e7331"}
		opt.Option = []dns.EDNS0{
			&dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "zz"}, // would not even pack
			nsid,
			&dns.EDNS0_LOCAL{Code: dns.EDNS0COOKIE, Data: []byte{1}},
			&dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "00"},
		}
		old := opt.Option
		oldCopy := append([]dns.EDNS0(nil), old...)
		s.attach(resp, cc, client)

		if len(opt.Option) != 2 || opt.Option[0] != nsid {
			t.Fatalf("options after attach = %v", opt.Option)
		}
		c, ok := opt.Option[1].(*dns.EDNS0_COOKIE)
		if !ok || c.Code != dns.EDNS0COOKIE {
			t.Fatalf("option %T %v, want *dns.EDNS0_COOKIE", opt.Option[1], opt.Option[1])
		}
		for i := range old {
			if old[i] != oldCopy[i] {
				t.Errorf("attach modified the old option slice in place at %d", i)
			}
		}
		got := cookieFromReply(t, resp)
		if len(got) != 24 || !bytes.Equal(got[:8], cc) {
			t.Fatalf("cookie on the wire = %x", got)
		}
		if !opt.Do() {
			t.Errorf("attach cleared the DO bit")
		}
		if v, gotCC := s.check(cookieQuery(t, got), client); v != cookieValid || !bytes.Equal(gotCC, cc) {
			t.Errorf("check of attached cookie = %v %x, want valid %x", v, gotCC, cc)
		}
	})

	t.Run("layout", func(t *testing.T) {
		resp := new(dns.Msg)
		resp.SetEdns0(1232, false)
		s.attach(resp, cc, client)
		got := cookieFromReply(t, resp)
		// client cookie | version 1 | reserved 0 0 0 | timestamp | hash
		if got[8] != 1 || got[9] != 0 || got[10] != 0 || got[11] != 0 {
			t.Errorf("version/reserved = % x, want 01 00 00 00", got[8:12])
		}
		if ts := binary.BigEndian.Uint32(got[12:16]); ts != 1700000000 {
			t.Errorf("timestamp = %d, want 1700000000", ts)
		}
	})

	t.Run("attached cookie comes out of a truncated reply", func(t *testing.T) {
		req := cookieQuery(t, cc)
		resp := new(dns.Msg)
		resp.SetReply(req)
		for i := range 100 {
			resp.Answer = append(resp.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: "example.org.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
				A:   netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}).AsSlice(),
			})
		}
		resp.SetEdns0(1232, false)
		s.attach(resp, cc, client)
		resp.Truncate(512)
		if !resp.Truncated {
			t.Fatal("reply was not truncated")
		}
		if got := cookieFromReply(t, resp); len(got) != 24 {
			t.Errorf("cookie after Truncate = %x", got)
		}
	})
}

// TestCookieSerialWrap checks the timestamp comparison across the 2^32
// second wrap (in the year 2106), which RFC 9018 requires to be done with
// serial number arithmetic.
func TestCookieSerialWrap(t *testing.T) {
	client := netip.MustParseAddr("192.0.2.1")
	cc := cookieMustHex(t, "0011223344556677")
	const wrap = int64(1) << 32
	tests := []struct {
		made, checked int64
		want          cookieVerdict
	}{
		{wrap - 2600, wrap + 1000, cookieValid},   // an hour old across the wrap
		{wrap - 2601, wrap + 1000, cookieInvalid}, // an hour and a second
		{wrap + 200, wrap - 100, cookieValid},     // five minutes ahead across the wrap
		{wrap + 201, wrap - 100, cookieInvalid},   // and a second more
	}
	for _, tc := range tests {
		c := cookieReply(t, cookieAt(cookieTestSecret, tc.made), cookieQuery(t, cc), cc, client)
		if v, _ := cookieAt(cookieTestSecret, tc.checked).check(cookieQuery(t, c), client); v != tc.want {
			t.Errorf("made at %d, checked at %d: %v, want %v", tc.made, tc.checked, v, tc.want)
		}
	}
}

// TestCookieSecret checks that another secret makes other cookies and
// doesn't accept ours.
func TestCookieSecret(t *testing.T) {
	client := netip.MustParseAddr("192.0.2.1")
	cc := cookieMustHex(t, "0011223344556677")
	other := cookieTestSecret
	other[15] ^= 1
	a := cookieReply(t, cookieAt(cookieTestSecret, 1700000000), cookieQuery(t, cc), cc, client)
	b := cookieReply(t, cookieAt(other, 1700000000), cookieQuery(t, cc), cc, client)
	if bytes.Equal(a, b) {
		t.Fatal("two secrets made the same cookie")
	}
	if v, _ := cookieAt(other, 1700000000).check(cookieQuery(t, a), client); v != cookieInvalid {
		t.Errorf("other secret: %v, want invalid", v)
	}
	// A serverCookies without a clock (a zero value with a secret) uses the
	// wall clock.
	s := &serverCookies{secret: cookieTestSecret}
	c := cookieReply(t, s, cookieQuery(t, cc), cc, client)
	if v, _ := newServerCookies(cookieTestSecret).check(cookieQuery(t, c), client); v != cookieValid {
		t.Errorf("wall clock: %v, want valid", v)
	}
}

// TestCookieRFC9018Vectors checks interoperability with the examples of
// RFC 9018 Appendix A: the cookies other implementations make are valid
// here, and the ones made here are byte for byte the ones in the RFC.
func TestCookieRFC9018Vectors(t *testing.T) {
	tests := []struct {
		name    string
		secret  string
		client  string
		query   string // the COOKIE option of the query
		checkAt int64  // when the query's server cookie is checked
		verdict cookieVerdict
		replyAt int64
		reply   string // the COOKIE option of the reply
	}{
		{
			name:    "A.1 learning a new server cookie",
			secret:  "e5e973e5a6b2a43f48e7dc849e37bfcf",
			client:  "198.51.100.100",
			query:   "2464c4abcf10c957",
			checkAt: 1559731985, verdict: cookieClientOnly,
			replyAt: 1559731985,
			reply:   "2464c4abcf10c957010000005cf79f111f8130c3eee29480",
		},
		{
			name:    "A.2 the same client learning a renewed server cookie",
			secret:  "e5e973e5a6b2a43f48e7dc849e37bfcf",
			client:  "198.51.100.100",
			query:   "2464c4abcf10c957010000005cf79f111f8130c3eee29480",
			checkAt: 1559734385, verdict: cookieValid,
			replyAt: 1559734385,
			reply:   "2464c4abcf10c957010000005cf7a871d4a564a1442aca77",
		},
		{
			// The query's server cookie was made by another implementation
			// that sets the reserved bytes; they are part of the hash. It
			// is checked when it was made: at the reply's time it is 1h52m
			// old, past the one-hour lifetime.
			name:    "A.3 another client, cookie with reserved bytes set",
			secret:  "e5e973e5a6b2a43f48e7dc849e37bfcf",
			client:  "203.0.113.203",
			query:   "fc93fc62807ddb8601abcdef5cf78f71a314227b6679ebf5",
			checkAt: 1559727985, verdict: cookieValid,
			replyAt: 1559734700,
			reply:   "fc93fc62807ddb86010000005cf7a9acf73a7810aca2381e",
		},
		{
			name:    "A.3 the same cookie at the reply's time is too old",
			secret:  "e5e973e5a6b2a43f48e7dc849e37bfcf",
			client:  "203.0.113.203",
			query:   "fc93fc62807ddb8601abcdef5cf78f71a314227b6679ebf5",
			checkAt: 1559734700, verdict: cookieInvalid,
			replyAt: 1559734700,
			reply:   "fc93fc62807ddb86010000005cf7a9acf73a7810aca2381e",
		},
		{
			name:    "A.4 IPv6 client, cookie made with the old secret",
			secret:  "dd3bdf9344b678b185a6f5cb60fca715",
			client:  "2001:db8:220:1:59de:d0f4:8769:82b8",
			query:   "22681ab97d52c298010000005cf7c57926556bd0934c72f8",
			checkAt: 1559741817, verdict: cookieValid,
			replyAt: 1559741817,
			reply:   "22681ab97d52c298010000005cf7c57926556bd0934c72f8",
		},
		{
			name:    "A.4 IPv6 client, after the secret rolled over",
			secret:  "445536bcd2513298075a5d379663c962",
			client:  "2001:db8:220:1:59de:d0f4:8769:82b8",
			query:   "22681ab97d52c298010000005cf7c57926556bd0934c72f8",
			checkAt: 1559741961, verdict: cookieInvalid,
			replyAt: 1559741961,
			reply:   "22681ab97d52c298010000005cf7c609a6bb79d16625507a",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			secret := cookieMustSecret(tc.secret)
			client := netip.MustParseAddr(tc.client)
			req := cookieQuery(t, cookieMustHex(t, tc.query))
			v, cc := cookieAt(secret, tc.checkAt).check(req, client)
			if v != tc.verdict {
				t.Errorf("verdict = %v, want %v", v, tc.verdict)
			}
			got := cookieReply(t, cookieAt(secret, tc.replyAt), req, cc, client)
			if hex.EncodeToString(got) != tc.reply {
				t.Errorf("reply cookie = %x, want %s", got, tc.reply)
			}
		})
	}
}

func TestCookieVerdictString(t *testing.T) {
	for v, want := range map[cookieVerdict]string{
		cookieNone: "none", cookieClientOnly: "client-only", cookieValid: "valid",
		cookieInvalid: "invalid", cookieMalformed: "malformed", cookieVerdict(99): "unknown",
	} {
		if got := v.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(v), got, want)
		}
	}
}

// FuzzCookieCheck feeds arbitrary wire messages to check and attach: neither
// may panic, check must not change the request, the verdict and client
// cookie must agree, and a reply built from the request with attach must
// pack and carry a cookie that checks as valid for the same client.
func FuzzCookieCheck(f *testing.F) {
	const now = 1700000000
	s := cookieAt(cookieTestSecret, now)
	cc := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	f.Add(cookieQueryWire(f, false, nil))
	f.Add(cookieQueryWire(f, true, nil))
	for _, n := range []int{0, 7, 8, 9, 16, 24, 40, 41} {
		f.Add(cookieQueryWire(f, true, cookieOptionWire(dns.EDNS0COOKIE, make([]byte, n))))
	}
	good := cookieReply(f, s, cookieQuery(f, cc), cc, netip.MustParseAddr("192.0.2.1"))
	f.Add(cookieQueryWire(f, true, cookieOptionWire(dns.EDNS0COOKIE, good)))
	f.Add(cookieQueryWire(f, true, append(cookieOptionWire(dns.EDNS0NSID, nil),
		cookieOptionWire(dns.EDNS0COOKIE, good)...)))

	clients := []netip.Addr{
		netip.MustParseAddr("192.0.2.1"),
		netip.MustParseAddr("2001:db8::1"),
	}
	f.Fuzz(func(t *testing.T, wire []byte) {
		req := new(dns.Msg)
		if err := req.Unpack(wire); err != nil {
			t.Skip()
		}
		for i, client := range clients {
			other := clients[1-i]
			before := req.String()
			v, gotCC := s.check(req, client)
			if req.String() != before {
				t.Fatalf("check modified the request")
			}
			switch v {
			case cookieNone, cookieMalformed:
				if gotCC != nil {
					t.Fatalf("verdict %v with client cookie %x", v, gotCC)
				}
			case cookieClientOnly, cookieValid, cookieInvalid:
				if len(gotCC) != 8 {
					t.Fatalf("verdict %v with client cookie %x", v, gotCC)
				}
			default:
				t.Fatalf("verdict %d", int(v))
			}
			if v == cookieValid && i == 1 {
				t.Fatalf("a cookie made for %v is valid for %v", clients[0], client)
			}

			// The reply: the request's OPT record copied (with whatever
			// options it has, COOKIE included), or a fresh one when the
			// request has none or its options don't pack.
			resp := new(dns.Msg)
			resp.SetReply(req)
			if opt := req.IsEdns0(); opt != nil {
				resp.Extra = append(resp.Extra, dns.Copy(opt))
				probe := resp.Copy()
				probe.IsEdns0().Option = nil
				for _, o := range resp.IsEdns0().Option {
					if !isCookieOption(o) {
						probe.IsEdns0().Option = append(probe.IsEdns0().Option, o)
					}
				}
				if _, err := probe.Pack(); err != nil {
					resp.Extra = nil
				}
			}
			if resp.IsEdns0() == nil {
				resp.SetEdns0(1232, false)
			}
			if _, err := resp.Copy().Pack(); err != nil && len(resp.Question) > 0 {
				// The question itself doesn't pack (e.g. a name that
				// unpacked but is too long to pack again): nothing
				// attach could do about it.
				resp.Question = nil
			}
			useCC := gotCC
			if useCC == nil {
				useCC = cc
			}
			s.attach(resp, useCC, client)
			b, err := resp.Pack()
			if err != nil {
				t.Fatalf("reply with attached cookie does not pack: %v\n%v", err, resp)
			}
			back := new(dns.Msg)
			if err := back.Unpack(b); err != nil {
				t.Fatalf("reply with attached cookie does not unpack: %v", err)
			}
			got := cookieFromReply(t, back)
			if len(got) != 24 || !bytes.Equal(got[:8], useCC) {
				t.Fatalf("attached cookie = %x, client cookie %x", got, useCC)
			}
			if v, c := s.check(cookieQuery(t, got), client); v != cookieValid || !bytes.Equal(c, useCC) {
				t.Fatalf("attached cookie %x checks as %v %x for the same client", got, v, c)
			}
			if v, _ := s.check(cookieQuery(t, got), other); v != cookieInvalid {
				t.Fatalf("attached cookie %x checks as %v for another client", got, v)
			}
		}
	})
}
