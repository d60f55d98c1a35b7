package httpcache

import (
	"net/http"
	"slices"
	"strings"
	"time"
)

// ParseHTTPDate parses an HTTP-date exactly as RFC 9110 §5.6.7 defines
// it: the preferred IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT") and the
// two obsolete forms recipients must accept, rfc850-date ("Sunday,
// 06-Nov-94 08:49:37 GMT") and asctime-date ("Sun Nov  6 08:49:37 1994").
// Everything else is invalid, including what net/http's lenient ParseTime
// lets through (a one-digit hour, runs of spaces, a lower-case "gmt"):
// an invalid Expires means "already expired" (RFC 9111 §5.3), so a loose
// parse would keep a response fresh that the origin meant to be stale.
func ParseHTTPDate(s string) (time.Time, bool) {
	var layout, day, month string
	switch {
	case shaped(s, "Aaa, 00 Aaa 0000 00:00:00 GMT"):
		layout, day, month = http.TimeFormat, s[0:3], s[8:11]
	case shaped(s, "Aaa Aaa 00 00:00:00 0000") || shaped(s, "Aaa Aaa  0 00:00:00 0000"):
		layout, day, month = time.ANSIC, s[0:3], s[4:7]
	default:
		comma := strings.IndexByte(s, ',')
		if comma < 0 || !slices.Contains(longDayNames, s[:comma]) || !shaped(s[comma:], ", 00-Aaa-00 00:00:00 GMT") {
			return time.Time{}, false
		}
		layout, day, month = "Monday, 02-Jan-06 15:04:05 GMT", s[:3], s[comma+5:comma+8]
	}
	// Names are case-sensitive; time.Parse would take any case.
	if !slices.Contains(dayNames, day) || !slices.Contains(monthNames, month) {
		return time.Time{}, false
	}
	t, err := time.Parse(layout, s)
	if err != nil {
		return time.Time{}, false
	}
	return t.UTC(), true
}

// shaped reports whether s matches pattern character by character: '0' is
// any digit, 'A' an upper-case and 'a' a lower-case letter, ' ' exactly one
// space, anything else itself.
func shaped(s, pattern string) bool {
	if len(s) != len(pattern) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c, p := s[i], pattern[i]
		switch p {
		case '0':
			if c < '0' || c > '9' {
				return false
			}
		case 'A':
			if c < 'A' || c > 'Z' {
				return false
			}
		case 'a':
			if c < 'a' || c > 'z' {
				return false
			}
		default:
			if c != p {
				return false
			}
		}
	}
	return true
}

var (
	dayNames     = []string{"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"}
	longDayNames = []string{"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"}
	monthNames   = []string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}
)
