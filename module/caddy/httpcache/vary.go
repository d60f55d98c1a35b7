package httpcache

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// VaryKey is the secondary cache key of a response with the given Vary
// value (all its field lines joined with commas) for a request: each
// nominated request field, by lower-case name in sorted order without
// duplicates, with its field lines combined and whitespace normalized
// (RFC 9111 §4.1). A field absent from the request is distinct from one
// present but empty. ok is false for "*" or an invalid field name (not
// cacheable); no nominated fields give "", true.
func VaryKey(vary string, reqHeader http.Header) (string, bool) {
	var names []string
	for _, f := range strings.Split(vary, ",") {
		f = strings.TrimSpace(f)
		switch {
		case f == "":
			continue
		case f == "*" || !IsToken(f):
			return "", false
		}
		names = append(names, strings.ToLower(f))
	}
	slices.Sort(names)
	names = slices.Compact(names)
	var b strings.Builder
	for i, n := range names {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(n)
		vals := reqHeader.Values(n)
		if len(vals) == 0 {
			b.WriteByte('!')
			continue
		}
		b.WriteByte('=')
		b.WriteString(strconv.Quote(NormalizeFieldValue(vals)))
	}
	return b.String(), true
}

// NormalizeFieldValue combines field lines into one value: the elements
// between commas, each trimmed with inner runs of whitespace collapsed to
// one space, joined with ", " (RFC 9110 §5.3 and RFC 9111 §4.1 allow both).
// It is idempotent, so a proxy that sends the origin this value and keys
// a variant by it keys the variant by exactly what the origin got.
func NormalizeFieldValue(vals []string) string {
	var parts []string
	for _, v := range vals {
		for _, e := range strings.Split(v, ",") {
			parts = append(parts, strings.Join(strings.Fields(e), " "))
		}
	}
	return strings.Join(parts, ", ")
}
