package evilorigin

import (
	"net/url"
	"testing"
)

// FuzzParseRecipe: any query string is refused or gives a recipe whose
// own query string gives it back.
func FuzzParseRecipe(f *testing.F) {
	for _, b := range Catalogue {
		f.Add(b.Recipe.Query().Encode())
	}
	f.Add(Mix(1).Query().Encode())
	f.Add("h=endless&n=-1&s=99")
	f.Add("n=1099511627777&hn=99999999")
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		r, err := ParseRecipe(q)
		if err != nil {
			return
		}
		again, err := ParseRecipe(r.Query())
		if err != nil {
			t.Fatalf("%q gave %+v, whose query %q is refused: %v", raw, r, r.Query().Encode(), err)
		}
		if again != r {
			t.Fatalf("%q gave %+v, and its query %+v", raw, r, again)
		}
	})
}
