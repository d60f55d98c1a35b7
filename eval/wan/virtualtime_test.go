//go:build linux

package main

import (
	"testing"

	"github.com/coralcdn/coral/eval/internal/vtime"
)

// TestVirtualTime is the entry point of -mode virtual (see vtime.Main).
func TestVirtualTime(t *testing.T) { vtime.RunChild(t, main) }
