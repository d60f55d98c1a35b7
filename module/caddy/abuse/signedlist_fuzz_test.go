package abuse

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"testing"
	"time"
)

// fuzzKey is a fixed publisher key, so that the corpus can hold lists it
// signed and the fuzzer can mutate them.
var fuzzKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))

// FuzzParseSignedList: any bytes as a signed list never panic; what
// verifies also decodes without the key, and signing its entries again
// gives a list that decodes to the same entries (decode → encode →
// decode).
func FuzzParseSignedList(f *testing.F) {
	signed := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, entries := range [][]Entry{
		nil,
		{{Name: "example.com", Reason: "asked not to be served"}},
		{{Name: "*.example.org", Expires: signed.Add(time.Hour)}, {Name: "192.0.2.7"}},
	} {
		l, err := SignList(fuzzKey, 3, signed, signed.Add(24*time.Hour), entries)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(l.Raw)
	}
	f.Add([]byte(SignedListFormat + "\nversion 1\nsigned 2026-11-29T12:00:00Z\nexpires 2026-11-30T12:00:00Z\n# c\nexample.com\nsignature 0011223344556677 AAAA\n"))
	f.Add([]byte("coral-blacklist 1\n"))
	f.Add([]byte(""))
	keys := []ed25519.PublicKey{fuzzKey.Public().(ed25519.PublicKey)}
	f.Fuzz(func(t *testing.T, raw []byte) {
		l, err := ParseSignedList(raw, keys)
		d, derr := DecodeSignedList(raw)
		if err == nil && derr != nil {
			t.Fatalf("verifies but does not decode: %v", derr)
		}
		if derr != nil {
			if !errors.Is(derr, ErrListFormat) {
				t.Fatalf("a decoding error that is not a format error: %v", derr)
			}
			return
		}
		if err == nil && (l.Version != d.Version || len(l.Entries) != len(d.Entries)) {
			t.Fatalf("verified %+v, decoded %+v", l, d)
		}
		again, err := SignList(fuzzKey, d.Version, d.Signed, d.Expires, d.Entries)
		if err != nil {
			t.Fatalf("a decoded list does not sign again: %v\n%q", err, raw)
		}
		if len(again.Entries) != len(d.Entries) {
			t.Fatalf("entries %v, again %v", d.Entries, again.Entries)
		}
		for i := range d.Entries {
			if again.Entries[i] != d.Entries[i] {
				t.Fatalf("entry %d: %+v, again %+v", i, d.Entries[i], again.Entries[i])
			}
		}
	})
}

// FuzzParseEntry: any line never panics, and an entry it reads reads
// back the same from its String.
func FuzzParseEntry(f *testing.F) {
	for _, s := range []string{"example.com", "*.example.org expires=2027-01-31 # why", "192.0.2.7 #", "a b",
		"x.example expires=2027-01-31T10:00:00+02:00", "# only a comment", "  ", "bücher.example", "*.*.x", "EXAMPLE.com. # Up\r"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		e, ok, problem := ParseEntry(line)
		if !ok {
			return
		}
		if problem != "" {
			t.Fatalf("ok with a problem: %q", problem)
		}
		again, ok, problem := ParseEntry(e.String())
		if !ok || problem != "" || again != e {
			t.Fatalf("%q → %+v → %q → %+v (%v %q)", line, e, e.String(), again, ok, problem)
		}
	})
}
