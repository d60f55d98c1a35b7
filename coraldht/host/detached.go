package host

import (
	"context"
	"time"

	"github.com/coralcdn/coral/coraldht"
)

// Detached is an Instance around a node that host did not start (a test's
// node, built by hand), so that code reading the node through an Instance
// can run on it: started then (the zero time when unknown), joined if
// joined. Host never stops it and it is not in Running; its Stopped
// channel never closes. The caller closes the node.
func Detached(node *coraldht.Node, started time.Time, joined bool) *Instance {
	loopDone := make(chan struct{})
	close(loopDone)
	i := &Instance{
		node: node, started: started, joinedC: make(chan struct{}),
		cancel: context.CancelFunc(func() {}), loopDone: loopDone, stopped: make(chan struct{}),
	}
	if node != nil {
		i.listen = node.Addr()
	}
	if joined {
		i.markJoined()
	}
	return i
}
