package proxy

import (
	"context"
	"io"
	"sync/atomic"
	"time"
)

// idleTimeoutBody ends a response body when one read waits longer than
// timeout (cancelling its fetch): a stalled origin or peer must not hold the
// download, and every client reading it, forever. Only time spent waiting
// in Read counts, so a slow reader downstream is not taken for a stall.
type idleTimeoutBody struct {
	io.ReadCloser
	timeout time.Duration
	timer   *time.Timer
	fired   atomic.Bool
}

func newIdleTimeoutBody(rc io.ReadCloser, timeout time.Duration, cancel context.CancelFunc) io.ReadCloser {
	if timeout <= 0 {
		return rc // no limit configured
	}
	b := &idleTimeoutBody{ReadCloser: rc, timeout: timeout}
	b.timer = time.AfterFunc(timeout, func() {
		b.fired.Store(true)
		cancel()
	})
	b.timer.Stop()
	return b
}

func (b *idleTimeoutBody) Read(p []byte) (int, error) {
	b.timer.Reset(b.timeout)
	n, err := b.ReadCloser.Read(p)
	b.timer.Stop()
	return n, err
}

func (b *idleTimeoutBody) Close() error {
	b.timer.Stop()
	return b.ReadCloser.Close()
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}
