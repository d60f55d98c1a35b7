package coralname

// The lexical rules the grammar is made of. They stay unexported: other
// packages use the grammar (ParseHost, CheckDomain, CanonicalHost, URLPort),
// so that no caller rebuilds a rule of its own from the pieces.

import (
	"strconv"
	"strings"
)

// validPortDigits accepts the proxy's own port as a Host header may carry
// it: empty (RFC 3986 allows "host:") or up to 5 digits ≤ 65535.
func validPortDigits(s string) bool {
	if s == "" {
		return true
	}
	if len(s) > 5 || !isDigits(s) {
		return false
	}
	n, _ := strconv.Atoi(s)
	return n <= 65535
}

// parsePort parses an origin port label: 1–65535, no leading zeros.
func parsePort(s string) (int, bool) {
	if s == "" || len(s) > 5 || s[0] == '0' || !isDigits(s) {
		return 0, false
	}
	n, _ := strconv.Atoi(s)
	if n < 1 || n > 65535 {
		return 0, false
	}
	return n, true
}

// isDottedQuad reports whether s is an IPv4 address in canonical
// dotted-quad form: four decimal octets 0–255 without leading zeros.
func isDottedQuad(s string) bool {
	for i := range 4 {
		n := 0
		for n < len(s) && n < 4 && '0' <= s[n] && s[n] <= '9' {
			n++
		}
		if n == 0 || n > 3 || n > 1 && s[0] == '0' {
			return false
		}
		if v, _ := strconv.Atoi(s[:n]); v > 255 {
			return false
		}
		s = s[n:]
		if i < 3 {
			if s == "" || s[0] != '.' {
				return false
			}
			s = s[1:]
		}
	}
	return s == ""
}

// carries reports whether zone occurs in name on label boundaries.
func carries(name, zone string) bool {
	for i := 0; i+len(zone) <= len(name); {
		j := strings.Index(name[i:], zone)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(zone)
		if (j == 0 || name[j-1] == '.') && (end == len(name) || name[end] == '.') {
			return true
		}
		i = j + 1
	}
	return false
}

// checkLabel returns what is wrong with a lower-case host label, or "".
// The last label (top-level) may not contain '_'.
func checkLabel(l string, last bool) string {
	switch {
	case l == "":
		return "empty label"
	case len(l) > MaxLabelLen:
		return "label longer than 63 characters"
	case l[0] == '-' || l[len(l)-1] == '-':
		return "label starts or ends with '-'"
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-':
		case c == '_' && !last:
		case c >= 0x80:
			return "non-ASCII host (send IDNs as punycode)"
		default:
			return "invalid character " + strconv.QuoteRune(rune(c)) + " in label"
		}
	}
	return ""
}

// isDigits reports whether s is one or more ASCII digits.
func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// lowerASCII lower-cases ASCII letters only: Unicode case folding would
// let non-ASCII look-alikes (the Kelvin sign folds to 'k') match the zone.
func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'A' <= b[j] && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// trimDots removes one leading and one trailing dot.
func trimDots(s string) string {
	return strings.TrimSuffix(strings.TrimPrefix(s, "."), ".")
}
