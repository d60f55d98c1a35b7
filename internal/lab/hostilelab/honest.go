//go:build linux

package hostilelab

import (
	"hash/fnv"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/coralcdn/coral/internal/lab/evilorigin"
)

// HonestOrigin is a well-behaved origin (net/http): every path under
// /c/ is a cacheable object (max-age one hour, an ETag), every path under
// /n/ is no-store, so each fetch reaches it. Bodies are
// evilorigin.Content(path, HonestSize(path)).
type HonestOrigin struct {
	srv  *http.Server
	addr netip.AddrPort
}

// StartHonest starts the honest origin on ip:port.
func StartHonest(ip netip.Addr, port int) (*HonestOrigin, error) {
	ln, err := net.Listen("tcp", netip.AddrPortFrom(ip, uint16(port)).String())
	if err != nil {
		return nil, err
	}
	o := &HonestOrigin{addr: netip.MustParseAddrPort(ln.Addr().String())}
	o.srv = &http.Server{Handler: http.HandlerFunc(o.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = o.srv.Serve(ln) }()
	return o, nil
}

// Addr is the origin's address.
func (o *HonestOrigin) Addr() netip.AddrPort { return o.addr }

// Close stops it.
func (o *HonestOrigin) Close() { _ = o.srv.Close() }

// HonestSize is the body length of an honest path: 1 to 64 KiB, fixed by
// the path.
func HonestSize(path string) int64 {
	h := fnv.New32a()
	h.Write([]byte(path))
	return 1<<10 + int64(h.Sum32()%(63<<10))
}

func (o *HonestOrigin) serve(w http.ResponseWriter, r *http.Request) {
	body := evilorigin.Content(r.URL.Path, HonestSize(r.URL.Path))
	switch {
	case strings.HasPrefix(r.URL.Path, "/c/"):
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("ETag", `"`+strconv.FormatUint(uint64(HonestSize(r.URL.Path)), 16)+`"`)
	case strings.HasPrefix(r.URL.Path, "/n/"):
		w.Header().Set("Cache-Control", "no-store")
	default:
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}
