package resolvers

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
)

// addLoopbackAddr puts a/32 on the loopback interface, as `ip addr add
// a/32 dev lo` would. BIND only listens on addresses it finds on an
// interface, and Linux only has 127.0.0.1/8 on lo (binding other 127/8
// addresses works without this; enumerating them does not). It returns a
// function that removes the address again, or a no-op if it was already
// there (then someone else owns it).
func addLoopbackAddr(a netip.Addr) (remove func() error, err error) {
	lo, err := loopbackIndex()
	if err != nil {
		return nil, err
	}
	switch err := ifaddrRequest(syscall.RTM_NEWADDR, syscall.NLM_F_CREATE|syscall.NLM_F_EXCL, lo, a); {
	case errors.Is(err, syscall.EEXIST):
		return func() error { return nil }, nil
	case err != nil:
		return nil, fmt.Errorf("add %s/32 to loopback: %w", a, err)
	}
	return func() error {
		if err := ifaddrRequest(syscall.RTM_DELADDR, 0, lo, a); err != nil && !errors.Is(err, syscall.EADDRNOTAVAIL) {
			return fmt.Errorf("remove %s/32 from loopback: %w", a, err)
		}
		return nil
	}, nil
}

func loopbackIndex() (int, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return 0, err
	}
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagLoopback != 0 {
			return ifc.Index, nil
		}
	}
	return 0, errors.New("no loopback interface")
}

// ifaddrRequest sends one RTM_NEWADDR/RTM_DELADDR for a/32 (host scope) on
// interface index and waits for the kernel's acknowledgement.
func ifaddrRequest(msgType uint16, flags uint16, index int, a netip.Addr) error {
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_RAW|syscall.SOCK_CLOEXEC, syscall.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return err
	}

	ip := a.As4()
	attr := func(typ uint16) []byte {
		b := make([]byte, 8)
		binary.NativeEndian.PutUint16(b[0:], 8)
		binary.NativeEndian.PutUint16(b[2:], typ)
		copy(b[4:], ip[:])
		return b
	}
	body := []byte{syscall.AF_INET, 32, 0, syscall.RT_SCOPE_HOST, 0, 0, 0, 0} // ifaddrmsg
	binary.NativeEndian.PutUint32(body[4:], uint32(index))
	body = append(body, attr(syscall.IFA_LOCAL)...)
	body = append(body, attr(syscall.IFA_ADDRESS)...)

	const seq = 1
	msg := make([]byte, syscall.SizeofNlMsghdr, syscall.SizeofNlMsghdr+len(body))
	binary.NativeEndian.PutUint32(msg[0:], uint32(syscall.SizeofNlMsghdr+len(body)))
	binary.NativeEndian.PutUint16(msg[4:], msgType)
	binary.NativeEndian.PutUint16(msg[6:], syscall.NLM_F_REQUEST|syscall.NLM_F_ACK|flags)
	binary.NativeEndian.PutUint32(msg[8:], seq)
	msg = append(msg, body...)
	if err := syscall.Sendto(fd, msg, 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return err
	}

	buf := make([]byte, 4096)
	for {
		n, _, err := syscall.Recvfrom(fd, buf, 0)
		if err != nil {
			return err
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if m.Header.Seq != seq || m.Header.Type != syscall.NLMSG_ERROR {
				continue
			}
			if len(m.Data) < 4 {
				return errors.New("short netlink error message")
			}
			if code := int32(binary.NativeEndian.Uint32(m.Data[:4])); code != 0 {
				return syscall.Errno(-code)
			}
			return nil
		}
	}
}
