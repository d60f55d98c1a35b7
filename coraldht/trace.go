package coraldht

import "github.com/coralcdn/coral/coraldht/internal/wire"

// RequestTrace describes one get, put probe or store another node sent
// this node, for experiments that need to know where a key's load comes
// from (eval/hotspot). Only those three types are traced.
type RequestTrace struct {
	Type   string // "get", "put_probe" or "store"
	Level  int
	Key    ID
	From   ID
	Target ID   // the requester's next intermediate target (get, put_probe)
	Loaded bool // put_probe: answered "loaded"
}

type requestTracer struct{ f func(RequestTrace) }

// TraceRequests has f called, synchronously and from the node's receive
// loop, for every get, put probe and store received from another node;
// nil stops it. f must be quick and must not call back into the node.
func (n *Node) TraceRequests(f func(RequestTrace)) {
	if f == nil {
		n.tracer.Store(nil)
		return
	}
	n.tracer.Store(&requestTracer{f: f})
}

func (n *Node) traceRequest(m *wire.Message, loaded bool) {
	t := n.tracer.Load()
	if t == nil {
		return
	}
	t.f(RequestTrace{Type: m.Type.String(), Level: int(m.Level), Key: m.Key, From: m.Sender.ID, Target: m.Target, Loaded: loaded})
}
