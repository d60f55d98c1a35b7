package main

import (
	"testing"

	"github.com/coralcdn/coral/eval/internal/vtime"
)

func TestVirtualTime(t *testing.T) { vtime.RunChild(t, main) }
