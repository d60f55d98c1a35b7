//go:build linux

// Package nfq is a minimal client of the kernel's netfilter queue
// (NFQUEUE, nfnetlink_queue): packets an iptables rule sends to a queue
// wait in the kernel until a program gives each its verdict (accept or
// drop), in any order. The wide-area lab (internal/lab/wan) holds each
// packet a router forwards for the one-way delay of the link it leaves on
// and then accepts it: the kernel still does the forwarding, the TTL
// decrement and the ICMP errors, the program only decides when.
//
//	q, err := nfq.Open(0, 40) // queue 0, the first 40 octets of each packet
//	for {
//		ps, err := q.Read()   // one or more packets
//		...
//		q.Verdicts(ids, nfq.Accept)
//	}
//
// The socket belongs to the network namespace of the thread that opens it
// (open it inside a netns.Host.Do). Only IPv4 and the calls the lab needs
// are implemented; the wire format is that of linux/netfilter/nfnetlink_queue.h.
package nfq

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Netlink and nfnetlink_queue constants (linux/netfilter/nfnetlink.h,
// nfnetlink_queue.h).
const (
	subsysQueue = 3 // NFNL_SUBSYS_QUEUE

	msgPacket  = 0 // NFQNL_MSG_PACKET
	msgVerdict = 1 // NFQNL_MSG_VERDICT
	msgConfig  = 2 // NFQNL_MSG_CONFIG

	attrPacketHdr  = 1  // NFQA_PACKET_HDR
	attrVerdictHdr = 2  // NFQA_VERDICT_HDR
	attrTimestamp  = 4  // NFQA_TIMESTAMP
	attrInDev      = 5  // NFQA_IFINDEX_INDEV
	attrOutDev     = 6  // NFQA_IFINDEX_OUTDEV
	attrPayload    = 10 // NFQA_PAYLOAD

	cfgCmd    = 1 // NFQA_CFG_CMD
	cfgParams = 2 // NFQA_CFG_PARAMS
	cfgMaxLen = 3 // NFQA_CFG_QUEUE_MAXLEN

	cmdBind = 1 // NFQNL_CFG_CMD_BIND

	copyPacket = 2 // NFQNL_COPY_PACKET

	nlmsgHdrLen = 16
	nfgenLen    = 4
)

// Verdicts.
const (
	Drop   uint32 = 0 // NF_DROP
	Accept uint32 = 1 // NF_ACCEPT
)

// Packet is one queued packet: its ID (for the verdict), the interfaces
// it came in on and leaves by (0 when the hook has none), and the first
// octets of its IP header and payload.
type Packet struct {
	ID      uint32
	InDev   uint32
	OutDev  uint32
	Payload []byte
	// Stamp is the packet's kernel timestamp (NFQA_TIMESTAMP), in
	// nanoseconds since the Unix epoch, or 0 when the kernel sent none.
	// It is the time the packet arrived in this namespace when the
	// kernel time-stamps received packets (some socket asked for
	// timestamps: SO_TIMESTAMP); a packet sent with a departure time
	// (TCP's pacing) carries that instead, on CLOCK_MONOTONIC.
	Stamp int64
}

// Queue is one bound queue on a netlink socket.
type Queue struct {
	fd  int
	num uint16

	rmu sync.Mutex // one reader at a time: buf is reused
	buf []byte

	wmu  sync.Mutex
	wbuf []byte
	seq  uint32
}

// Open binds queue num in the calling thread's network namespace and asks
// for the first copyRange octets of each packet.
func Open(num uint16, copyRange uint32) (*Queue, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("nfq: netlink socket: %w", err)
	}
	q := &Queue{fd: fd, num: num, buf: make([]byte, 1<<20)}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		q.Close()
		return nil, fmt.Errorf("nfq: bind: %w", err)
	}
	// A large receive buffer: a burst of packets must not overflow it
	// while the reader sleeps. As root, FORCE goes past rmem_max.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20)
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 4<<20)
	// A full socket buffer makes the kernel drop the packet, not report
	// ENOBUFS to us and lose track.
	_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_NO_ENOBUFS, 1)

	bind := []byte{cmdBind, 0, 0, 0} // command, pad, pf (unused since 3.8)
	params := make([]byte, 5)
	binary.BigEndian.PutUint32(params, copyRange)
	params[4] = copyPacket
	maxLen := make([]byte, 4)
	binary.BigEndian.PutUint32(maxLen, 16384)
	for _, attrs := range [][]attr{
		{{cfgCmd, bind}},
		{{cfgParams, params}},
		{{cfgMaxLen, maxLen}},
	} {
		if err := q.request(msgConfig, attrs); err != nil {
			q.Close()
			return nil, fmt.Errorf("nfq: configuring queue %d: %w", num, err)
		}
	}
	return q, nil
}

// Close closes the socket; the kernel unbinds the queue.
func (q *Queue) Close() error { return unix.Close(q.fd) }

type attr struct {
	typ  uint16
	data []byte
}

// appendMsg appends one nfnetlink message of the queue subsystem.
func appendMsg(b []byte, typ uint16, flags uint16, seq uint32, queue uint16, attrs []attr) []byte {
	start := len(b)
	b = binary.NativeEndian.AppendUint32(b, 0) // length, set below
	b = binary.NativeEndian.AppendUint16(b, subsysQueue<<8|typ)
	b = binary.NativeEndian.AppendUint16(b, flags)
	b = binary.NativeEndian.AppendUint32(b, seq)
	b = binary.NativeEndian.AppendUint32(b, 0) // port id: the kernel
	b = append(b, unix.AF_UNSPEC, 0)           // family, NFNETLINK_V0
	b = binary.BigEndian.AppendUint16(b, queue)
	for _, a := range attrs {
		b = binary.NativeEndian.AppendUint16(b, uint16(4+len(a.data)))
		b = binary.NativeEndian.AppendUint16(b, a.typ)
		b = append(b, a.data...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
	}
	binary.NativeEndian.PutUint32(b[start:], uint32(len(b)-start))
	return b
}

// request sends a configuration message with an acknowledgement asked
// for, and reads the acknowledgement (packets that arrive meanwhile would
// be lost, so configure before the rules send any).
func (q *Queue) request(typ uint16, attrs []attr) error {
	q.wmu.Lock()
	q.seq++
	seq := q.seq
	msg := appendMsg(nil, typ, unix.NLM_F_REQUEST|unix.NLM_F_ACK, seq, q.num, attrs)
	q.wmu.Unlock()
	if err := unix.Sendto(q.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 8192)
	for {
		n, _, err := unix.Recvfrom(q.fd, buf, 0)
		if err != nil {
			return err
		}
		for m := buf[:n]; len(m) >= nlmsgHdrLen; {
			l := int(binary.NativeEndian.Uint32(m))
			if l < nlmsgHdrLen || l > len(m) {
				return errors.New("truncated netlink message")
			}
			if binary.NativeEndian.Uint16(m[4:]) == unix.NLMSG_ERROR && binary.NativeEndian.Uint32(m[8:]) == seq {
				if l < nlmsgHdrLen+4 {
					return errors.New("short netlink error message")
				}
				if code := int32(binary.NativeEndian.Uint32(m[16:])); code != 0 {
					return unix.Errno(-code)
				}
				return nil
			}
			m = m[align4(l):]
		}
	}
}

func align4(n int) int { return (n + 3) &^ 3 }

// Read blocks until the kernel hands over one or more packets and returns
// them. Their payloads alias an internal buffer that the next Read
// overwrites.
func (q *Queue) Read() ([]Packet, error) {
	q.rmu.Lock()
	defer q.rmu.Unlock()
	for {
		n, _, err := unix.Recvfrom(q.fd, q.buf, 0)
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			return nil, err
		}
		ps, err := ParseMessages(q.buf[:n])
		if err != nil {
			return nil, err
		}
		if len(ps) > 0 {
			return ps, nil
		}
	}
}

// ParseMessages decodes the packet messages in one netlink datagram;
// other message types (acknowledgements) are skipped. Malformed input is
// an error, never a panic.
func ParseMessages(b []byte) ([]Packet, error) {
	var out []Packet
	for len(b) > 0 {
		if len(b) < nlmsgHdrLen {
			return out, fmt.Errorf("nfq: %d octets left, short of a netlink header", len(b))
		}
		l := int(binary.NativeEndian.Uint32(b))
		if l < nlmsgHdrLen || l > len(b) {
			return out, fmt.Errorf("nfq: netlink message length %d of %d octets", l, len(b))
		}
		typ := binary.NativeEndian.Uint16(b[4:])
		msg := b[nlmsgHdrLen:l]
		if typ == subsysQueue<<8|msgPacket {
			p, err := parsePacket(msg)
			if err != nil {
				return out, err
			}
			out = append(out, p)
		}
		if align4(l) >= len(b) {
			break
		}
		b = b[align4(l):]
	}
	return out, nil
}

// parsePacket decodes the body of one NFQNL_MSG_PACKET: the nfgenmsg
// header, then attributes.
func parsePacket(b []byte) (Packet, error) {
	var p Packet
	if len(b) < nfgenLen {
		return p, errors.New("nfq: packet message without its nfgenmsg header")
	}
	b = b[nfgenLen:]
	haveHdr := false
	for len(b) >= 4 {
		l := int(binary.NativeEndian.Uint16(b))
		typ := binary.NativeEndian.Uint16(b[2:]) & 0x3fff // without NLA_F_NESTED, NLA_F_NET_BYTEORDER
		if l < 4 || l > len(b) {
			return p, fmt.Errorf("nfq: attribute length %d of %d octets", l, len(b))
		}
		data := b[4:l]
		switch typ {
		case attrPacketHdr:
			if len(data) < 4 {
				return p, errors.New("nfq: short packet header")
			}
			p.ID = binary.BigEndian.Uint32(data)
			haveHdr = true
		case attrInDev, attrOutDev:
			if len(data) < 4 {
				return p, errors.New("nfq: short interface index")
			}
			if typ == attrInDev {
				p.InDev = binary.BigEndian.Uint32(data)
			} else {
				p.OutDev = binary.BigEndian.Uint32(data)
			}
		case attrPayload:
			p.Payload = data
		case attrTimestamp:
			// struct nfqnl_msg_packet_timestamp: be64 sec, be64 usec.
			if len(data) < 16 {
				return p, errors.New("nfq: short timestamp")
			}
			sec, usec := binary.BigEndian.Uint64(data), binary.BigEndian.Uint64(data[8:])
			if sec < 1<<33 && usec < 1e6 {
				p.Stamp = int64(sec)*1e9 + int64(usec)*1e3
			}
		}
		if align4(l) >= len(b) {
			break
		}
		b = b[align4(l):]
	}
	if !haveHdr {
		return p, errors.New("nfq: packet message without a packet header")
	}
	return p, nil
}

// Verdicts gives each of ids the verdict v, in as few system calls as the
// socket buffer allows.
func (q *Queue) Verdicts(ids []uint32, v uint32) error {
	q.wmu.Lock()
	defer q.wmu.Unlock()
	const flush = 32 << 10
	b := q.wbuf[:0]
	hdr := make([]byte, 8)
	send := func() error {
		if len(b) == 0 {
			return nil
		}
		err := unix.Sendto(q.fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
		b = b[:0]
		return err
	}
	for _, id := range ids {
		binary.BigEndian.PutUint32(hdr, v)
		binary.BigEndian.PutUint32(hdr[4:], id)
		q.seq++
		b = appendMsg(b, msgVerdict, unix.NLM_F_REQUEST, q.seq, q.num, []attr{{attrVerdictHdr, hdr}})
		if len(b) >= flush {
			if err := send(); err != nil {
				return os.NewSyscallError("sendto", err)
			}
		}
	}
	err := send()
	q.wbuf = b
	if err != nil {
		return os.NewSyscallError("sendto", err)
	}
	return nil
}
