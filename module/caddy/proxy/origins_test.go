package proxy

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// countingOrigin is an origin web server that counts what it serves.
type countingOrigin struct {
	*httptest.Server
	mu       sync.Mutex
	requests map[string]int
	cookies  int // requests that arrived with a Cookie header
	gate     chan struct{}
	arrived  chan struct{} // closed when the first request arrives
	once     sync.Once
}

func newCountingOrigin(t *testing.T, handler func(o *countingOrigin, w http.ResponseWriter, r *http.Request)) *countingOrigin {
	o := &countingOrigin{requests: map[string]int{}, gate: make(chan struct{}), arrived: make(chan struct{})}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.requests[r.URL.Path]++
		if r.Header.Get("Cookie") != "" {
			o.cookies++
		}
		o.mu.Unlock()
		o.once.Do(func() { close(o.arrived) })
		handler(o, w, r)
	}))
	t.Cleanup(o.Close)
	return o
}

func (o *countingOrigin) count(path string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.requests[path]
}

func (o *countingOrigin) port() string {
	_, port, _ := net.SplitHostPort(o.Listener.Addr().String())
	return port
}

// coralHost is the Coralized host name of the origin.
func (o *countingOrigin) coralHost() string {
	_, port, _ := net.SplitHostPort(o.Listener.Addr().String())
	return "127.0.0.1." + port + ".nyud.test"
}
