package coraldht

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Byte offsets of the fixed header, as PROTOCOL.md lays it out. The contact
// offsets are those of an IPv4 sender.
const (
	wireOffMagic     = 0
	wireOffVersion   = 2
	wireOffType      = 3
	wireOffFlags     = 4
	wireOffReqID     = 5
	wireOffTimestamp = 13
	wireOffRecipient = 21
	wireOffSender    = 41
	wireOffFamily    = wireOffSender + IDLen // 61
	wireOffIPv4      = wireOffFamily + 1     // 62
	wireOffPortV4    = wireOffIPv4 + 4       // 66
	wireOffClustersV = wireOffPortV4 + 2 + 4 // 72: cluster count after an IPv4 sender
)

// wireContact returns the contact of the node at addr, with its proper ID.
func wireContact(addr string, svc Services) Contact {
	ap := netip.MustParseAddrPort(addr)
	return Contact{ID: NodeIDFor(ap), Addr: ap, Services: svc}
}

// wireContacts returns n distinct contacts, alternating IPv4 and IPv6.
func wireContacts(n int) []Contact {
	var cs []Contact
	for i := 0; i < n; i++ {
		if i%2 == 0 {
			cs = append(cs, wireContact(fmt.Sprintf("198.51.100.%d:%d", i+1, 4000+i), Services(i%8)))
		} else {
			cs = append(cs, wireContact(fmt.Sprintf("[2001:db8:%x::%x]:%d", i, i+1, 5000+i), ServiceHTTP))
		}
	}
	return cs
}

// wireV6Contacts returns n distinct IPv6 contacts: the largest contact encoding.
func wireV6Contacts(n int) []Contact {
	var cs []Contact
	for i := 0; i < n; i++ {
		cs = append(cs, wireContact(fmt.Sprintf("[2001:db8:ffff:%x::%x]:%d", i, i+1, 40000+i), ServiceDNS|ServiceHTTP|ServiceNonRecursive))
	}
	return cs
}

var wireCreated = time.Unix(1_700_000_000, 0)

// wireClusters returns a cluster list at the given (strictly increasing)
// levels, with sizes in eighths as the wire carries them.
func wireClusters(levels ...int) []ClusterInfo {
	var cs []ClusterInfo
	for _, l := range levels {
		c := ClusterInfo{Level: l, LogSize: float64(l*3+1) / 8, Created: wireCreated.Add(time.Duration(l) * time.Hour)}
		if l > 0 {
			c.ID = KeyFor(fmt.Sprintf("cluster at level %d", l))
		}
		cs = append(cs, c)
	}
	return cs
}

func wireFullClusters() []ClusterInfo { return wireClusters(0, 1, 2, 3, 4, 5, 6, 7) }

func wireValues(lengths ...int) []wireValue {
	var vs []wireValue
	for i, n := range lengths {
		vs = append(vs, wireValue{TTL: uint32(1000 * (i + 1) * 3600), Data: bytes.Repeat([]byte{byte('a' + i)}, n)})
	}
	return vs
}

var (
	wireV4Sender = wireContact("192.0.2.10:4000", ServiceDNS|ServiceHTTP)
	wireV6Sender = wireContact("[2001:db8::1]:53000", ServiceHTTP)
	wireStamp    = time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC).UnixNano()
	wireKey      = KeyFor("http://example.com/index.html")
	wireTarget   = KeyFor("intermediate target")
)

type wireSample struct {
	name string
	m    *message
}

// wireSamples returns a realistic message of every type and direction.
func wireSamples() []wireSample {
	return []wireSample{
		{"ping/request", &message{Type: msgPing, ReqID: 0x0102030405060708, Timestamp: wireStamp,
			Sender: wireV4Sender, Clusters: wireClusters(0, 1, 2)}},
		{"ping/request/no-clusters", &message{Type: msgPing, ReqID: 1, Timestamp: 1,
			Sender: wireV4Sender}},
		{"ping/response", &message{Type: msgPing, Response: true, ReqID: ^uint64(0), Timestamp: wireStamp + 1,
			Sender: wireV6Sender, Clusters: wireFullClusters()}},
		{"find_node/request", &message{Type: msgFindNode, ReqID: 42, Timestamp: wireStamp,
			Sender: wireV6Sender, Clusters: wireClusters(0, 3, 7), Level: 2, Target: wireTarget}},
		{"find_node/response", &message{Type: msgFindNode, Response: true, ReqID: 42, Timestamp: wireStamp,
			Sender: wireV4Sender, Clusters: wireClusters(0, 1), Status: statusOK, Nodes: wireContacts(8)}},
		{"find_node/response/not-member", &message{Type: msgFindNode, Response: true, ReqID: 43, Timestamp: wireStamp,
			Sender: wireV4Sender, Clusters: wireClusters(0), Status: statusNotMember}},
		{"members/request", &message{Type: msgMembers, ReqID: 44, Timestamp: wireStamp,
			Sender: wireV4Sender, Clusters: wireClusters(0, 1, 2), Level: 2, Target: wireTarget}},
		{"members/response", &message{Type: msgMembers, Response: true, ReqID: 44, Timestamp: wireStamp,
			Sender: wireV6Sender, Clusters: wireClusters(0, 1, 2), Status: statusOK, Nodes: wireContacts(8)}},
		{"get/request", &message{Type: msgGet, ReqID: 7, Timestamp: wireStamp,
			Sender: wireV4Sender, Clusters: wireClusters(0, 1, 2), Level: 1, Key: wireKey, Target: wireTarget}},
		{"get/response/values", &message{Type: msgGet, Response: true, ReqID: 7, Timestamp: wireStamp,
			Sender: wireV6Sender, Clusters: wireClusters(0, 1, 2), Status: statusOK, Values: wireValues(1, 20, 512)}},
		{"get/response/contacts", &message{Type: msgGet, Response: true, ReqID: 8, Timestamp: wireStamp,
			Sender: wireV6Sender, Clusters: wireClusters(0, 2), Status: statusOK, Nodes: wireContacts(16)}},
		{"get/response/bad-level", &message{Type: msgGet, Response: true, ReqID: 9, Timestamp: wireStamp,
			Sender: wireV4Sender, Status: statusBadLevel}},
		{"put_probe/request", &message{Type: msgPutProbe, ReqID: 99, Timestamp: wireStamp,
			Sender: wireV4Sender, Clusters: wireFullClusters(), Level: 7, Flags: reqFlagWantValues,
			Key: wireKey, Target: wireTarget, TTL: 2 * 3600 * 1000}},
		{"put_probe/request/no-values", &message{Type: msgPutProbe, ReqID: 100, Timestamp: wireStamp,
			Sender: wireV6Sender, Clusters: wireClusters(0), Level: 0, Key: wireKey, Target: wireKey, TTL: 1}},
		{"put_probe/response", &message{Type: msgPutProbe, Response: true, ReqID: 99, Timestamp: wireStamp,
			Sender: wireV6Sender, Clusters: wireClusters(0, 1, 2), Status: statusOK, Loaded: true, Count: 4,
			MinRemaining: 1800000, Values: wireValues(30, 60), Nodes: wireContacts(8)}},
		{"put_probe/response/invalid", &message{Type: msgPutProbe, Response: true, ReqID: 101, Timestamp: wireStamp,
			Sender: wireV4Sender, Status: statusInvalid}},
		{"store/request", &message{Type: msgStore, ReqID: 5, Timestamp: wireStamp,
			Sender: wireV4Sender, Clusters: wireClusters(0, 1, 2), Level: 2, Flags: reqFlagWantValues,
			Key: wireKey, TTL: 3600000, Value: bytes.Repeat([]byte{0xAB}, MaxValueSizeLimit)}},
		{"store/request/one-byte", &message{Type: msgStore, ReqID: 6, Timestamp: wireStamp,
			Sender: wireV6Sender, Clusters: wireClusters(0), Level: 0, Key: wireKey, TTL: 1000, Value: []byte{0}}},
		{"store/response", &message{Type: msgStore, Response: true, ReqID: 5, Timestamp: wireStamp,
			Sender: wireV6Sender, Clusters: wireClusters(0, 1, 2), Status: statusOK, Result: storeRefreshed,
			Count: 3, Values: wireValues(10, 11)}},
		{"store/response/full", &message{Type: msgStore, Response: true, ReqID: 6, Timestamp: wireStamp,
			Sender: wireV4Sender, Clusters: wireClusters(0, 1), Status: statusOK, Result: storeFull, Count: 4}},
		{"store/response/exhausted", &message{Type: msgStore, Response: true, ReqID: 6, Timestamp: wireStamp,
			Sender: wireV4Sender, Status: statusOK, Result: storeExhausted}},
		{"app/request", &message{Type: msgApp, ReqID: 31, Timestamp: wireStamp,
			Sender: wireV4Sender, Clusters: wireClusters(0, 1, 2), Kind: 1,
			Payload: append([]byte{1, 0}, wireKey[:]...)}},
		{"app/request/empty", &message{Type: msgApp, ReqID: 32, Timestamp: wireStamp,
			Sender: wireV6Sender, Kind: 255}},
		{"app/request/largest", &message{Type: msgApp, ReqID: 33, Timestamp: wireStamp,
			Sender: wireV6Sender, Clusters: wireFullClusters(), Kind: 7, Payload: bytes.Repeat([]byte{0xA5}, MaxAppPayload)}},
		{"app/response", &message{Type: msgApp, Response: true, ReqID: 31, Timestamp: wireStamp,
			Sender: wireV6Sender, Clusters: wireClusters(0, 1), AppResult: appOK, Payload: []byte{1, 0, 0, 0, 0, 2}}},
		{"app/response/largest", &message{Type: msgApp, Response: true, ReqID: 33, Timestamp: wireStamp,
			Sender: wireV6Sender, Clusters: wireFullClusters(), AppResult: appOK, Payload: bytes.Repeat([]byte{0x5A}, MaxAppPayload)}},
		{"app/response/unknown", &message{Type: msgApp, Response: true, ReqID: 32, Timestamp: wireStamp,
			Sender: wireV4Sender, AppResult: appUnknown}},
		{"app/response/busy", &message{Type: msgApp, Response: true, ReqID: 34, Timestamp: wireStamp,
			Sender: wireV4Sender, AppResult: appBusy}},
		{"app/response/failed", &message{Type: msgApp, Response: true, ReqID: 35, Timestamp: wireStamp,
			Sender: wireV4Sender, Clusters: wireClusters(0), AppResult: appFailed, Payload: []byte("no space left on device")}},
	}
}

func wireEncode(t testing.TB, m *message) []byte {
	t.Helper()
	b, err := encodeMessage(nil, m)
	if err != nil {
		t.Fatalf("encode %+v: %v", m, err)
	}
	return b
}

func TestWireRoundTrip(t *testing.T) {
	seen := map[[2]int]bool{}
	for _, tc := range wireSamples() {
		t.Run(tc.name, func(t *testing.T) {
			b := wireEncode(t, tc.m)
			if len(b) > MaxDatagram-tagLen {
				t.Fatalf("encoding is %d bytes; limit %d", len(b), MaxDatagram-tagLen)
			}
			got, err := decodeMessage(b)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !reflect.DeepEqual(got, tc.m) {
				t.Fatalf("decode(encode(m)) differs\n got %+v\nwant %+v", got, tc.m)
			}
			again := wireEncode(t, got)
			if !bytes.Equal(again, b) {
				t.Fatalf("encode(decode(b)) differs from b\n got %x\nwant %x", again, b)
			}
			// Appending to a non-empty buffer keeps the prefix and the
			// same encoding after it.
			prefix := []byte("prefix")
			app, err := encodeMessage(append([]byte(nil), prefix...), tc.m)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(app[:len(prefix)], prefix) || !bytes.Equal(app[len(prefix):], b) {
				t.Fatalf("encodeMessage(prefix, m) = %x, want prefix + %x", app, b)
			}
		})
		seen[[2]int{int(tc.m.Type), btoi(tc.m.Response)}] = true
	}
	for typ := msgType(1); typ < msgTypeEnd; typ++ {
		for _, resp := range []int{0, 1} {
			if !seen[[2]int{int(typ), resp}] {
				t.Errorf("no round-trip sample for %v response=%d", typ, resp)
			}
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Empty lists decode as nil; fields that a type does not carry are not
// encoded at all.
func TestWireEmptyAndIgnoredFields(t *testing.T) {
	full := &message{Type: msgPing, ReqID: 3, Timestamp: wireStamp, Sender: wireV4Sender,
		Clusters: []ClusterInfo{}, Level: 3, Flags: 1, Key: wireKey, Target: wireTarget, TTL: 9,
		Value: []byte("x"), Status: 2, Loaded: true, Count: 7, MinRemaining: 8, Result: 1,
		Values: wireValues(3), Nodes: wireContacts(2)}
	bare := &message{Type: msgPing, ReqID: 3, Timestamp: wireStamp, Sender: wireV4Sender}
	if a, b := wireEncode(t, full), wireEncode(t, bare); !bytes.Equal(a, b) {
		t.Errorf("ping request carries fields it should ignore:\n%x\n%x", a, b)
	}
	emptyLists := &message{Type: msgGet, Response: true, ReqID: 3, Timestamp: wireStamp, Sender: wireV4Sender,
		Clusters: []ClusterInfo{}, Values: []wireValue{}, Nodes: []Contact{}}
	got, err := decodeMessage(wireEncode(t, emptyLists))
	if err != nil {
		t.Fatal(err)
	}
	if got.Clusters != nil || got.Values != nil || got.Nodes != nil || got.Value != nil {
		t.Errorf("empty lists decode as %#v, %#v, %#v, %#v; want nil", got.Clusters, got.Values, got.Nodes, got.Value)
	}
}

func wirePatch(b []byte, off int, v ...byte) []byte {
	out := append([]byte(nil), b...)
	copy(out[off:], v)
	return out
}

func TestWireTruncated(t *testing.T) {
	for _, tc := range wireSamples() {
		t.Run(tc.name, func(t *testing.T) {
			b := wireEncode(t, tc.m)
			for n := 0; n < len(b); n++ {
				m, err := decodeMessage(b[:n:n])
				if !errors.Is(err, errShort) {
					t.Fatalf("decode of the first %d of %d bytes: (%v, %v), want %v", n, len(b), m, err, errShort)
				}
			}
		})
	}
}

// TestWireTrailingBytes: bytes after a message's body, fields a later
// revision appended, are ignored, not fatal: the message decodes as it
// would without them (PROTOCOL.md, Versions).
func TestWireTrailingBytes(t *testing.T) {
	for _, tc := range wireSamples() {
		t.Run(tc.name, func(t *testing.T) {
			plain := wireEncode(t, tc.m)
			want, err := decodeMessage(plain)
			if err != nil {
				t.Fatal(err)
			}
			for _, trailer := range [][]byte{{0}, {0xff, 1, 2, 3}, bytes.Repeat([]byte{7}, 64)} {
				b := append(append([]byte(nil), plain...), trailer...)
				if len(b) > MaxDatagram-tagLen {
					continue
				}
				got, err := decodeMessage(b)
				if err != nil {
					t.Fatalf("with %d trailing bytes: %v", len(trailer), err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("with %d trailing bytes decoded to\n%+v\nwant\n%+v", len(trailer), got, want)
				}
			}
		})
	}
}

func wantDecodeError(t *testing.T, err error, field string, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("err = %v, want %v", err, target)
	}
	var de *decodeError
	if !errors.As(err, &de) {
		t.Fatalf("err = %T %v, want a *decodeError", err, err)
	}
	if de.field != field {
		t.Fatalf("error names field %q (%v), want %q", de.field, err, field)
	}
}

func TestWireRejects(t *testing.T) {
	ping := func() *message {
		return &message{Type: msgPing, ReqID: 1, Timestamp: wireStamp, Sender: wireV4Sender}
	}
	pingBytes := func(t *testing.T) []byte { return wireEncode(t, ping()) }
	with := func(mod func(m *message)) func(t *testing.T) []byte {
		return func(t *testing.T) []byte {
			m := ping()
			mod(m)
			return wireEncode(t, m)
		}
	}
	patched := func(base func(t *testing.T) []byte, off int, v ...byte) func(t *testing.T) []byte {
		return func(t *testing.T) []byte { return wirePatch(base(t), off, v...) }
	}
	reply := func(typ msgType, mod func(m *message)) func(t *testing.T) []byte {
		return with(func(m *message) { m.Type = typ; m.Response = true; mod(m) })
	}
	request := func(typ msgType, mod func(m *message)) func(t *testing.T) []byte {
		return with(func(m *message) {
			m.Type = typ
			m.Key, m.Target, m.TTL, m.Value = wireKey, wireTarget, 1000, []byte("v")
			mod(m)
		})
	}
	bad := func(addr string) Contact {
		ap := netip.MustParseAddrPort(addr)
		return Contact{ID: NodeIDFor(ap), Addr: ap}
	}
	mismatched := wireContacts(3)
	mismatched[2].ID[19] ^= 1
	// The body offset of a clusterless message from an IPv4 sender.
	body := wireOffClustersV + 1

	type tc struct {
		name  string
		bytes func(t *testing.T) []byte
		field string
		err   error
	}
	cases := []tc{
		{"bad magic first byte", patched(pingBytes, 0, 0xC1), "magic", errMagic},
		{"bad magic second byte", patched(pingBytes, 1, 0x2B), "magic", errMagic},
		{"version 0", patched(pingBytes, wireOffVersion, 0), "version", errVersion},
		{"version 2", patched(pingBytes, wireOffVersion, 2), "version", errVersion},
		{"type 0", patched(pingBytes, wireOffType, 0), "type", errUnknown},
		{"type 7", patched(pingBytes, wireOffType, byte(msgTypeEnd)), "type", errUnknown},
		{"type 255", patched(pingBytes, wireOffType, 255), "type", errUnknown},
		{"flags bit 1", patched(pingBytes, wireOffFlags, 0x02), "flags", errBadField},
		{"flags bit 7 with response", patched(pingBytes, wireOffFlags, 0x81), "flags", errBadField},
		{"timestamp 0", with(func(m *message) { m.Timestamp = 0 }), "timestamp", errBadField},
		{"timestamp negative", with(func(m *message) { m.Timestamp = -1 }), "timestamp", errBadField},
		{"sender ID not SHA-1 of address", with(func(m *message) { m.Sender.ID[0] ^= 0x80 }), "sender", errIDMismatch},
		{"sender ID of another port", with(func(m *message) {
			m.Sender.ID = NodeIDFor(netip.AddrPortFrom(m.Sender.Addr.Addr(), m.Sender.Addr.Port()+1))
		}), "sender", errIDMismatch},
		{"sender address family 5", patched(pingBytes, wireOffFamily, 5), "sender", errBadField},
		{"sender address family 0", patched(pingBytes, wireOffFamily, 0), "sender", errBadField},
		{"sender IPv4-mapped IPv6", with(func(m *message) { m.Sender = bad("[::ffff:192.0.2.10]:4000") }), "sender", errBadField},
		{"sender port 0", patched(pingBytes, wireOffPortV4, 0, 0), "sender", errBadField},
		{"sender 0.0.0.0", patched(pingBytes, wireOffIPv4, 0, 0, 0, 0), "sender", errBadField},
		{"sender multicast 224.0.0.1", patched(pingBytes, wireOffIPv4, 224, 0, 0, 1), "sender", errBadField},
		{"contact ID mismatch", reply(msgFindNode, func(m *message) { m.Nodes = mismatched }), "contact", errIDMismatch},
		{"contact IPv4-mapped IPv6", reply(msgFindNode, func(m *message) { m.Nodes = []Contact{bad("[::ffff:10.0.0.1]:4000")} }), "contact", errBadField},
		{"contact port 0", reply(msgFindNode, func(m *message) { m.Nodes = []Contact{bad("192.0.2.1:0")} }), "contact", errBadField},
		{"contact unspecified IPv4", reply(msgGet, func(m *message) { m.Nodes = []Contact{bad("0.0.0.0:4000")} }), "contact", errBadField},
		{"contact unspecified IPv6", reply(msgPutProbe, func(m *message) { m.Nodes = []Contact{bad("[::]:4000")} }), "contact", errBadField},
		{"contact multicast IPv4", reply(msgFindNode, func(m *message) { m.Nodes = []Contact{bad("239.1.2.3:4000")} }), "contact", errBadField},
		{"contact multicast IPv6", reply(msgFindNode, func(m *message) { m.Nodes = []Contact{bad("[ff02::1]:4000")} }), "contact", errBadField},
		{"cluster count 9", patched(pingBytes, wireOffClustersV, 9), "cluster count", errBadField},
		{"cluster count 255", patched(pingBytes, wireOffClustersV, 255), "cluster count", errBadField},
		{"cluster levels repeated", with(func(m *message) { m.Clusters = append(wireClusters(0, 1), wireClusters(1)...) }), "cluster level", errBadField},
		{"cluster levels decreasing", with(func(m *message) { m.Clusters = append(wireClusters(0, 2), wireClusters(1)...) }), "cluster level", errBadField},
		{"cluster level 8", with(func(m *message) { m.Clusters = append(wireClusters(0), wireClusters(8)...) }), "cluster level", errBadField},
		{"level-0 cluster with non-zero ID", with(func(m *message) {
			m.Clusters = wireClusters(0, 1)
			m.Clusters[0].ID = KeyFor("x")
		}), "cluster level", errBadField},
		{"level-1 cluster with zero ID", with(func(m *message) {
			m.Clusters = wireClusters(0, 1)
			m.Clusters[1].ID = ID{}
		}), "cluster level", errBadField},
		{"cluster created beyond 2^40 s", patched(with(func(m *message) { m.Clusters = wireClusters(0) }),
			body+1+IDLen+1, 0, 0, 1, 0, 0, 0, 0, 1), "cluster created", errBadField},
		{"cluster created negative", patched(with(func(m *message) { m.Clusters = wireClusters(0) }),
			body+1+IDLen+1, 0x80), "cluster created", errBadField},
		{"find_node level 8", request(msgFindNode, func(m *message) { m.Level = MaxLevels }), "level", errBadField},
		{"get level 255", request(msgGet, func(m *message) { m.Level = 255 }), "level", errBadField},
		{"put_probe level 8", request(msgPutProbe, func(m *message) { m.Level = MaxLevels }), "level", errBadField},
		{"store level 8", request(msgStore, func(m *message) { m.Level = MaxLevels }), "level", errBadField},
		{"put_probe reserved request flag", request(msgPutProbe, func(m *message) { m.Flags = 0x02 }), "request flags", errBadField},
		{"store reserved request flag", request(msgStore, func(m *message) { m.Flags = 0x81 }), "request flags", errBadField},
		// store body: level 1, flags 1, key 20, ttl 4, then the value length.
		{"store value length 0", patched(request(msgStore, func(m *message) {}), body+1+1+IDLen+4, 0, 0), "value length", errBadField},
		{"store value length 513", func(t *testing.T) []byte {
			b := wireEncode(t, &message{Type: msgStore, ReqID: 1, Timestamp: wireStamp, Sender: wireV4Sender,
				Key: wireKey, TTL: 1000, Value: make([]byte, MaxValueSizeLimit)})
			b = wirePatch(b, body+1+1+IDLen+4, 0x02, 0x01)
			return append(b, 0)
		}, "value length", errBadField},
		{"get reply value length 0", reply(msgGet, func(m *message) { m.Values = []wireValue{{TTL: 1}} }), "value length", errBadField},
		{"get reply value length 513", reply(msgGet, func(m *message) { m.Values = wireValues(MaxValueSizeLimit + 1) }), "value length", errBadField},
		{"store reply value length 0", reply(msgStore, func(m *message) { m.Values = append(wireValues(5), wireValue{TTL: 1}) }), "value length", errBadField},
		{"contact count 17", func(t *testing.T) []byte {
			b := wireEncode(t, &message{Type: msgFindNode, Response: true, ReqID: 1, Timestamp: wireStamp,
				Sender: wireV4Sender, Nodes: wireContacts(16)})
			b = wirePatch(b, body+1, 17)
			var w writer
			w.contact(wireContacts(17)[16])
			return append(b, w.b...)
		}, "contact count", errBadField},
		{"contact count 255", patched(reply(msgFindNode, func(m *message) {}), body+1, 255), "contact count", errBadField},
		// put_probe reply: status, then loaded.
		{"loaded 2", patched(reply(msgPutProbe, func(m *message) {}), body+1, 2), "loaded", errBadField},
		{"loaded 255", patched(reply(msgPutProbe, func(m *message) {}), body+1, 255), "loaded", errBadField},
		{"find_node status 4", reply(msgFindNode, func(m *message) { m.Status = statusEnd }), "status", errBadField},
		{"get status 255", reply(msgGet, func(m *message) { m.Status = 255 }), "status", errBadField},
		{"put_probe status 4", reply(msgPutProbe, func(m *message) { m.Status = statusEnd }), "status", errBadField},
		{"store status 4", reply(msgStore, func(m *message) { m.Status = statusEnd }), "status", errBadField},
		{"store result 4", reply(msgStore, func(m *message) { m.Result = storeResultEnd }), "result", errBadField},
		{"store result 255", reply(msgStore, func(m *message) { m.Result = 255 }), "result", errBadField},
		// app bodies: kind or result 1, then the payload length.
		{"app kind 0", request(msgApp, func(m *message) { m.Kind = 0 }), "kind", errBadField},
		{"app result 4", reply(msgApp, func(m *message) { m.AppResult = appResultEnd }), "result", errBadField},
		{"app result 255", reply(msgApp, func(m *message) { m.AppResult = 255 }), "result", errBadField},
		{"app request payload length 769", func(t *testing.T) []byte {
			b := wireEncode(t, &message{Type: msgApp, ReqID: 1, Timestamp: wireStamp, Sender: wireV4Sender,
				Kind: 1, Payload: make([]byte, MaxAppPayload)})
			b = wirePatch(b, body+1, (MaxAppPayload+1)>>8, (MaxAppPayload+1)&0xFF)
			return append(b, 0)
		}, "payload length", errBadField},
		{"app reply payload length 65535", patched(reply(msgApp, func(m *message) { m.Payload = []byte("x") }), body+1, 0xFF, 0xFF), "payload length", errBadField},
		{"app payload shorter than its length", func(t *testing.T) []byte {
			b := wireEncode(t, &message{Type: msgApp, ReqID: 1, Timestamp: wireStamp, Sender: wireV4Sender, Kind: 1, Payload: []byte("abc")})
			return wirePatch(b, body+1, 0, 4)
		}, "payload", errShort},
		{"longer than a datagram", func(t *testing.T) []byte { return wireTooLong(t) }, "length", errTooLong},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := c.bytes(t)
			m, err := decodeMessage(b)
			if err == nil {
				t.Fatalf("decode accepted %x as %+v", b, m)
			}
			if m != nil {
				t.Errorf("decode returned a message with its error: %+v", m)
			}
			wantDecodeError(t, err, c.field, c.err)
		})
	}
}

// wireTooLong returns a well-formed store reply with three 512-byte values:
// no encoder would produce it, since it does not fit a datagram.
func wireTooLong(t testing.TB) []byte {
	b := wireEncode(t, &message{Type: msgStore, Response: true, ReqID: 1, Timestamp: wireStamp,
		Sender: wireV4Sender, Values: wireValues(MaxValueSizeLimit, MaxValueSizeLimit)})
	b = wirePatch(b, wireOffClustersV+1+3, 3)
	w := writer{b: b}
	w.u32(1000)
	w.u16(MaxValueSizeLimit)
	w.b = append(w.b, make([]byte, MaxValueSizeLimit)...)
	if len(w.b) <= MaxDatagram-tagLen {
		t.Fatalf("test message is only %d bytes", len(w.b))
	}
	return w.b
}

func TestWireEncodeRejects(t *testing.T) {
	base := func() *message {
		return &message{Type: msgStore, ReqID: 1, Timestamp: wireStamp, Sender: wireV4Sender, Key: wireKey, TTL: 1000, Value: []byte("v")}
	}
	cases := []struct {
		name string
		mod  func(m *message)
	}{
		{"type 0", func(m *message) { m.Type = 0 }},
		{"type 7", func(m *message) { m.Type = msgTypeEnd }},
		{"nine clusters", func(m *message) { m.Clusters = append(wireFullClusters(), wireClusters(8)...) }},
		{"sender port 0", func(m *message) { m.Sender.Addr = netip.MustParseAddrPort("192.0.2.1:0") }},
		{"sender unspecified", func(m *message) { m.Sender.Addr = netip.MustParseAddrPort("[::]:4000") }},
		{"sender invalid", func(m *message) { m.Sender = Contact{} }},
		{"store value empty", func(m *message) { m.Value = nil }},
		{"store value too long", func(m *message) { m.Value = make([]byte, MaxValueSizeLimit+1) }},
		{"app request payload too long", func(m *message) { m.Type, m.Kind, m.Payload = msgApp, 1, make([]byte, MaxAppPayload+1) }},
		{"app reply payload too long", func(m *message) { m.Type, m.Response, m.Payload = msgApp, true, make([]byte, MaxAppPayload+1) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := base()
			c.mod(m)
			if b, err := encodeMessage(nil, m); err == nil {
				t.Fatalf("encode accepted %+v as %x", m, b)
			}
		})
	}
}

func TestWireSizeDiscipline(t *testing.T) {
	const limit = MaxDatagram - tagLen
	valueEntry := func(v wireValue) int { return valueEntryHeader + len(v.Data) }
	contactLen := func(c Contact) int { return IDLen + addrLen(c.Addr) + 4 }

	t.Run("get reply with 300 values", func(t *testing.T) {
		var vs []wireValue
		for i := 0; i < 300; i++ {
			vs = append(vs, wireValue{TTL: uint32(i + 1), Data: []byte(fmt.Sprintf("value %03d", i))})
		}
		m := &message{Type: msgGet, Response: true, ReqID: 1, Timestamp: wireStamp, Sender: wireV6Sender,
			Clusters: wireFullClusters(), Values: vs}
		b, got := wireEncodeWithin(t, m, limit)
		n := len(got.Values)
		if n == 0 || n >= len(vs) || !reflect.DeepEqual(got.Values, vs[:n]) {
			t.Fatalf("decoded %d values; want a proper non-empty prefix of the %d sent", n, len(vs))
		}
		// As many as fit: the next one would leave no room for the
		// contact count byte.
		if len(b)+valueEntry(vs[n]) <= limit {
			t.Errorf("cut after %d values at %d bytes, but value %d (%d bytes) would still fit", n, len(b), n, valueEntry(vs[n]))
		}
	})
	t.Run("get reply with 300 small values stops at 255", func(t *testing.T) {
		var vs []wireValue
		for i := 0; i < 300; i++ {
			vs = append(vs, wireValue{TTL: 1, Data: []byte{byte(i)}})
		}
		// 255 entries of 7 bytes do not fit beside a header either; make
		// sure the count byte never wraps whatever fits.
		m := &message{Type: msgGet, Response: true, ReqID: 1, Timestamp: wireStamp, Sender: wireV4Sender, Values: vs}
		b := wireEncode(t, m)
		got, err := decodeMessage(b)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(got.Values); n == 0 || n > 255 || !reflect.DeepEqual(got.Values, vs[:n]) {
			t.Fatalf("decoded %d values; want a prefix of at most 255", n)
		}
		if len(b) > limit {
			t.Fatalf("%d bytes; limit %d", len(b), limit)
		}
	})
	// Whatever the value size, each reply with values fills up to the limit
	// exactly as far as the next value would not fit, never beyond.
	for _, typ := range []msgType{msgGet, msgPutProbe, msgStore} {
		t.Run(typ.String()+" reply fills exactly to the limit", func(t *testing.T) {
			for size := 1; size <= 80; size++ {
				for _, sender := range []Contact{wireV4Sender, wireV6Sender} {
					vs := make([]wireValue, 300)
					for i := range vs {
						vs[i] = wireValue{TTL: uint32(i), Data: bytes.Repeat([]byte{byte(i)}, size)}
					}
					m := &message{Type: typ, Response: true, ReqID: 1, Timestamp: wireStamp, Sender: sender,
						Clusters: wireClusters(0, 1), Values: vs}
					if typ == msgPutProbe {
						m.Nodes = wireV6Contacts(16)
					}
					b, err := encodeMessage(nil, m)
					if err != nil {
						t.Fatalf("value size %d: %v", size, err)
					}
					got, err := decodeMessage(b)
					if err != nil {
						t.Fatalf("value size %d: %v", size, err)
					}
					k := len(got.Values)
					if k == 0 || !reflect.DeepEqual(got.Values, vs[:k]) || !reflect.DeepEqual(got.Nodes, m.Nodes) {
						t.Fatalf("value size %d: decoded %d values, %d contacts", size, k, len(got.Nodes))
					}
					if k < 255 && len(b)+valueEntry(vs[k]) <= limit {
						t.Fatalf("value size %d: cut after %d values at %d bytes, but one more fits", size, k, len(b))
					}
				}
			}
		})
	}
	t.Run("store reply count byte caps at 255", func(t *testing.T) {
		var w writer
		w.limit = 1 << 20
		vs := wireValues(make([]int, 300)...)
		for i := range vs {
			vs[i].Data = []byte{byte(i)}
		}
		if n := w.values(vs, 0); n != 255 || w.b[0] != 255 || len(w.b) != 1+255*(valueEntryHeader+1) {
			t.Fatalf("values wrote %d entries (count byte %d, %d bytes); want 255", n, w.b[0], len(w.b))
		}
	})
	for _, n := range []int{16, 20} {
		t.Run(fmt.Sprintf("find_node reply with %d IPv6 contacts", n), func(t *testing.T) {
			cs := wireV6Contacts(n)
			m := &message{Type: msgFindNode, Response: true, ReqID: 1, Timestamp: wireStamp, Sender: wireV6Sender,
				Clusters: wireFullClusters(), Nodes: cs}
			_, got := wireEncodeWithin(t, m, limit)
			if !reflect.DeepEqual(got.Nodes, cs[:maxContactsPerReply]) {
				t.Fatalf("decoded %d contacts; want the first %d", len(got.Nodes), maxContactsPerReply)
			}
		})
	}
	t.Run("put_probe reply keeps contacts before values", func(t *testing.T) {
		cs := wireV6Contacts(16)
		vs := wireValues(100, 100, 100)
		m := &message{Type: msgPutProbe, Response: true, ReqID: 1, Timestamp: wireStamp, Sender: wireV6Sender,
			Clusters: wireFullClusters(), Count: 3, MinRemaining: 5, Values: vs, Nodes: cs}
		b, got := wireEncodeWithin(t, m, limit)
		if !reflect.DeepEqual(got.Nodes, cs) {
			t.Fatalf("decoded %d contacts; want all %d", len(got.Nodes), len(cs))
		}
		k := len(got.Values)
		if k == 0 || k >= len(vs) || !reflect.DeepEqual(got.Values, vs[:k]) {
			t.Fatalf("decoded %d values; want a proper non-empty prefix of %d", k, len(vs))
		}
		if len(b)+valueEntry(vs[k]) <= limit {
			t.Errorf("value %d would have fit", k)
		}
	})
	t.Run("get reply values leave contacts what is left", func(t *testing.T) {
		cs := wireV6Contacts(16)
		vs := wireValues(500, 500)
		m := &message{Type: msgGet, Response: true, ReqID: 1, Timestamp: wireStamp, Sender: wireV6Sender,
			Clusters: wireFullClusters(), Values: vs, Nodes: cs}
		b, got := wireEncodeWithin(t, m, limit)
		if !reflect.DeepEqual(got.Values, vs[:1]) {
			t.Fatalf("decoded %d values; want 1", len(got.Values))
		}
		k := len(got.Nodes)
		if k >= len(cs) || !reflect.DeepEqual(got.Nodes, cs[:k]) || len(b)+contactLen(cs[k]) <= limit {
			t.Fatalf("decoded %d contacts in %d bytes; want as many as fit", k, len(b))
		}
	})
	t.Run("store request with largest value and full header fits", func(t *testing.T) {
		m := &message{Type: msgStore, ReqID: ^uint64(0), Timestamp: wireStamp, Sender: wireV6Sender,
			Clusters: wireFullClusters(), Level: 7, Flags: reqFlagWantValues, Key: wireKey, TTL: ^uint32(0),
			Value: bytes.Repeat([]byte{0xFF}, MaxValueSizeLimit)}
		b := wireEncode(t, m)
		if len(b) > limit {
			t.Fatalf("%d bytes; limit %d", len(b), limit)
		}
		if want := headerMaxLen + storeBodyFixed + MaxValueSizeLimit; len(b) != want {
			t.Errorf("%d bytes; want headerMaxLen+storeBodyFixed+MaxValueSizeLimit = %d", len(b), want)
		}
		got, err := decodeMessage(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("round trip differs")
		}
		m.Value = append(m.Value, 0)
		if b, err := encodeMessage(nil, m); err == nil {
			t.Fatalf("a %d-byte value encoded to %d bytes", len(m.Value), len(b))
		}
	})
	t.Run("store reply values cut to fit", func(t *testing.T) {
		vs := wireValues(512, 512, 512, 512)
		m := &message{Type: msgStore, Response: true, ReqID: 1, Timestamp: wireStamp, Sender: wireV6Sender,
			Clusters: wireFullClusters(), Values: vs}
		b, got := wireEncodeWithin(t, m, limit)
		k := len(got.Values)
		if k == 0 || k >= len(vs) || !reflect.DeepEqual(got.Values, vs[:k]) || len(b)+valueEntry(vs[k]) <= limit {
			t.Fatalf("decoded %d values in %d bytes; want as many as fit", k, len(b))
		}
	})
}

// TestWireMatchesProtocolDoc checks the numbers in PROTOCOL.md against the
// code, so the spec and the implementation cannot drift apart silently.
func TestWireMatchesProtocolDoc(t *testing.T) {
	raw, err := os.ReadFile("PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)

	t.Run("header layout", func(t *testing.T) {
		// Parse the "offset size field" table of the Message section.
		i := strings.Index(doc, "offset size  field")
		if i < 0 {
			t.Fatal("header table not found")
		}
		block := doc[i:]
		block = block[:strings.Index(block, "```")]
		row := regexp.MustCompile(`(?m)^(\d+)\s+(\d+)\s+(.+)$`)
		type field struct{ off, size int }
		fields := map[string]field{}
		prevEnd := 0
		for _, r := range row.FindAllStringSubmatch(block, -1) {
			off, _ := strconv.Atoi(r[1])
			size, _ := strconv.Atoi(r[2])
			if off != prevEnd {
				t.Errorf("doc: field %q at offset %d, but the previous one ends at %d", r[3], off, prevEnd)
			}
			prevEnd = off + size
			fields[strings.Fields(r[3])[0]] = field{off, size}
		}
		if len(fields) != 7 {
			t.Fatalf("parsed %d fixed header fields from the doc: %v", len(fields), fields)
		}
		m := &message{Type: msgPutProbe, Response: true, ReqID: 0x1122334455667788, Timestamp: wireStamp,
			Recipient: KeyFor("recipient"), Sender: wireV4Sender, Clusters: wireClusters(0, 1)}
		b := wireEncode(t, m)
		at := func(name string) []byte {
			f, ok := fields[name]
			if !ok {
				t.Fatalf("doc has no field %q", name)
			}
			return b[f.off : f.off+f.size]
		}
		if got := at("magic"); !bytes.Equal(got, []byte{0xC0, 0x2A}) {
			t.Errorf("magic = %x", got)
		}
		if got := at("version"); !bytes.Equal(got, []byte{wireVersion}) || wireVersion != 1 {
			t.Errorf("version = %x", got)
		}
		if got := at("type"); got[0] != byte(msgPutProbe) {
			t.Errorf("type = %x", got)
		}
		if got := at("flags:"); got[0] != flagResponse || flagResponse != 1 {
			t.Errorf("flags = %x", got)
		}
		if got := at("request"); binary.BigEndian.Uint64(got) != m.ReqID {
			t.Errorf("request ID = %x", got)
		}
		if got := at("timestamp,"); int64(binary.BigEndian.Uint64(got)) != m.Timestamp {
			t.Errorf("timestamp = %x", got)
		}
		if got := at("recipient"); !bytes.Equal(got, m.Recipient[:]) {
			t.Errorf("recipient = %x", got)
		}
		if prevEnd != wireOffSender {
			t.Errorf("doc: sender contact starts at %d; code at %d", prevEnd, headerFixedLen-IDLen)
		}
		// Sender contact: ID, family 4, address, port, services.
		s := b[prevEnd:]
		if !bytes.Equal(s[:IDLen], m.Sender.ID[:]) || s[IDLen] != 4 ||
			!bytes.Equal(s[IDLen+1:IDLen+5], []byte{192, 0, 2, 10}) ||
			binary.BigEndian.Uint16(s[IDLen+5:]) != 4000 ||
			binary.BigEndian.Uint32(s[IDLen+7:]) != uint32(m.Sender.Services) {
			t.Errorf("sender contact = %x", s[:IDLen+11])
		}
		// Cluster count, then 30-byte entries: level, ID, size in eighths, created.
		c := s[IDLen+11:]
		if c[0] != 2 {
			t.Errorf("cluster count = %d", c[0])
		}
		e := c[1+clusterEntryLen:]
		if e[0] != 1 || !bytes.Equal(e[1:1+IDLen], m.Clusters[1].ID[:]) || e[1+IDLen] != byte(m.Clusters[1].LogSize*8) ||
			int64(binary.BigEndian.Uint64(e[2+IDLen:])) != m.Clusters[1].Created.Unix() {
			t.Errorf("cluster entry = %x", e[:clusterEntryLen])
		}
		// A put_probe reply with no lists: status, loaded, count, min_remaining, 0 values, 0 contacts.
		if len(e) != clusterEntryLen+1+1+1+4+1+1 {
			t.Errorf("put_probe reply body is %d bytes", len(e)-clusterEntryLen)
		}
	})

	t.Run("constants", func(t *testing.T) {
		checks := []string{
			fmt.Sprintf("at most **%d bytes**", MaxDatagram),
			fmt.Sprintf("first %d bytes of HMAC-SHA256", tagLen),
			fmt.Sprintf("cluster count c, at most %d", MaxLevels),
			fmt.Sprintf("%d·c  clusters", clusterEntryLen),
			fmt.Sprintf("level (0..%d)", MaxLevels-1),
			fmt.Sprintf("length 1..%d, then the bytes", MaxValueSizeLimit),
			fmt.Sprintf("contacts       1+…  count (≤ %d)", maxContactsPerReply),
			"count (≤ 255)",
			fmt.Sprintf("`MaxClockSkew` (default %v s)", DefaultConfig().MaxClockSkew.Seconds()),
			fmt.Sprintf("`ReorderWindow` (default %v s)", DefaultConfig().ReorderWindow.Seconds()),
			fmt.Sprintf("%d ok, %d not a member", statusOK, statusNotMember),
			fmt.Sprintf("%d no such level, %d invalid", statusBadLevel, statusInvalid),
			fmt.Sprintf("%d stored, %d refreshed", storeStored, storeRefreshed),
			fmt.Sprintf("%d full, %d exhausted", storeFull, storeExhausted),
			fmt.Sprintf("flags          1    bit %d = want values", reqFlagWantValues-1),
			fmt.Sprintf("payload        2+n  length 0..%d, then the bytes", MaxAppPayload),
			fmt.Sprintf("%d ok (the payload is the handler's reply)", appOK),
			fmt.Sprintf("%d no handler for the kind", appUnknown),
			fmt.Sprintf("%d busy", appBusy),
			fmt.Sprintf("%d failed (the payload is the", appFailed),
		}
		for _, c := range checks {
			if !strings.Contains(doc, c) {
				t.Errorf("PROTOCOL.md does not say %q", c)
			}
		}
		// The contact layout adds up to the code's maximum.
		if contactLenMax != 20+1+16+2+4 || clusterEntryLen != 1+20+1+8 {
			t.Errorf("contactLenMax %d, clusterEntryLen %d disagree with the doc", contactLenMax, clusterEntryLen)
		}
		if statusEnd != 4 || storeResultEnd != 4 || appResultEnd != 4 {
			t.Errorf("doc lists 4 statuses, 4 store results and 4 app results; code has %d, %d and %d", statusEnd, storeResultEnd, appResultEnd)
		}
	})

	t.Run("message types", func(t *testing.T) {
		row := regexp.MustCompile(`(?m)^\| (\d+) \| (\w+) \|`)
		rows := row.FindAllStringSubmatch(doc, -1)
		if len(rows) != int(msgTypeEnd)-1 {
			t.Fatalf("doc lists %d types; code has %d", len(rows), msgTypeEnd-1)
		}
		for _, r := range rows {
			n, _ := strconv.Atoi(r[1])
			if got := msgType(n).String(); got != r[2] {
				t.Errorf("type %d is %q in the doc, %q in the code", n, r[2], got)
			}
		}
	})
}

// wireEncodeWithin encodes m, checks the result fits in limit bytes, and
// decodes it again.
func wireEncodeWithin(t *testing.T, m *message, limit int) ([]byte, *message) {
	t.Helper()
	b := wireEncode(t, m)
	if len(b) > limit {
		t.Fatalf("%d bytes; limit %d", len(b), limit)
	}
	got, err := decodeMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	return b, got
}
