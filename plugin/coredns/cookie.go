package coral

import (
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"time"

	"github.com/miekg/dns"
)

// DNS Cookies (RFC 7873) with server cookies made the interoperable way of
// RFC 9018.
//
// Why we have them: BIND 9.18 and later (since the CVE-2025-40778 fix) only
// trusts records in the authority section of a reply that came over TCP or
// carries a valid DNS cookie, so an authoritative server that answers over
// UDP with delegations or NS sets must speak cookies.
//
// What the caller (ServeDNS) is expected to do with a request:
//
//	verdict, cc := cookies.check(req, clientAddr)
//	if verdict == cookieMalformed {
//		// RFC 7873 §5.2.2: answer FORMERR (with an OPT record, but no
//		// COOKIE option, as there is no client cookie to echo).
//	}
//	... build the reply as usual, whatever the verdict ...
//	if cc != nil { // cookieClientOnly, cookieValid or cookieInvalid
//		// make sure the reply has an OPT record, then:
//		cookies.attach(reply, cc, clientAddr)
//	}
//
// We never answer BADCOOKIE or refuse for want of a cookie: this server does
// not require cookies (RFC 7873 §5.2.3 and §5.2.4 allow answering
// normally), it hands them out and reports, through the verdict, whether
// the one it got back was ours. A valid one proves the client's address:
// such a query may start probes (proof.go), and a UDP query that needs a
// probe without such a proof (nor TCP, nor familiarity) is answered
// truncated, so that the client comes back over TCP. A reply to a request
// that had a client cookie always carries a fresh server cookie.
//
// Neither miekg/dns nor CoreDNS (v1.15) does anything with cookies: no
// checking, no echoing, no BADCOOKIE. Their EDNS handling does bear on the
// caller, though:
//
//   - Call check first. CoreDNS's request.Request.SizeAndDo, given a reply
//     without an OPT record, moves the request's own OPT record into the
//     reply and strips from it, in place, every option not registered with
//     edns.SetSupportedOption, the COOKIE option included; after that the
//     request has no cookie left to check.
//   - Do not register dns.EDNS0COOKIE with edns.SetSupportedOption: SizeAndDo
//     would then copy the client's COOKIE option, stale server cookie and
//     all, into replies.
//   - Call attach last, after SizeAndDo (or after giving the reply its own
//     OPT with SetEdns0) and before writing; Msg.Truncate (and so
//     request.Request.Scrub) keeps the OPT record and its options.
//   - Error replies CoreDNS writes itself (a plugin returning
//     dns.RcodeFormatError, ServerFailure, Refused or NotImplemented with a
//     nil error) carry no cookie; that is right for FORMERR. A plugin that
//     wants a cookie on a REFUSED or SERVFAIL reply must write that reply
//     itself.
//   - miekg/dns keeps the option as *dns.EDNS0_COOKIE with the bytes as a
//     lower-case hex string, and unpacks one of any length from the wire
//     (0 to 65535 bytes, odd lengths included): the RFC 7873 length rules
//     are enforced here, not there. A Cookie string that is not valid hex
//     (possible only in a message built in code) makes Msg.Pack fail with
//     "overflow packing opt"; attach always replaces such options.
//
// Layout of the COOKIE option (RFC 7873 §4), as carried in requests and
// replies:
//
//	client cookie    8 bytes
//	server cookie    8..32 bytes (absent in a client-only request)
//
// and of the server cookies we make (RFC 9018 §4), 16 bytes:
//
//	version    1 byte, 1
//	reserved   3 bytes, 0 when we make it (hashed as received when checked)
//	timestamp  4 bytes, seconds since the epoch modulo 2^32, big-endian
//	hash       8 bytes, SipHash-2-4 keyed by the secret over
//	           client cookie | version | reserved | timestamp | client IP
//	           (client IP: 4 bytes for IPv4, 16 for IPv6)

const (
	cookieClientLen    = 8  // client cookie (RFC 7873 §4.1)
	cookieServerMinLen = 8  // shortest server cookie (RFC 7873 §4.2)
	cookieServerMaxLen = 32 // longest server cookie (RFC 7873 §4.2)
	cookieServerLen    = 16 // RFC 9018 server cookie
	cookieVersion      = 1  // RFC 9018 server cookie version

	// cookieMaxAge and cookieMaxSkew bound the timestamp of a server cookie
	// we accept (RFC 9018 §4.3): not more than an hour old and not more than
	// five minutes in the future, to allow for clock differences between
	// the servers of an anycast set.
	cookieMaxAge  = 3600
	cookieMaxSkew = 300
)

// serverCookies makes and checks RFC 9018 server cookies with a secret.
//
// The secret should come from crypto/rand and, for an anycast set of
// servers (of any implementation that follows RFC 9018), be shared by all of
// them so that a cookie made by one is valid at the others. A
// serverCookies is safe for concurrent use; it holds no state besides the
// secret.
type serverCookies struct {
	secret [16]byte
	now    func() time.Time // time.Now unless a test says otherwise
}

// newServerCookies returns a serverCookies using secret and the wall clock.
func newServerCookies(secret [16]byte) *serverCookies {
	return &serverCookies{secret: secret, now: time.Now}
}

// cookieVerdict describes what the request carried.
type cookieVerdict int

const (
	// cookieNone: no OPT record, or no COOKIE option in it. Answer
	// normally, without a cookie.
	cookieNone cookieVerdict = iota
	// cookieClientOnly: a client cookie and no server cookie (the client
	// has not learnt ours yet). Answer normally and attach a cookie.
	cookieClientOnly
	// cookieValid: a client cookie and a server cookie we made for this
	// client address and client cookie, within its lifetime. Answer
	// normally and attach a fresh cookie.
	cookieValid
	// cookieInvalid: a client cookie and a well-formed server cookie that
	// is not a valid one of ours: wrong hash (another secret, another
	// client address or client cookie), too old (more than an hour), from
	// the future (more than five minutes ahead), not an RFC 9018 version 1
	// cookie, or not 16 bytes long. Answer normally (we don't require
	// cookies) and attach a fresh cookie, so the client learns a good one.
	cookieInvalid
	// cookieMalformed: the COOKIE option has a length RFC 7873 §5.2.2 says
	// to answer with FORMERR: shorter than 8 bytes, 9 to 15 bytes, or
	// longer than 40 bytes. Answer FORMERR, without a cookie.
	cookieMalformed
)

// String returns a short name for the verdict, suitable for logs and metric
// labels.
func (v cookieVerdict) String() string {
	switch v {
	case cookieNone:
		return "none"
	case cookieClientOnly:
		return "client-only"
	case cookieValid:
		return "valid"
	case cookieInvalid:
		return "invalid"
	case cookieMalformed:
		return "malformed"
	default:
		return "unknown"
	}
}

// check inspects the COOKIE option of req's OPT record (if any): returns
// the verdict and the client cookie (8 bytes).
//
// The client cookie is a fresh copy, returned for cookieClientOnly,
// cookieValid and cookieInvalid, and nil for cookieNone and
// cookieMalformed. client is the address the request came from (IPv4-mapped
// IPv6 addresses count as the IPv4 address; any zone is ignored). When the
// OPT record holds more than one COOKIE option, only the first is looked at.
// check does not modify req.
func (s *serverCookies) check(req *dns.Msg, client netip.Addr) (cookieVerdict, []byte) {
	raw, found, ok := requestCookie(req)
	switch {
	case !found:
		return cookieNone, nil
	case !ok:
		return cookieMalformed, nil
	}
	n := len(raw)
	if n < cookieClientLen || (n > cookieClientLen && n < cookieClientLen+cookieServerMinLen) ||
		n > cookieClientLen+cookieServerMaxLen {
		return cookieMalformed, nil
	}
	cc := make([]byte, cookieClientLen)
	copy(cc, raw)
	if n == cookieClientLen {
		return cookieClientOnly, cc
	}

	sc := raw[cookieClientLen:]
	// A server cookie of another length or version is well-formed as far
	// as RFC 7873 goes but can't be one of ours (perhaps it is from
	// another server behind the same address, or from before a change of
	// software): the client gets a new one.
	if len(sc) != cookieServerLen || sc[0] != cookieVersion {
		return cookieInvalid, cc
	}
	ts := binary.BigEndian.Uint32(sc[4:8])
	// Serial number arithmetic (RFC 1982) on the 32-bit timestamp: the
	// signed difference is right across the 2106 wrap.
	age := int64(int32(uint32(s.clock().Unix()) - ts))
	if age > cookieMaxAge || age < -cookieMaxSkew {
		return cookieInvalid, cc
	}
	// The reserved bytes are hashed as received (RFC 9018 §4.2): another
	// implementation may set them, and the hash still covers them.
	want := s.hash(cc, sc[:8], client)
	if subtle.ConstantTimeCompare(want[:], sc[8:16]) != 1 {
		return cookieInvalid, cc
	}
	return cookieValid, cc
}

// attach adds (or replaces) a COOKIE option in resp's OPT record holding
// clientCookie + a fresh server cookie for client. resp must already have
// an OPT record (the caller ensures it); if it has none, attach adds
// nothing.
//
// attach also adds nothing when clientCookie is not 8 bytes long (as for
// the nil client cookie check returns with cookieNone and cookieMalformed).
// Every COOKIE option already in resp's OPT record is removed and one new
// option appended; the option slice is rebuilt rather than modified in
// place, but the OPT record itself is changed, so it must not be the
// request's OPT record if the request is still to be looked at.
func (s *serverCookies) attach(resp *dns.Msg, clientCookie []byte, client netip.Addr) {
	if resp == nil || len(clientCookie) != cookieClientLen {
		return
	}
	opt := resp.IsEdns0()
	if opt == nil {
		return
	}

	var cookie [cookieClientLen + cookieServerLen]byte
	copy(cookie[:cookieClientLen], clientCookie)
	sc := cookie[cookieClientLen:]
	sc[0] = cookieVersion
	// sc[1:4], the reserved bytes, stay zero.
	binary.BigEndian.PutUint32(sc[4:8], uint32(s.clock().Unix()))
	h := s.hash(clientCookie, sc[:8], client)
	copy(sc[8:], h[:])

	options := make([]dns.EDNS0, 0, len(opt.Option)+1)
	for _, o := range opt.Option {
		if !isCookieOption(o) {
			options = append(options, o)
		}
	}
	options = append(options, &dns.EDNS0_COOKIE{
		Code:   dns.EDNS0COOKIE,
		Cookie: hex.EncodeToString(cookie[:]),
	})
	opt.Option = options
}

// hash computes the RFC 9018 Hash field: SipHash-2-4, keyed by the secret,
// over client cookie | version | reserved | timestamp | client IP, as the
// 8 bytes the SipHash reference implementation outputs (the 64-bit result
// little-endian).
func (s *serverCookies) hash(clientCookie, versionReservedTimestamp []byte, client netip.Addr) [8]byte {
	var buf [cookieClientLen + 8 + 16]byte
	n := copy(buf[:], clientCookie[:cookieClientLen])
	n += copy(buf[n:], versionReservedTimestamp[:8])
	client = client.Unmap()
	if client.Is4() {
		ip := client.As4()
		n += copy(buf[n:], ip[:])
	} else if client.Is6() {
		ip := client.As16()
		n += copy(buf[n:], ip[:])
	}
	// An invalid (zero) netip.Addr contributes no bytes; callers always
	// have the request's source address, so this does not happen in
	// practice.
	var out [8]byte
	binary.LittleEndian.PutUint64(out[:], siphash24(s.secret, buf[:n]))
	return out
}

func (s *serverCookies) clock() time.Time {
	if s.now == nil {
		return time.Now()
	}
	return s.now()
}

// requestCookie returns the raw bytes of the first COOKIE option in req's
// OPT record. found reports whether there is such an option; ok is false
// when it is malformed whatever its length turns out to be: text that is
// not hex, or longer than the longest valid option.
//
// miekg/dns unpacks option code 10 of any length (0 to 65535 bytes) into
// an *dns.EDNS0_COOKIE whose Cookie field is the hex encoding of the bytes,
// so from the wire the hex always decodes; a message built in code may
// carry odd-length or non-hex text, which is reported as malformed. A
// COOKIE option built in code as a *dns.EDNS0_LOCAL with code 10 is read
// too.
func requestCookie(req *dns.Msg) (raw []byte, found, ok bool) {
	if req == nil {
		return nil, false, false
	}
	opt := req.IsEdns0()
	if opt == nil {
		return nil, false, false
	}
	for _, o := range opt.Option {
		switch o := o.(type) {
		case *dns.EDNS0_COOKIE:
			if o == nil {
				continue
			}
			// Anything longer than the longest valid option is malformed
			// whatever it holds; don't bother decoding it.
			if len(o.Cookie) > 2*(cookieClientLen+cookieServerMaxLen) {
				return nil, true, false
			}
			b, err := hex.DecodeString(o.Cookie)
			if err != nil {
				return nil, true, false
			}
			return b, true, true
		case *dns.EDNS0_LOCAL:
			if o != nil && o.Code == dns.EDNS0COOKIE {
				return o.Data, true, true
			}
		}
	}
	return nil, false, false
}

// isCookieOption reports whether o is a COOKIE option.
func isCookieOption(o dns.EDNS0) bool {
	switch o := o.(type) {
	case *dns.EDNS0_COOKIE:
		return true
	case *dns.EDNS0_LOCAL:
		return o != nil && o.Code == dns.EDNS0COOKIE
	}
	return false
}
