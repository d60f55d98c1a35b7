package proxy

import (
	"io"
	"net/http"
)

// bodyCounter is the one response writer the proxy wraps around the
// server's: it counts the body bytes written through it, for the request
// metrics, and once the request is admitted (chargeAbuse) adds
// them to the bandwidth budget too, if there is one (responses to peers
// included: they are this proxy's bandwidth too). Header bytes are not
// counted. It keeps ReadFrom, so sendfile still works through it (and is
// counted), and Flush, and unwraps for http.ResponseController.
type bodyCounter struct {
	http.ResponseWriter
	n      int64
	charge func(n int64) // nil: not charged to a budget
}

func (c *bodyCounter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.counted(int64(n))
	return n, err
}

func (c *bodyCounter) ReadFrom(r io.Reader) (int64, error) {
	n, err := io.Copy(c.ResponseWriter, r) // the wrapped writer's ReadFrom, if any
	c.counted(n)
	return n, err
}

func (c *bodyCounter) counted(n int64) {
	c.n += n
	if c.charge != nil {
		c.charge(n)
	}
}

func (c *bodyCounter) Flush() { _ = http.NewResponseController(c.ResponseWriter).Flush() }

func (c *bodyCounter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// Interface guards.
var (
	_ io.ReaderFrom = (*bodyCounter)(nil)
	_ http.Flusher  = (*bodyCounter)(nil)
)
