package diskcache_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/coralcdn/coral/module/caddy/diskcache"
)

// One download feeds a client that joined before the first byte; a later
// client gets the complete object.
func Example() {
	dir, _ := os.MkdirTemp("", "diskcache-example")
	defer os.RemoveAll(dir)
	s, err := diskcache.Open(diskcache.Options{Dir: dir, MaxBytes: 1 << 30})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	key := "0beec7b5ea3f0fdbc95d0dd47f3c5bc275da8a33"

	// The origin's response headers arrived: start the one download.
	w, err := s.Create(key, diskcache.Meta{Status: 200, Header: http.Header{"Content-Type": {"text/plain"}}, Size: -1})
	if err != nil {
		panic(err)
	}
	// A client joins at once and follows the download.
	r, _ := s.GetContext(context.Background(), key)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer r.Close()
		var sb strings.Builder
		r.WriteTo(&sb)
		fmt.Printf("first client: %d %s %q\n", r.Meta().Status, r.Meta().Header.Get("Content-Type"), sb.String())
	}()
	io.Copy(w, strings.NewReader("hello from the origin"))
	w.Commit(w.Meta())
	<-done

	r, _ = s.Get(key)
	defer r.Close()
	b, _ := io.ReadAll(r)
	fmt.Printf("later client: complete=%v size=%d %q\n", r.Complete(), r.Size(), b)
	// Output:
	// first client: 200 text/plain "hello from the origin"
	// later client: complete=true size=21 "hello from the origin"
}
