package wire

import (
	"bytes"
	"crypto/sha1"
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

// keyFor is coraldht.KeyFor: SHA-1 of s.
func keyFor(s string) ID { return ID(sha1.Sum([]byte(s))) }

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
			c.ID = keyFor(fmt.Sprintf("cluster at level %d", l))
		}
		cs = append(cs, c)
	}
	return cs
}

func wireFullClusters() []ClusterInfo { return wireClusters(0, 1, 2, 3, 4, 5, 6, 7) }

func wireValues(lengths ...int) []Value {
	var vs []Value
	for i, n := range lengths {
		vs = append(vs, Value{TTL: uint32(1000 * (i + 1) * 3600), Data: bytes.Repeat([]byte{byte('a' + i)}, n)})
	}
	return vs
}

var (
	wireV4Sender = wireContact("192.0.2.10:4000", ServiceDNS|ServiceHTTP)
	wireV6Sender = wireContact("[2001:db8::1]:53000", ServiceHTTP)
	wireStamp    = time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC).UnixNano()
	wireKey      = keyFor("http://example.com/index.html")
	wireTarget   = keyFor("intermediate target")
)

type wireSample struct {
	name string
	m    *Message
}

// wireSamples returns a realistic message of every type and direction.
func wireSamples() []wireSample {
	return []wireSample{
		{"ping/request", &Message{Type: Ping, ReqID: 0x0102030405060708, Timestamp: wireStamp,
			Sender: wireV4Sender, Clusters: wireClusters(0, 1, 2)}},
		{"ping/request/no-clusters", &Message{Type: Ping, ReqID: 1, Timestamp: 1,
			Sender: wireV4Sender}},
		{"ping/response", &Message{Type: Ping, Response: true, ReqID: ^uint64(0), Timestamp: wireStamp + 1,
			Sender: wireV6Sender, Clusters: wireFullClusters()}},
		{"find_node/request", &Message{Type: FindNode, ReqID: 42, Timestamp: wireStamp,
			Sender: wireV6Sender, Clusters: wireClusters(0, 3, 7), Level: 2, Target: wireTarget}},
		{"find_node/response", &Message{Type: FindNode, Response: true, ReqID: 42, Timestamp: wireStamp,
			Sender: wireV4Sender, Clusters: wireClusters(0, 1), Status: StatusOK, Nodes: wireContacts(8)}},
		{"find_node/response/not-member", &Message{Type: FindNode, Response: true, ReqID: 43, Timestamp: wireStamp,
			Sender: wireV4Sender, Clusters: wireClusters(0), Status: StatusNotMember}},
		{"members/request", &Message{Type: Members, ReqID: 44, Timestamp: wireStamp,
			Sender: wireV4Sender, Clusters: wireClusters(0, 1, 2), Level: 2, Target: wireTarget}},
		{"members/response", &Message{Type: Members, Response: true, ReqID: 44, Timestamp: wireStamp,
			Sender: wireV6Sender, Clusters: wireClusters(0, 1, 2), Status: StatusOK, Nodes: wireContacts(8)}},
		{"get/request", &Message{Type: Get, ReqID: 7, Timestamp: wireStamp,
			Sender: wireV4Sender, Clusters: wireClusters(0, 1, 2), Level: 1, Key: wireKey, Target: wireTarget}},
		{"get/response/values", &Message{Type: Get, Response: true, ReqID: 7, Timestamp: wireStamp,
			Sender: wireV6Sender, Clusters: wireClusters(0, 1, 2), Status: StatusOK, Values: wireValues(1, 20, 512)}},
		{"get/response/contacts", &Message{Type: Get, Response: true, ReqID: 8, Timestamp: wireStamp,
			Sender: wireV6Sender, Clusters: wireClusters(0, 2), Status: StatusOK, Nodes: wireContacts(16)}},
		{"get/response/bad-level", &Message{Type: Get, Response: true, ReqID: 9, Timestamp: wireStamp,
			Sender: wireV4Sender, Status: StatusBadLevel}},
		{"put_probe/request", &Message{Type: PutProbe, ReqID: 99, Timestamp: wireStamp,
			Sender: wireV4Sender, Clusters: wireFullClusters(), Level: 7, Flags: FlagWantValues,
			Key: wireKey, Target: wireTarget, TTL: 2 * 3600 * 1000}},
		{"put_probe/request/no-values", &Message{Type: PutProbe, ReqID: 100, Timestamp: wireStamp,
			Sender: wireV6Sender, Clusters: wireClusters(0), Level: 0, Key: wireKey, Target: wireKey, TTL: 1}},
		{"put_probe/response", &Message{Type: PutProbe, Response: true, ReqID: 99, Timestamp: wireStamp,
			Sender: wireV6Sender, Clusters: wireClusters(0, 1, 2), Status: StatusOK, Loaded: true, Count: 4,
			MinRemaining: 1800000, Values: wireValues(30, 60), Nodes: wireContacts(8)}},
		{"put_probe/response/invalid", &Message{Type: PutProbe, Response: true, ReqID: 101, Timestamp: wireStamp,
			Sender: wireV4Sender, Status: StatusInvalid}},
		{"store/request", &Message{Type: Store, ReqID: 5, Timestamp: wireStamp,
			Sender: wireV4Sender, Clusters: wireClusters(0, 1, 2), Level: 2, Flags: FlagWantValues,
			Key: wireKey, TTL: 3600000, Value: bytes.Repeat([]byte{0xAB}, MaxValueSizeLimit)}},
		{"store/request/one-byte", &Message{Type: Store, ReqID: 6, Timestamp: wireStamp,
			Sender: wireV6Sender, Clusters: wireClusters(0), Level: 0, Key: wireKey, TTL: 1000, Value: []byte{0}}},
		{"store/response", &Message{Type: Store, Response: true, ReqID: 5, Timestamp: wireStamp,
			Sender: wireV6Sender, Clusters: wireClusters(0, 1, 2), Status: StatusOK, Result: StoreRefreshed,
			Count: 3, Values: wireValues(10, 11)}},
		{"store/response/full", &Message{Type: Store, Response: true, ReqID: 6, Timestamp: wireStamp,
			Sender: wireV4Sender, Clusters: wireClusters(0, 1), Status: StatusOK, Result: StoreFull, Count: 4}},
		{"store/response/exhausted", &Message{Type: Store, Response: true, ReqID: 6, Timestamp: wireStamp,
			Sender: wireV4Sender, Status: StatusOK, Result: StoreExhausted}},
		{"app/request", &Message{Type: App, ReqID: 31, Timestamp: wireStamp,
			Sender: wireV4Sender, Clusters: wireClusters(0, 1, 2), Kind: 1,
			Payload: append([]byte{1, 0}, wireKey[:]...)}},
		{"app/request/empty", &Message{Type: App, ReqID: 32, Timestamp: wireStamp,
			Sender: wireV6Sender, Kind: 255}},
		{"app/request/largest", &Message{Type: App, ReqID: 33, Timestamp: wireStamp,
			Sender: wireV6Sender, Clusters: wireFullClusters(), Kind: 7, Payload: bytes.Repeat([]byte{0xA5}, MaxAppPayload)}},
		{"app/response", &Message{Type: App, Response: true, ReqID: 31, Timestamp: wireStamp,
			Sender: wireV6Sender, Clusters: wireClusters(0, 1), AppResult: AppOK, Payload: []byte{1, 0, 0, 0, 0, 2}}},
		{"app/response/largest", &Message{Type: App, Response: true, ReqID: 33, Timestamp: wireStamp,
			Sender: wireV6Sender, Clusters: wireFullClusters(), AppResult: AppOK, Payload: bytes.Repeat([]byte{0x5A}, MaxAppPayload)}},
		{"app/response/unknown", &Message{Type: App, Response: true, ReqID: 32, Timestamp: wireStamp,
			Sender: wireV4Sender, AppResult: AppUnknown}},
		{"app/response/busy", &Message{Type: App, Response: true, ReqID: 34, Timestamp: wireStamp,
			Sender: wireV4Sender, AppResult: AppBusy}},
		{"app/response/failed", &Message{Type: App, Response: true, ReqID: 35, Timestamp: wireStamp,
			Sender: wireV4Sender, Clusters: wireClusters(0), AppResult: AppFailed, Payload: []byte("no space left on device")}},
	}
}

func wireEncode(t testing.TB, m *Message) []byte {
	t.Helper()
	b, err := Encode(nil, m)
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
			if len(b) > MaxDatagram-TagLen {
				t.Fatalf("encoding is %d bytes; limit %d", len(b), MaxDatagram-TagLen)
			}
			got, err := Decode(b)
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
			app, err := Encode(append([]byte(nil), prefix...), tc.m)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(app[:len(prefix)], prefix) || !bytes.Equal(app[len(prefix):], b) {
				t.Fatalf("encodeMessage(prefix, m) = %x, want prefix + %x", app, b)
			}
		})
		seen[[2]int{int(tc.m.Type), btoi(tc.m.Response)}] = true
	}
	for typ := Type(1); typ < TypeEnd; typ++ {
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
	full := &Message{Type: Ping, ReqID: 3, Timestamp: wireStamp, Sender: wireV4Sender,
		Clusters: []ClusterInfo{}, Level: 3, Flags: 1, Key: wireKey, Target: wireTarget, TTL: 9,
		Value: []byte("x"), Status: 2, Loaded: true, Count: 7, MinRemaining: 8, Result: 1,
		Values: wireValues(3), Nodes: wireContacts(2)}
	bare := &Message{Type: Ping, ReqID: 3, Timestamp: wireStamp, Sender: wireV4Sender}
	if a, b := wireEncode(t, full), wireEncode(t, bare); !bytes.Equal(a, b) {
		t.Errorf("ping request carries fields it should ignore:\n%x\n%x", a, b)
	}
	emptyLists := &Message{Type: Get, Response: true, ReqID: 3, Timestamp: wireStamp, Sender: wireV4Sender,
		Clusters: []ClusterInfo{}, Values: []Value{}, Nodes: []Contact{}}
	got, err := Decode(wireEncode(t, emptyLists))
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
				m, err := Decode(b[:n:n])
				if !errors.Is(err, errShort) {
					t.Fatalf("decode of the first %d of %d bytes: (%v, %v), want %v", n, len(b), m, err, errShort)
				}
			}
		})
	}
}

// withExt returns a copy of m carrying every extension a revision of
// this code writes: the cookie, truncated (replies), a later revision's
// extension and an identity with its signature.
func withExt(m *Message) *Message {
	c := *m
	c.Ext, c.Grant, c.Echo = true, 0x1122334455667788, 0x99aabbccddeeff00
	c.Truncated = m.Response
	if !m.Response {
		c.Pad = 5
	}
	c.Load = Load{Present: true, Bandwidth: 97, Requests: 3, Disk: 255}
	c.Unknown = []byte{7, 0, 3, 'a', 'b', 'c'}
	c.Identity = bytes.Repeat([]byte{0xCE}, 113)
	c.Signature = bytes.Repeat([]byte{0x51}, SignatureLen)
	return &c
}

// TestWireExtensions: the extension area round-trips byte for byte on
// every message; the signature covers all before it; a later revision's
// extensions are kept; malformed areas are refused (PROTOCOL.md,
// Extensions).
func TestWireExtensions(t *testing.T) {
	for _, tc := range wireSamples() {
		t.Run(tc.name, func(t *testing.T) {
			m := withExt(tc.m)
			if len(m.Payload) == MaxAppPayload {
				m.Payload = m.Payload[:MaxAppPayload-ExtLen(m)-64]
			}
			b := wireEncode(t, m)
			got, err := Decode(b)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if got.SignedLen != len(b)-SignatureLen {
				t.Fatalf("SignedLen %d, want %d", got.SignedLen, len(b)-SignatureLen)
			}
			// Lists may have been cut to make room; compare what came back.
			want := *m
			want.Nodes, want.Values, want.SignedLen = got.Nodes, got.Values, got.SignedLen
			if !reflect.DeepEqual(got, &want) {
				t.Fatalf("decode(encode(m)) differs\n got %+v\nwant %+v", got, &want)
			}
			if again := wireEncode(t, got); !bytes.Equal(again, b) {
				t.Fatalf("encode(decode(b)) differs from b")
			}
			if len(got.Nodes) < min(len(m.Nodes), MaxContacts) || len(got.Values) < len(m.Values) {
				t.Logf("lists cut to fit the extensions: %d of %d contacts, %d of %d values", len(got.Nodes), len(m.Nodes), len(got.Values), len(m.Values))
			}
		})
	}
	base := wireEncode(t, &Message{Type: Ping, Response: true, ReqID: 1, Timestamp: wireStamp, Sender: wireV4Sender})
	tlv := func(typ byte, v ...byte) []byte { return append([]byte{typ, byte(len(v) >> 8), byte(len(v))}, v...) }
	cookie := tlv(1, make([]byte, 16)...)
	cat := func(parts ...[]byte) []byte { return bytes.Join(append([][]byte{base}, parts...), nil) }
	for _, c := range []struct {
		name  string
		b     []byte
		field string
		err   error
	}{
		{"one trailing byte", cat([]byte{0}), "extension length", errShort},
		{"length past the end", cat(tlv(1, make([]byte, 16)...)[:10]), "extension", errShort},
		{"no cookie first", cat(tlv(2)), "extension", errExtension},
		{"cookie of 8 bytes", cat(tlv(1, make([]byte, 8)...)), "cookie", errBadField},
		{"cookie twice", cat(cookie, cookie), "extension", errExtension},
		{"out of order", cat(cookie, tlv(9), tlv(7)), "extension", errExtension},
		{"truncated with a value", cat(cookie, tlv(2, 1)), "truncated", errBadField},
		{"padding not zero", cat(cookie, tlv(3, 0, 1)), "padding", errBadField},
		{"padding empty", cat(cookie, tlv(3)), "padding", errBadField},
		{"identity without a certificate", cat(cookie, tlv(255, make([]byte, 64)...)), "identity", errBadField},
		{"bytes after the identity", cat(cookie, tlv(255, make([]byte, 100)...), []byte{0}), "extension length", errShort},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := Decode(c.b)
			if m != nil {
				t.Fatalf("decoded %+v", m)
			}
			wantDecodeError(t, err, c.field, c.err)
		})
	}
	t.Run("truncated only in replies", func(t *testing.T) {
		req := wireEncode(t, &Message{Type: Ping, ReqID: 1, Timestamp: wireStamp, Sender: wireV4Sender})
		_, err := Decode(append(append(req, cookie...), tlv(2)...))
		wantDecodeError(t, err, "truncated", errBadField)
	})
	t.Run("a later revision's extension is kept", func(t *testing.T) {
		b := cat(cookie, tlv(5, 'x'), tlv(200))
		m, err := Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if !m.Ext || m.Truncated || m.Identity != nil || !bytes.Equal(m.Unknown, append(tlv(5, 'x'), tlv(200)...)) {
			t.Fatalf("decoded %+v", m)
		}
		if again := wireEncode(t, m); !bytes.Equal(again, b) {
			t.Fatalf("re-encoding lost the unknown extensions")
		}
	})
	t.Run("load", func(t *testing.T) {
		m, err := Decode(cat(cookie, tlv(4, LoadFormat, 91, 7, 0)))
		if err != nil || m.Load != (Load{Present: true, Bandwidth: 91, Requests: 7}) || m.Unknown != nil {
			t.Fatalf("decoded %+v, %v", m, err)
		}
		// A load in a later format, or longer, is a later revision's:
		// kept unread, and re-encoded as it came.
		for _, entry := range [][]byte{tlv(4, LoadFormat+1, 91, 7, 0), tlv(4, LoadFormat, 91, 7, 0, 5)} {
			b := cat(cookie, entry)
			m, err := Decode(b)
			if err != nil || m.Load.Present || !bytes.Equal(m.Unknown, entry) {
				t.Fatalf("%x: decoded %+v, %v", entry, m, err)
			}
			if again := wireEncode(t, m); !bytes.Equal(again, b) {
				t.Fatalf("%x: re-encoded differently", entry)
			}
		}
	})
	t.Run("capabilities are not services", func(t *testing.T) {
		if s := (ServiceDNS | CapExtensions).String(); s != "dns" {
			t.Fatalf("String = %q", s)
		}
		if !(ServiceHTTP | CapExtensions).Has(CapExtensions) {
			t.Fatal("Has(CapExtensions)")
		}
	})
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
	ping := func() *Message {
		return &Message{Type: Ping, ReqID: 1, Timestamp: wireStamp, Sender: wireV4Sender}
	}
	pingBytes := func(t *testing.T) []byte { return wireEncode(t, ping()) }
	with := func(mod func(m *Message)) func(t *testing.T) []byte {
		return func(t *testing.T) []byte {
			m := ping()
			mod(m)
			return wireEncode(t, m)
		}
	}
	patched := func(base func(t *testing.T) []byte, off int, v ...byte) func(t *testing.T) []byte {
		return func(t *testing.T) []byte { return wirePatch(base(t), off, v...) }
	}
	reply := func(typ Type, mod func(m *Message)) func(t *testing.T) []byte {
		return with(func(m *Message) { m.Type = typ; m.Response = true; mod(m) })
	}
	request := func(typ Type, mod func(m *Message)) func(t *testing.T) []byte {
		return with(func(m *Message) {
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
		{"type 7", patched(pingBytes, wireOffType, byte(TypeEnd)), "type", errUnknown},
		{"type 255", patched(pingBytes, wireOffType, 255), "type", errUnknown},
		{"flags bit 1", patched(pingBytes, wireOffFlags, 0x02), "flags", errBadField},
		{"flags bit 7 with response", patched(pingBytes, wireOffFlags, 0x81), "flags", errBadField},
		{"timestamp 0", with(func(m *Message) { m.Timestamp = 0 }), "timestamp", errBadField},
		{"timestamp negative", with(func(m *Message) { m.Timestamp = -1 }), "timestamp", errBadField},
		{"sender ID not SHA-1 of address", with(func(m *Message) { m.Sender.ID[0] ^= 0x80 }), "sender", errIDMismatch},
		{"sender ID of another port", with(func(m *Message) {
			m.Sender.ID = NodeIDFor(netip.AddrPortFrom(m.Sender.Addr.Addr(), m.Sender.Addr.Port()+1))
		}), "sender", errIDMismatch},
		{"sender address family 5", patched(pingBytes, wireOffFamily, 5), "sender", errBadField},
		{"sender address family 0", patched(pingBytes, wireOffFamily, 0), "sender", errBadField},
		{"sender IPv4-mapped IPv6", with(func(m *Message) { m.Sender = bad("[::ffff:192.0.2.10]:4000") }), "sender", errBadField},
		{"sender port 0", patched(pingBytes, wireOffPortV4, 0, 0), "sender", errBadField},
		{"sender 0.0.0.0", patched(pingBytes, wireOffIPv4, 0, 0, 0, 0), "sender", errBadField},
		{"sender multicast 224.0.0.1", patched(pingBytes, wireOffIPv4, 224, 0, 0, 1), "sender", errBadField},
		{"contact ID mismatch", reply(FindNode, func(m *Message) { m.Nodes = mismatched }), "contact", errIDMismatch},
		{"contact IPv4-mapped IPv6", reply(FindNode, func(m *Message) { m.Nodes = []Contact{bad("[::ffff:10.0.0.1]:4000")} }), "contact", errBadField},
		{"contact port 0", reply(FindNode, func(m *Message) { m.Nodes = []Contact{bad("192.0.2.1:0")} }), "contact", errBadField},
		{"contact unspecified IPv4", reply(Get, func(m *Message) { m.Nodes = []Contact{bad("0.0.0.0:4000")} }), "contact", errBadField},
		{"contact unspecified IPv6", reply(PutProbe, func(m *Message) { m.Nodes = []Contact{bad("[::]:4000")} }), "contact", errBadField},
		{"contact multicast IPv4", reply(FindNode, func(m *Message) { m.Nodes = []Contact{bad("239.1.2.3:4000")} }), "contact", errBadField},
		{"contact multicast IPv6", reply(FindNode, func(m *Message) { m.Nodes = []Contact{bad("[ff02::1]:4000")} }), "contact", errBadField},
		{"cluster count 9", patched(pingBytes, wireOffClustersV, 9), "cluster count", errBadField},
		{"cluster count 255", patched(pingBytes, wireOffClustersV, 255), "cluster count", errBadField},
		{"cluster levels repeated", with(func(m *Message) { m.Clusters = append(wireClusters(0, 1), wireClusters(1)...) }), "cluster level", errBadField},
		{"cluster levels decreasing", with(func(m *Message) { m.Clusters = append(wireClusters(0, 2), wireClusters(1)...) }), "cluster level", errBadField},
		{"cluster level 8", with(func(m *Message) { m.Clusters = append(wireClusters(0), wireClusters(8)...) }), "cluster level", errBadField},
		{"level-0 cluster with non-zero ID", with(func(m *Message) {
			m.Clusters = wireClusters(0, 1)
			m.Clusters[0].ID = keyFor("x")
		}), "cluster level", errBadField},
		{"level-1 cluster with zero ID", with(func(m *Message) {
			m.Clusters = wireClusters(0, 1)
			m.Clusters[1].ID = ID{}
		}), "cluster level", errBadField},
		{"cluster created beyond 2^40 s", patched(with(func(m *Message) { m.Clusters = wireClusters(0) }),
			body+1+IDLen+1, 0, 0, 1, 0, 0, 0, 0, 1), "cluster created", errBadField},
		{"cluster created negative", patched(with(func(m *Message) { m.Clusters = wireClusters(0) }),
			body+1+IDLen+1, 0x80), "cluster created", errBadField},
		{"find_node level 8", request(FindNode, func(m *Message) { m.Level = MaxLevels }), "level", errBadField},
		{"get level 255", request(Get, func(m *Message) { m.Level = 255 }), "level", errBadField},
		{"put_probe level 8", request(PutProbe, func(m *Message) { m.Level = MaxLevels }), "level", errBadField},
		{"store level 8", request(Store, func(m *Message) { m.Level = MaxLevels }), "level", errBadField},
		{"put_probe reserved request flag", request(PutProbe, func(m *Message) { m.Flags = 0x02 }), "request flags", errBadField},
		{"store reserved request flag", request(Store, func(m *Message) { m.Flags = 0x81 }), "request flags", errBadField},
		// store body: level 1, flags 1, key 20, ttl 4, then the value length.
		{"store value length 0", patched(request(Store, func(m *Message) {}), body+1+1+IDLen+4, 0, 0), "value length", errBadField},
		{"store value length 513", func(t *testing.T) []byte {
			b := wireEncode(t, &Message{Type: Store, ReqID: 1, Timestamp: wireStamp, Sender: wireV4Sender,
				Key: wireKey, TTL: 1000, Value: make([]byte, MaxValueSizeLimit)})
			b = wirePatch(b, body+1+1+IDLen+4, 0x02, 0x01)
			return append(b, 0)
		}, "value length", errBadField},
		{"get reply value length 0", reply(Get, func(m *Message) { m.Values = []Value{{TTL: 1}} }), "value length", errBadField},
		{"get reply value length 513", reply(Get, func(m *Message) { m.Values = wireValues(MaxValueSizeLimit + 1) }), "value length", errBadField},
		{"store reply value length 0", reply(Store, func(m *Message) { m.Values = append(wireValues(5), Value{TTL: 1}) }), "value length", errBadField},
		{"contact count 17", func(t *testing.T) []byte {
			b := wireEncode(t, &Message{Type: FindNode, Response: true, ReqID: 1, Timestamp: wireStamp,
				Sender: wireV4Sender, Nodes: wireContacts(16)})
			b = wirePatch(b, body+1, 17)
			var w writer
			w.contact(wireContacts(17)[16])
			return append(b, w.b...)
		}, "contact count", errBadField},
		{"contact count 255", patched(reply(FindNode, func(m *Message) {}), body+1, 255), "contact count", errBadField},
		// put_probe reply: status, then loaded.
		{"loaded 2", patched(reply(PutProbe, func(m *Message) {}), body+1, 2), "loaded", errBadField},
		{"loaded 255", patched(reply(PutProbe, func(m *Message) {}), body+1, 255), "loaded", errBadField},
		{"find_node status 4", reply(FindNode, func(m *Message) { m.Status = StatusEnd }), "status", errBadField},
		{"get status 255", reply(Get, func(m *Message) { m.Status = 255 }), "status", errBadField},
		{"put_probe status 4", reply(PutProbe, func(m *Message) { m.Status = StatusEnd }), "status", errBadField},
		{"store status 4", reply(Store, func(m *Message) { m.Status = StatusEnd }), "status", errBadField},
		{"store result 4", reply(Store, func(m *Message) { m.Result = StoreResultEnd }), "result", errBadField},
		{"store result 255", reply(Store, func(m *Message) { m.Result = 255 }), "result", errBadField},
		// app bodies: kind or result 1, then the payload length.
		{"app kind 0", request(App, func(m *Message) { m.Kind = 0 }), "kind", errBadField},
		{"app result 4", reply(App, func(m *Message) { m.AppResult = AppResultEnd }), "result", errBadField},
		{"app result 255", reply(App, func(m *Message) { m.AppResult = 255 }), "result", errBadField},
		{"app request payload length 769", func(t *testing.T) []byte {
			b := wireEncode(t, &Message{Type: App, ReqID: 1, Timestamp: wireStamp, Sender: wireV4Sender,
				Kind: 1, Payload: make([]byte, MaxAppPayload)})
			b = wirePatch(b, body+1, (MaxAppPayload+1)>>8, (MaxAppPayload+1)&0xFF)
			return append(b, 0)
		}, "payload length", errBadField},
		{"app reply payload length 65535", patched(reply(App, func(m *Message) { m.Payload = []byte("x") }), body+1, 0xFF, 0xFF), "payload length", errBadField},
		{"app payload shorter than its length", func(t *testing.T) []byte {
			b := wireEncode(t, &Message{Type: App, ReqID: 1, Timestamp: wireStamp, Sender: wireV4Sender, Kind: 1, Payload: []byte("abc")})
			return wirePatch(b, body+1, 0, 4)
		}, "payload", errShort},
		{"longer than a datagram", func(t *testing.T) []byte { return wireTooLong(t) }, "length", errTooLong},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := c.bytes(t)
			m, err := Decode(b)
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
	b := wireEncode(t, &Message{Type: Store, Response: true, ReqID: 1, Timestamp: wireStamp,
		Sender: wireV4Sender, Values: wireValues(MaxValueSizeLimit, MaxValueSizeLimit)})
	b = wirePatch(b, wireOffClustersV+1+3, 3)
	w := writer{b: b}
	w.u32(1000)
	w.u16(MaxValueSizeLimit)
	w.b = append(w.b, make([]byte, MaxValueSizeLimit)...)
	if len(w.b) <= MaxDatagram-TagLen {
		t.Fatalf("test message is only %d bytes", len(w.b))
	}
	return w.b
}

func TestWireEncodeRejects(t *testing.T) {
	base := func() *Message {
		return &Message{Type: Store, ReqID: 1, Timestamp: wireStamp, Sender: wireV4Sender, Key: wireKey, TTL: 1000, Value: []byte("v")}
	}
	cases := []struct {
		name string
		mod  func(m *Message)
	}{
		{"type 0", func(m *Message) { m.Type = 0 }},
		{"type 7", func(m *Message) { m.Type = TypeEnd }},
		{"nine clusters", func(m *Message) { m.Clusters = append(wireFullClusters(), wireClusters(8)...) }},
		{"sender port 0", func(m *Message) { m.Sender.Addr = netip.MustParseAddrPort("192.0.2.1:0") }},
		{"sender unspecified", func(m *Message) { m.Sender.Addr = netip.MustParseAddrPort("[::]:4000") }},
		{"sender invalid", func(m *Message) { m.Sender = Contact{} }},
		{"store value empty", func(m *Message) { m.Value = nil }},
		{"store value too long", func(m *Message) { m.Value = make([]byte, MaxValueSizeLimit+1) }},
		{"app request payload too long", func(m *Message) { m.Type, m.Kind, m.Payload = App, 1, make([]byte, MaxAppPayload+1) }},
		{"app reply payload too long", func(m *Message) { m.Type, m.Response, m.Payload = App, true, make([]byte, MaxAppPayload+1) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := base()
			c.mod(m)
			if b, err := Encode(nil, m); err == nil {
				t.Fatalf("encode accepted %+v as %x", m, b)
			}
		})
	}
}

func TestWireSizeDiscipline(t *testing.T) {
	const limit = MaxDatagram - TagLen
	valueEntry := func(v Value) int { return valueEntryHeader + len(v.Data) }
	contactLen := func(c Contact) int { return IDLen + addrLen(c.Addr) + 4 }

	t.Run("get reply with 300 values", func(t *testing.T) {
		var vs []Value
		for i := 0; i < 300; i++ {
			vs = append(vs, Value{TTL: uint32(i + 1), Data: []byte(fmt.Sprintf("value %03d", i))})
		}
		m := &Message{Type: Get, Response: true, ReqID: 1, Timestamp: wireStamp, Sender: wireV6Sender,
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
		var vs []Value
		for i := 0; i < 300; i++ {
			vs = append(vs, Value{TTL: 1, Data: []byte{byte(i)}})
		}
		// 255 entries of 7 bytes do not fit beside a header either; make
		// sure the count byte never wraps whatever fits.
		m := &Message{Type: Get, Response: true, ReqID: 1, Timestamp: wireStamp, Sender: wireV4Sender, Values: vs}
		b := wireEncode(t, m)
		got, err := Decode(b)
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
	for _, typ := range []Type{Get, PutProbe, Store} {
		t.Run(typ.String()+" reply fills exactly to the limit", func(t *testing.T) {
			for size := 1; size <= 80; size++ {
				for _, sender := range []Contact{wireV4Sender, wireV6Sender} {
					vs := make([]Value, 300)
					for i := range vs {
						vs[i] = Value{TTL: uint32(i), Data: bytes.Repeat([]byte{byte(i)}, size)}
					}
					m := &Message{Type: typ, Response: true, ReqID: 1, Timestamp: wireStamp, Sender: sender,
						Clusters: wireClusters(0, 1), Values: vs}
					if typ == PutProbe {
						m.Nodes = wireV6Contacts(16)
					}
					b, err := Encode(nil, m)
					if err != nil {
						t.Fatalf("value size %d: %v", size, err)
					}
					got, err := Decode(b)
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
			m := &Message{Type: FindNode, Response: true, ReqID: 1, Timestamp: wireStamp, Sender: wireV6Sender,
				Clusters: wireFullClusters(), Nodes: cs}
			_, got := wireEncodeWithin(t, m, limit)
			if !reflect.DeepEqual(got.Nodes, cs[:MaxContacts]) {
				t.Fatalf("decoded %d contacts; want the first %d", len(got.Nodes), MaxContacts)
			}
		})
	}
	t.Run("put_probe reply keeps contacts before values", func(t *testing.T) {
		cs := wireV6Contacts(16)
		vs := wireValues(100, 100, 100)
		m := &Message{Type: PutProbe, Response: true, ReqID: 1, Timestamp: wireStamp, Sender: wireV6Sender,
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
		m := &Message{Type: Get, Response: true, ReqID: 1, Timestamp: wireStamp, Sender: wireV6Sender,
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
		m := &Message{Type: Store, ReqID: ^uint64(0), Timestamp: wireStamp, Sender: wireV6Sender,
			Clusters: wireFullClusters(), Level: 7, Flags: FlagWantValues, Key: wireKey, TTL: ^uint32(0),
			Value: bytes.Repeat([]byte{0xFF}, MaxValueSizeLimit)}
		b := wireEncode(t, m)
		if len(b) > limit {
			t.Fatalf("%d bytes; limit %d", len(b), limit)
		}
		if want := headerMaxLen + storeBodyFixed + MaxValueSizeLimit; len(b) != want {
			t.Errorf("%d bytes; want headerMaxLen+storeBodyFixed+MaxValueSizeLimit = %d", len(b), want)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("round trip differs")
		}
		m.Value = append(m.Value, 0)
		if b, err := Encode(nil, m); err == nil {
			t.Fatalf("a %d-byte value encoded to %d bytes", len(m.Value), len(b))
		}
	})
	t.Run("store reply values cut to fit", func(t *testing.T) {
		vs := wireValues(512, 512, 512, 512)
		m := &Message{Type: Store, Response: true, ReqID: 1, Timestamp: wireStamp, Sender: wireV6Sender,
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
	raw, err := os.ReadFile("../../PROTOCOL.md")
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
		m := &Message{Type: PutProbe, Response: true, ReqID: 0x1122334455667788, Timestamp: wireStamp,
			Recipient: keyFor("recipient"), Sender: wireV4Sender, Clusters: wireClusters(0, 1)}
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
		if got := at("type"); got[0] != byte(PutProbe) {
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
			fmt.Sprintf("first %d bytes of HMAC-SHA256", TagLen),
			fmt.Sprintf("cluster count c, at most %d", MaxLevels),
			fmt.Sprintf("%d·c  clusters", clusterEntryLen),
			fmt.Sprintf("level (0..%d)", MaxLevels-1),
			fmt.Sprintf("length 1..%d, then the bytes", MaxValueSizeLimit),
			fmt.Sprintf("contacts       1+…  count (≤ %d)", MaxContacts),
			"count (≤ 255)",
			fmt.Sprintf("%d ok, %d not a member", StatusOK, StatusNotMember),
			fmt.Sprintf("%d no such level, %d invalid", StatusBadLevel, StatusInvalid),
			fmt.Sprintf("%d stored, %d refreshed", StoreStored, StoreRefreshed),
			fmt.Sprintf("%d full, %d exhausted", StoreFull, StoreExhausted),
			fmt.Sprintf("flags          1    bit %d = want values", FlagWantValues-1),
			fmt.Sprintf("payload        2+n  length 0..%d, then the bytes", MaxAppPayload),
			fmt.Sprintf("%d ok (the payload is the handler's reply)", AppOK),
			fmt.Sprintf("%d no handler for the kind", AppUnknown),
			fmt.Sprintf("%d busy", AppBusy),
			fmt.Sprintf("%d failed (the payload is the", AppFailed),
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
		if StatusEnd != 4 || StoreResultEnd != 4 || AppResultEnd != 4 {
			t.Errorf("doc lists 4 statuses, 4 store results and 4 app results; code has %d, %d and %d", StatusEnd, StoreResultEnd, AppResultEnd)
		}
	})

	t.Run("message types", func(t *testing.T) {
		row := regexp.MustCompile(`(?m)^\| (\d+) \| (\w+) \|`)
		rows := row.FindAllStringSubmatch(doc, -1)
		if len(rows) != int(TypeEnd)-1 {
			t.Fatalf("doc lists %d types; code has %d", len(rows), TypeEnd-1)
		}
		for _, r := range rows {
			n, _ := strconv.Atoi(r[1])
			if got := Type(n).String(); got != r[2] {
				t.Errorf("type %d is %q in the doc, %q in the code", n, r[2], got)
			}
		}
	})
}

// wireEncodeWithin encodes m, checks the result fits in limit bytes, and
// decodes it again.
func wireEncodeWithin(t *testing.T, m *Message, limit int) ([]byte, *Message) {
	t.Helper()
	b := wireEncode(t, m)
	if len(b) > limit {
		t.Fatalf("%d bytes; limit %d", len(b), limit)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return b, got
}
