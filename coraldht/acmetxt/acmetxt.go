package acmetxt

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/coralcdn/coral/coraldht"
)

// Label is the label ACME puts in front of the validated domain (RFC 8555
// §8.4): the TXT records for D are at "_acme-challenge.D".
const Label = "_acme-challenge"

const (
	// DefaultTTL is how long a published value lives when the caller gives
	// no TTL: long enough for an ACME server to validate after the
	// certificate manager's propagation check, short enough that old
	// values do not pile up.
	DefaultTTL = 10 * time.Minute
	// MinTTL and MaxTTL bound the TTL a caller may ask for.
	MinTTL = time.Minute
	MaxTTL = time.Hour
	// MaxValueLen is the longest value: one TXT character-string. An ACME
	// key authorization digest is 43 characters.
	MaxValueLen = 255
	// MaxValues is the most values an answer carries (newest first); two
	// are live per issuance (the name and its wildcard), the rest are old.
	MaxValues = 16
)

// ErrInvalid reports a domain or value this package does not publish.
var ErrInvalid = errors.New("acmetxt: invalid")

// Key is the DSHT key of the challenge values for domain, which is
// case-folded and may end with a dot.
func Key(domain string) coraldht.ID {
	return coraldht.KeyFor("coral-acme-challenge " + normalize(domain))
}

func normalize(domain string) string {
	return strings.ToLower(strings.TrimSuffix(domain, "."))
}

// Domain returns the domain a challenge name is for: "nyud.net" for
// "_acme-challenge.nyud.net." (any case, trailing dot optional), and false
// for a name that is not a challenge name.
func Domain(name string) (string, bool) {
	name = normalize(name)
	rest, ok := strings.CutPrefix(name, Label+".")
	if !ok || rest == "" {
		return "", false
	}
	return rest, true
}

// Valid reports whether v may be published and served: 1 to MaxValueLen
// bytes of printable ASCII without space, quote or backslash (no escaping
// in any presentation format, no surprises for the validator).
func Valid(v string) bool {
	if len(v) == 0 || len(v) > MaxValueLen {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c > '~' || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// Putter is the part of a DSHT node Publish uses (*coraldht.Node).
type Putter interface {
	Put(ctx context.Context, key coraldht.ID, value []byte, ttl time.Duration, levels ...int) (coraldht.PutResult, error)
}

// Getter is the part of a DSHT node Lookup uses (*coraldht.Node).
type Getter interface {
	GetAll(ctx context.Context, key coraldht.ID, levels ...int) (coraldht.GetResult, error)
}

// Publish stores value as a challenge value for domain for ttl (0:
// DefaultTTL; otherwise clamped to MinTTL..MaxTTL).
func Publish(ctx context.Context, node Putter, domain, value string, ttl time.Duration) error {
	if !Valid(value) {
		return fmt.Errorf("%w: challenge value %.40q: want 1-%d bytes of printable ASCII", ErrInvalid, value, MaxValueLen)
	}
	if normalize(domain) == "" {
		return fmt.Errorf("%w: empty domain", ErrInvalid)
	}
	if ttl == 0 {
		ttl = DefaultTTL
	}
	ttl = min(max(ttl, MinTTL), MaxTTL)
	if _, err := node.Put(ctx, Key(domain), []byte(value), ttl, 0); err != nil {
		return fmt.Errorf("acmetxt: publishing the challenge for %s: %w", normalize(domain), err)
	}
	return nil
}

// Lookup returns the challenge values for domain: the valid ones, each
// once, those with the most time left first, at most MaxValues. No values
// is not an error (nil, nil); an unreachable network is.
func Lookup(ctx context.Context, node Getter, domain string) ([]string, error) {
	// Every value: the name's and its wildcard's are published at once
	// and validated apart, and a node holding one of them is not enough
	// (coraldht.Node.GetAll).
	res, err := node.GetAll(ctx, Key(domain), 0)
	if errors.Is(err, coraldht.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("acmetxt: looking up the challenge for %s: %w", normalize(domain), err)
	}
	vs := slices.Clone(res.Values)
	// Values published later have more time left (for equal TTLs).
	slices.SortStableFunc(vs, func(a, b coraldht.Value) int { return cmp.Compare(b.TTL, a.TTL) })
	var out []string
	for _, v := range vs {
		s := string(v.Data)
		if Valid(s) && !slices.Contains(out, s) {
			out = append(out, s)
		}
		if len(out) == MaxValues {
			break
		}
	}
	return out, nil
}
