package coraldht

import "errors"

// Errors returned by Node methods. Test with errors.Is; context errors from
// the caller's context are returned as they are.
var (
	// ErrClosed: the node has been closed.
	ErrClosed = errors.New("coraldht: node closed")
	// ErrNotFound: a get visited the nodes closest to the key on every
	// requested level and none held values.
	ErrNotFound = errors.New("coraldht: no values for key")
	// ErrNoResponse: every remote node the operation tried failed to answer;
	// the node is probably cut off from the network.
	ErrNoResponse = errors.New("coraldht: no node answered")
	// ErrNotStored: no node stored a put's value, and not merely because
	// they were all full (which PutResult.Saturated reports): stores went
	// unanswered or hit memory bounds.
	ErrNotStored = errors.New("coraldht: no node accepted the value")
	// ErrInvalid: an argument is out of range (value size, TTL, level).
	ErrInvalid = errors.New("coraldht: invalid argument")
	// ErrNoKey: the node would have to listen beyond loopback without a
	// network key.
	ErrNoKey = errors.New("coraldht: network key required")
	// ErrTimeout: an RPC went unanswered within its adaptive timeout.
	ErrTimeout = errors.New("coraldht: RPC timed out")
	// ErrRevoked: in node identity mode, the revocation list this node
	// holds names its own certificate: every other node drops its
	// datagrams, so gets and puts fail at once rather than time out.
	ErrRevoked = errors.New("coraldht: this node's certificate is revoked")
)
