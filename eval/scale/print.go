package main

import (
	"fmt"
	"strings"
)

// table is the result as text: one row per server and count.
func (r *Result) table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-8s %9s %10s %12s %11s %12s %9s %11s %13s\n",
		"server", "objects", "misses/s", "resident/obj", "index/obj", "disk/obj", "inodes/o", "restart s", "kill-restart")
	for _, s := range r.Servers {
		for _, p := range s.Points {
			fmt.Fprintf(&b, "%-8s %9d %10.0f %12.0f %11s %12.0f %9.2f %11s %13s\n",
				s.Name, p.Objects, p.MissPerSecond, p.ResidentPerObj, orDash(p.IndexBytesPerObj, "%.0f"),
				p.DiskPerObj, p.InodesPerObj, orDash(p.RestartSeconds, "%.2f"), orDash(p.KillRestartSecs, "%.2f"))
		}
	}
	return b.String()
}

func orDash(v float64, format string) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf(format, v)
}
