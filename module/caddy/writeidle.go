package coralcaddy

import (
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// defaultWriteIdleTimeout is how long a write to a client may make no
// progress before the client is dropped (write_idle_timeout).
const defaultWriteIdleTimeout = 30 * time.Second

// idleWrites bounds every write of r's response to the client with the
// handler's write_idle_timeout, renewed as bytes flow: each write, flush
// and 64 KiB of a file sent with sendfile must make progress within it, or
// the connection is closed. So a client that stops reading is dropped and
// closes the cache Readers it holds (a version it reads stays on disk,
// counted against cache_size, until it does) however large the response.
// Caddy's server-wide idle writer (its write_idle_timeout) is overridden
// for the handler's response; when the server has none, the handler
// installs its own. It returns the writer to use and what to call when the
// handler is done.
func (h *Handler) idleWrites(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, func()) {
	timeout := time.Duration(h.WriteIdleTimeout)
	if timeout <= 0 {
		return w, func() {}
	}
	if _, iw := caddyhttp.IdleTimeoutsFromContext(r.Context()); iw != nil {
		return w, iw.Override(timeout, 0, 0)
	}
	iw := &caddyhttp.IdleTimeoutWriter{
		ResponseWriterWrapper: &caddyhttp.ResponseWriterWrapper{ResponseWriter: w},
		Ctrl:                  http.NewResponseController(w),
		Deadline:              caddyhttp.IdleDeadline{Start: time.Now(), Timeout: timeout},
		Logger:                h.logger,
		// On HTTP/2 an armed deadline resets the stream even between
		// writes (see IdleTimeoutWriter).
		ClearBetweenWrites: r.ProtoMajor == 2,
	}
	return iw, iw.HandlerDone
}
