package coral

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/miekg/dns"
)

// caaProperty is one CAA record (RFC 8659) that the zone apexes carry.
type caaProperty struct {
	tag   string // issue, issuewild or iodef
	value string // as on the wire: "letsencrypt.org; validationmethods=dns-01"
}

// Bounds of the CAA RRset: it must fit a UDP answer of ednsUDPSize octets
// with room for the question and the OPT record, so that no CA has to retry
// over TCP and the answer is no bigger an amplifier than it must be.
const (
	maxCAARecords = 8
	maxCAAOctets  = 1000 // the RRset's records on the wire, owner compressed
)

// parseCAA reads the arguments of one caa line:
//
//	caa [issue|issuewild] ISSUER [accounturi=URI] [validationmethods=METHOD[,METHOD...]]
//	caa iodef URI
//
// Without a tag, ISSUER may issue both kinds of certificate: the line
// becomes an issue and an issuewild property with the same value.
func parseCAA(args []string) ([]caaProperty, error) {
	if len(args) == 0 {
		return nil, errors.New("caa needs an issuer (caa [issue|issuewild] ISSUER [PARAM=VALUE...]) or iodef URI")
	}
	switch args[0] {
	case "iodef":
		if len(args) != 2 {
			return nil, fmt.Errorf("caa iodef takes one URI, got %d arguments", len(args)-1)
		}
		if err := checkIodef(args[1]); err != nil {
			return nil, err
		}
		return []caaProperty{{"iodef", args[1]}}, nil
	case "issue", "issuewild":
		value, err := issueValue(args[1:])
		if err != nil {
			return nil, err
		}
		return []caaProperty{{args[0], value}}, nil
	}
	value, err := issueValue(args)
	if err != nil {
		return nil, err
	}
	return []caaProperty{{"issue", value}, {"issuewild", value}}, nil
}

// issueValue builds the value of an issue or issuewild property (RFC 8659
// §4.2, with the parameters of RFC 8657) from ISSUER [PARAM=VALUE...].
func issueValue(args []string) (string, error) {
	if len(args) == 0 {
		return "", errors.New("caa: the issuer's domain name is missing")
	}
	issuer := strings.ToLower(strings.TrimSuffix(args[0], "."))
	if err := checkIssuer(issuer); err != nil {
		return "", err
	}
	value := issuer
	seen := map[string]bool{}
	for _, a := range args[1:] {
		k, v, ok := strings.Cut(a, "=")
		if !ok || v == "" {
			return "", fmt.Errorf("caa parameter %q: want NAME=VALUE", a)
		}
		if seen[k] {
			return "", fmt.Errorf("caa parameter %s given twice", k)
		}
		seen[k] = true
		var err error
		switch k {
		case "accounturi":
			err = checkAccountURI(v)
		case "validationmethods":
			err = checkMethods(v)
		default:
			err = fmt.Errorf("caa parameter %q: want accounturi or validationmethods (RFC 8657)", k)
		}
		if err != nil {
			return "", err
		}
		value += "; " + k + "=" + v
	}
	return value, nil
}

// checkIssuer checks an issuer-domain-name (RFC 8659 §4.2): labels of
// letters, digits and inner hyphens.
func checkIssuer(s string) error {
	if s == "" || len(s) > 253 {
		return fmt.Errorf("caa issuer %q: want the CA's domain name, such as letsencrypt.org", s)
	}
	for l := range strings.SplitSeq(s, ".") {
		if !isCAALabel(l, false) || len(l) > 63 {
			return fmt.Errorf("caa issuer %q: want the CA's domain name, such as letsencrypt.org", s)
		}
	}
	return nil
}

// isCAALabel reports whether s is (ALPHA / DIGIT) *( *("-") (ALPHA /
// DIGIT)), the grammar of issuer labels and of validation method names.
// Upper case is allowed only where the RFC allows it (method names).
func isCAALabel(s string, upper bool) bool {
	if s == "" || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || upper && c >= 'A' && c <= 'Z'
		if !ok {
			return false
		}
	}
	return true
}

// checkAccountURI checks an RFC 8657 accounturi: the ACME account's URL,
// which RFC 8555 requires to be https, in the characters a CAA parameter
// value may hold (no space, no ';').
func checkAccountURI(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.Host == "" || !isCAAValue(s) {
		return fmt.Errorf("caa accounturi %q: want the ACME account's https URL", s)
	}
	return nil
}

// checkMethods checks an RFC 8657 validationmethods list: method names
// (dns-01, http-01, tls-alpn-01, …) separated by commas.
func checkMethods(s string) error {
	seen := map[string]bool{}
	for m := range strings.SplitSeq(s, ",") {
		if !isCAALabel(m, true) {
			return fmt.Errorf("caa validationmethods %q: want method names such as dns-01, separated by commas", s)
		}
		if seen[m] {
			return fmt.Errorf("caa validationmethods %q: %s given twice", s, m)
		}
		seen[m] = true
	}
	return nil
}

// checkIodef checks an iodef URL (RFC 8659 §4.4): where CAs report refused
// requests.
func checkIodef(s string) error {
	u, err := url.Parse(s)
	ok := err == nil && isCAAValue(s)
	switch {
	case !ok:
	case u.Scheme == "mailto":
		ok = u.Opaque != "" && strings.Contains(u.Opaque, "@")
	case u.Scheme == "http" || u.Scheme == "https":
		ok = u.Host != ""
	default:
		ok = false
	}
	if !ok {
		return fmt.Errorf("caa iodef %q: want a mailto:, http: or https: URL", s)
	}
	return nil
}

// isCAAValue reports whether s holds only the characters of a parameter
// value (RFC 8659 §4.2: %x21-3A / %x3C-7E, printable ASCII but ';').
func isCAAValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x21 || c > 0x7e || c == ';' {
			return false
		}
	}
	return s != ""
}

// addCAA appends props to the configured set, refusing duplicates and a set
// too big for one UDP answer.
func addCAA(set []caaProperty, props []caaProperty) ([]caaProperty, error) {
	for _, p := range props {
		for _, q := range set {
			if q == p {
				return nil, fmt.Errorf("caa %s %q given twice", p.tag, p.value)
			}
		}
		set = append(set, p)
	}
	if len(set) > maxCAARecords {
		return nil, fmt.Errorf("caa: %d records, at most %d (a line without issue or issuewild makes two)", len(set), maxCAARecords)
	}
	if n := caaOctets(set); n > maxCAAOctets {
		return nil, fmt.Errorf("caa: the records take %d octets, at most %d fit one UDP answer", n, maxCAAOctets)
	}
	return set, nil
}

// caaOctets is the wire size of the CAA RRset: per record a compressed
// owner (2), type, class, TTL and length (10), flags and tag length (2), the
// tag and the value.
func caaOctets(set []caaProperty) int {
	n := 0
	for _, p := range set {
		n += 2 + 10 + 2 + len(p.tag) + len(p.value)
	}
	return n
}

// caaAt answers a CAA query at a zone apex (the coral zone's, each level
// zone's, the alias zone's) with the configured set; ok is false for the
// other names and, without a set, for the apexes that answer NODATA on
// their own. Names below the apexes have no CAA records: a CA climbs to
// the apex (RFC 8659 §3), so one set per apex covers every name, and the
// names below answer NODATA (or NXDOMAIN), which lets the climb go on.
func (b *builder) caaAt(p parsedName) (kind string, ok bool) {
	switch p.kind {
	case kindCoralApex, kindAliasApex:
	case kindLevelApex:
		// A CA's resolver that has been referred to a level zone asks its
		// servers about the apex; another referral would be lame. These
		// servers serve both sides of the cut, and answer from the child.
		if len(b.c.set.caa) == 0 {
			return b.nodata(min(p.level, b.level()), b.c.set.negTTL), true
		}
	default:
		return "", false
	}
	if len(b.c.set.caa) == 0 {
		return "", false
	}
	for _, prop := range b.c.set.caa {
		b.m.Answer = append(b.m.Answer, &dns.CAA{
			Hdr: dns.RR_Header{Name: b.qname, Rrtype: dns.TypeCAA, Class: dns.ClassINET, Ttl: b.c.set.nsTTL},
			Tag: prop.tag, Value: prop.value,
		})
	}
	return respAnswer, true
}
