//go:build linux

package netns

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// partitionTable is the nftables table a partition adds inside a host.
const partitionTable = "coral_partition"

// Partition cuts the groups off from each other: every host drops what it
// receives from, and sends to, the hosts of the other groups (nftables
// rules inside each host's namespace). Hosts in no group, and hosts of one
// group among themselves, are not affected. A second Partition replaces
// the first.
func (l *Lab) Partition(groups ...[]*Host) error {
	if err := Available(true); err != nil {
		return err
	}
	if err := l.Heal(); err != nil {
		return err
	}
	var touched []*Host
	var errs []error
	for i, g := range groups {
		var others []string
		for j, o := range groups {
			if j == i {
				continue
			}
			for _, h := range o {
				others = append(others, h.Addr.String())
			}
		}
		if len(others) == 0 {
			continue
		}
		for _, h := range g {
			touched = append(touched, h)
			errs = append(errs, h.nft(partitionRules(others)))
		}
	}
	l.mu.Lock()
	l.partitioned = touched
	l.mu.Unlock()
	return errors.Join(errs...)
}

// partitionRules is the nft script that drops traffic to and from addrs.
func partitionRules(addrs []string) string {
	set := strings.Join(addrs, ", ")
	return fmt.Sprintf(`table inet %[1]s {
	chain input {
		type filter hook input priority 0; policy accept;
		ip saddr { %[2]s } drop
	}
	chain output {
		type filter hook output priority 0; policy accept;
		ip daddr { %[2]s } drop
	}
}
`, partitionTable, set)
}

// Heal removes the rules of the last Partition.
func (l *Lab) Heal() error {
	l.mu.Lock()
	hosts := l.partitioned
	l.partitioned = nil
	l.mu.Unlock()
	var errs []error
	for _, h := range hosts {
		errs = append(errs, h.nft("delete table inet "+partitionTable+"\n"))
	}
	return errors.Join(errs...)
}

// nft runs an nft script inside the host.
func (h *Host) nft(script string) error {
	nft, err := lookPath("nft")
	if err != nil {
		return err
	}
	argv := h.Command(nft, "-f", "-")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin = strings.NewReader(script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("nft in %s: %v: %s", h.Name, err, bytes.TrimSpace(out))
	}
	return nil
}

// SetLink takes the host's link down (false) or up (true): the host is cut
// off from every other host.
func (h *Host) SetLink(up bool) error {
	if h.veth == "" {
		return fmt.Errorf("netns: %s has no link on the switch", h.Name)
	}
	state := "down"
	if up {
		state = "up"
	}
	return h.lab.ip("-n", h.lab.sw, "link", "set", h.veth, state)
}
