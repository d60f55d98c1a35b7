package main

import (
	"testing"

	"github.com/coralcdn/coral/eval/internal/vtime"
)

// TestVirtualTime is where `go run` of this command runs the experiment:
// vtime.Main builds this test binary and selects this test (see package vtime).
func TestVirtualTime(t *testing.T) { vtime.RunChild(t, main) }
