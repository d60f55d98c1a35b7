package coraldht

// A DropReason says why a node discarded a datagram without a reply.
// DropReasons lists every reason once, with the name metrics and status
// pages use (String); Stats counts each in DropCounts.
type DropReason int

const (
	dropNone        DropReason = iota
	DropOversize               // longer than MaxDatagram
	DropBadAuth                // tag missing or wrong: wrong key, corruption, forgery
	DropMalformed              // authentic but does not parse
	DropStale                  // timestamp outside the clock-skew window
	DropReplay                 // seen before, or too far behind the sender's newest
	DropQueueFull              // transport queue overflowed
	DropUnsolicited            // a reply nobody waits for (late, duplicate or forged ID)
	DropSelf                   // from this node's own ID
	DropMisdirected            // addressed to another node ID
	DropUnproven               // a request from an unproven source that needs a larger reply or changes state
	DropBadIdentity            // identity mode: no identity, a certificate no fleet key signed or out of date, a bad signature
	DropRevoked                // identity mode: a certificate a revocation list names
	dropReasonEnd
)

// dropReasons is the one table of reasons: the name of each and its
// field in DropCounts.
var dropReasons = [dropReasonEnd]struct {
	name  string
	count func(*DropCounts) *uint64
}{
	DropOversize:    {"oversize", func(d *DropCounts) *uint64 { return &d.Oversize }},
	DropBadAuth:     {"bad_auth", func(d *DropCounts) *uint64 { return &d.BadAuth }},
	DropMalformed:   {"malformed", func(d *DropCounts) *uint64 { return &d.Malformed }},
	DropStale:       {"stale", func(d *DropCounts) *uint64 { return &d.Stale }},
	DropReplay:      {"replay", func(d *DropCounts) *uint64 { return &d.Replay }},
	DropQueueFull:   {"queue_full", func(d *DropCounts) *uint64 { return &d.QueueFull }},
	DropUnsolicited: {"unsolicited", func(d *DropCounts) *uint64 { return &d.Unsolicited }},
	DropSelf:        {"self", func(d *DropCounts) *uint64 { return &d.Self }},
	DropMisdirected: {"misdirected", func(d *DropCounts) *uint64 { return &d.Misdirected }},
	DropUnproven:    {"unproven", func(d *DropCounts) *uint64 { return &d.Unproven }},
	DropBadIdentity: {"bad_identity", func(d *DropCounts) *uint64 { return &d.BadIdentity }},
	DropRevoked:     {"revoked", func(d *DropCounts) *uint64 { return &d.Revoked }},
}

// String is the reason's name: "bad_auth", "replay", … ("" for no reason).
func (r DropReason) String() string {
	if r <= dropNone || r >= dropReasonEnd {
		return ""
	}
	return dropReasons[r].name
}

// DropReasons lists every reason, in a fixed order: what a metrics
// exporter or status page iterates over.
func DropReasons() []DropReason {
	out := make([]DropReason, 0, dropReasonEnd-1)
	for r := dropNone + 1; r < dropReasonEnd; r++ {
		out = append(out, r)
	}
	return out
}

// DropCounts counts datagrams discarded without a reply, by reason.
type DropCounts struct {
	Oversize    uint64 // longer than MaxDatagram
	BadAuth     uint64 // missing or wrong tag: wrong key, corruption, forgery, truncation
	Malformed   uint64 // authentic but unparsable (a bug or a newer peer)
	Stale       uint64 // timestamp outside the clock-skew window
	Replay      uint64 // already accepted once, or too far behind its sender's newest
	QueueFull   uint64 // (reserved for transports that report it)
	Unsolicited uint64 // reply to no outstanding request (late or duplicate)
	Self        uint64 // claims to come from this node
	Misdirected uint64 // addressed to another node ID (e.g. replayed from elsewhere)
	// Unproven: a request whose source has not proven its address (no
	// valid address cookie) that would have needed a reply larger than
	// itself, or changed state (a store), from a sender that cannot take a
	// truncated reply (a release before address cookies, without
	// Config.LegacyPeers).
	Unproven uint64
	// Node identity mode: a datagram without an identity (unless
	// Identity.Optional), under a certificate no fleet key signed or out
	// of its validity period, or whose signature does not verify
	// (BadIdentity); under a revoked certificate (Revoked).
	BadIdentity, Revoked uint64
}

// Count is the count for reason r (0 for an unknown reason).
func (d DropCounts) Count(r DropReason) uint64 {
	if r <= dropNone || r >= dropReasonEnd {
		return 0
	}
	return *dropReasons[r].count(&d)
}

// Total is the sum over all reasons.
func (d DropCounts) Total() uint64 {
	var sum uint64
	for _, r := range DropReasons() {
		sum += d.Count(r)
	}
	return sum
}

// dropCounts loads the live drop counters.
func (c *nodeCounters) dropCounts() DropCounts {
	var d DropCounts
	for r := dropNone + 1; r < dropReasonEnd; r++ {
		*dropReasons[r].count(&d) = c.drops[r].Load()
	}
	return d
}
