package wire

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// writer appends to a buffer that never grows past limit bytes.
type writer struct {
	b     []byte
	limit int
}

func (w *writer) u8(v uint8)   { w.b = append(w.b, v) }
func (w *writer) u16(v uint16) { w.b = binary.BigEndian.AppendUint16(w.b, v) }
func (w *writer) u32(v uint32) { w.b = binary.BigEndian.AppendUint32(w.b, v) }
func (w *writer) u64(v uint64) { w.b = binary.BigEndian.AppendUint64(w.b, v) }
func (w *writer) id(v ID)      { w.b = append(w.b, v[:]...) }
func (w *writer) boolean(v bool) {
	if v {
		w.u8(1)
	} else {
		w.u8(0)
	}
}

func addrLen(a netip.AddrPort) int {
	if a.Addr().Is4() {
		return 1 + 4 + 2
	}
	return 1 + 16 + 2
}

func (w *writer) addr(a netip.AddrPort) {
	ip := a.Addr()
	if ip.Is4() {
		w.u8(4)
		b := ip.As4()
		w.b = append(w.b, b[:]...)
	} else {
		w.u8(6)
		b := ip.As16()
		w.b = append(w.b, b[:]...)
	}
	w.u16(a.Port())
}

func (w *writer) contact(c Contact) {
	w.id(c.ID)
	w.addr(c.Addr)
	w.u32(uint32(c.Services))
}

func (w *writer) room() int { return w.limit - len(w.b) }

// values writes as many values as fit, leaving reserve bytes free; it returns
// how many it wrote.
func (w *writer) values(vs []Value, reserve int) int {
	at := len(w.b)
	w.u8(0)
	n := 0
	for _, v := range vs {
		if n == 255 || w.room()-reserve < valueEntryHeader+len(v.Data) {
			break
		}
		w.u32(v.TTL)
		w.u16(uint16(len(v.Data)))
		w.b = append(w.b, v.Data...)
		n++
	}
	w.b[at] = uint8(n)
	return n
}

func (w *writer) contacts(cs []Contact) int {
	at := len(w.b)
	w.u8(0)
	n := 0
	for _, c := range cs {
		if n == MaxContacts || w.room() < IDLen+addrLen(c.Addr)+4 {
			break
		}
		w.contact(c)
		n++
	}
	w.b[at] = uint8(n)
	return n
}

// Encode appends m's encoding to dst: header, body and, with m.Ext, the
// extension area. Lists of values and contacts are cut to what fits in a
// datagram with its tag and extensions; a message that does not fit
// even so is an error. Field ranges are not re-checked here: the node builds
// messages only from validated arguments and decoded input, and
// Decode enforces every range on the way in.
func Encode(dst []byte, m *Message) ([]byte, error) {
	if m.Type < 1 || m.Type >= TypeEnd {
		return nil, fmt.Errorf("coraldht: encode: %w", errUnknown)
	}
	if len(m.Clusters) > MaxLevels {
		return nil, fmt.Errorf("coraldht: encode: %d clusters", len(m.Clusters))
	}
	if err := CheckAddr(m.Sender.Addr); err != nil {
		return nil, fmt.Errorf("coraldht: encode sender: %v", err)
	}
	start := len(dst)
	w := &writer{b: dst, limit: start + MaxDatagram - TagLen - extLen(m)}
	encodeHeader(w, m)
	var err error
	if m.Response {
		err = encodeResponseBody(w, m)
	} else {
		err = encodeRequestBody(w, m)
	}
	if err != nil {
		return nil, err
	}
	w.ext(m)
	if len(w.b)-start > MaxDatagram-TagLen {
		return nil, fmt.Errorf("coraldht: encode: %d bytes exceed the datagram limit", len(w.b)-start)
	}
	return w.b, nil
}

// encodeHeader writes the fixed header, the sender and its clusters.
func encodeHeader(w *writer, m *Message) {
	w.u8(wireMagic0)
	w.u8(wireMagic1)
	w.u8(wireVersion)
	w.u8(uint8(m.Type))
	if m.Response {
		w.u8(flagResponse)
	} else {
		w.u8(0)
	}
	w.u64(m.ReqID)
	w.u64(uint64(m.Timestamp))
	w.id(m.Recipient)
	w.contact(m.Sender)
	w.u8(uint8(len(m.Clusters)))
	for _, c := range m.Clusters {
		w.u8(uint8(c.Level))
		w.id(c.ID)
		ls := c.LogSize * 8
		switch {
		case ls < 0:
			ls = 0
		case ls > 255:
			ls = 255
		}
		w.u8(uint8(ls + 0.5))
		w.u64(uint64(max(c.Created.Unix(), 0)))
	}
}

// encodeRequestBody writes the body of a request of m's type.
func encodeRequestBody(w *writer, m *Message) error {
	switch m.Type {
	case Ping:
	case FindNode, Members:
		w.u8(m.Level)
		w.id(m.Target)
	case Get:
		w.u8(m.Level)
		w.id(m.Key)
		w.id(m.Target)
	case PutProbe:
		w.u8(m.Level)
		w.u8(m.Flags)
		w.id(m.Key)
		w.id(m.Target)
		w.u32(m.TTL)
	case Store:
		if len(m.Value) == 0 || len(m.Value) > MaxValueSizeLimit {
			return fmt.Errorf("coraldht: encode: value of %d bytes", len(m.Value))
		}
		w.u8(m.Level)
		w.u8(m.Flags)
		w.id(m.Key)
		w.u32(m.TTL)
		w.u16(uint16(len(m.Value)))
		w.b = append(w.b, m.Value...)
	case App:
		if len(m.Payload) > MaxAppPayload {
			return fmt.Errorf("coraldht: encode: app payload of %d bytes", len(m.Payload))
		}
		w.u8(m.Kind)
		w.u16(uint16(len(m.Payload)))
		w.b = append(w.b, m.Payload...)
	}
	return nil
}

// encodeResponseBody writes the body of a reply of m's type.
func encodeResponseBody(w *writer, m *Message) error {
	switch m.Type {
	case Ping:
	case FindNode, Members:
		w.u8(m.Status)
		w.contacts(m.Nodes)
	case Get:
		w.u8(m.Status)
		// Values first, keeping room for at least a few contacts' count byte.
		w.values(m.Values, 1)
		w.contacts(m.Nodes)
	case PutProbe:
		w.u8(m.Status)
		w.boolean(m.Loaded)
		w.u8(m.Count)
		w.u32(m.MinRemaining)
		// Contacts matter more than values here: a probe's values are only
		// a shortcut for put+get. Reserve room for the contacts.
		reserve := 1
		for i, c := range m.Nodes {
			if i == MaxContacts {
				break
			}
			reserve += IDLen + addrLen(c.Addr) + 4
		}
		w.values(m.Values, reserve)
		w.contacts(m.Nodes)
	case Store:
		w.u8(m.Status)
		w.u8(m.Result)
		w.u8(m.Count)
		w.values(m.Values, 0)
	case App:
		if len(m.Payload) > MaxAppPayload {
			return fmt.Errorf("coraldht: encode: app payload of %d bytes", len(m.Payload))
		}
		w.u8(m.AppResult)
		w.u16(uint16(len(m.Payload)))
		w.b = append(w.b, m.Payload...)
	}
	return nil
}
