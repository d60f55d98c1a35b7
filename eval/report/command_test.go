package main

import (
	"testing"

	"github.com/coralcdn/coral/eval/internal/evalrun"
)

// TestCommandAgrees: a file counts as an entry's result only when the run
// that wrote it had the entry's flags, however the run wrote them down.
func TestCommandAgrees(t *testing.T) {
	run := experiment{File: "x.json", Program: "x", Args: []string{"-duration", "180m", "-quick", "-burst=false",
		"-seeds", "1 2 3", "-nginx=", "-baseline", "$OLD_CADDY"}}
	const recorded = `go run ./eval/x -baseline=/opt/old/caddy -burst=false -classes="" -duration=3h0m0s -nginx="" -quick=true -seeds="1 2 3" -seed=1`
	for _, c := range []struct {
		what     string
		recorded string
		e        experiment
		ok       bool
	}{
		{"the entry's run, durations, booleans and quoted values written its own way", recorded, run, true},
		{"a flag the entry gives with another value", `go run ./eval/x -burst=true -duration=3h0m0s -nginx="" -quick=true -seeds="1 2 3"`, run, false},
		{"a duration that differs", `go run ./eval/x -burst=false -duration=30m0s -nginx="" -quick=true -seeds="1 2 3"`, run, false},
		{"a flag the run did not record", `go run ./eval/x -burst=false -duration=3h0m0s -quick=true -seeds="1 2 3"`, run, false},
		{"another entry's flags (one run writing two files)", recorded,
			experiment{File: "x-dns.json", Program: "x", Args: []string{"-classes", "dns-a,dns-b"}}, false},
		{"another program", `go run ./eval/xy -duration=3h0m0s`, run, false},
		{"a recorded command that does not parse", `go run ./eval/x -seeds="1 2`, run, false},
		{"the lab test's command", "A=docs/eval/a.json go test -count=1 -run TestA -v ./test/lab",
			experiment{File: "a.json", Program: "test/lab", Test: "TestA", Env: []string{"A=docs/eval/a.json"}}, true},
		{"another lab test", "A=docs/eval/a.json go test -count=1 -run TestB -v ./test/lab",
			experiment{File: "a.json", Program: "test/lab", Test: "TestA", Env: []string{"A=docs/eval/a.json"}}, false},
	} {
		if err := commandAgrees(c.recorded, c.e); (err == nil) != c.ok {
			t.Errorf("%s: commandAgrees = %v, want ok %v", c.what, err, c.ok)
		}
	}
}

// TestRegistryCommandsAgree: every entry's own command, written down as
// a run of it records it, agrees with the entry, so that -resume never
// reruns a file its own entry wrote.
func TestRegistryCommandsAgree(t *testing.T) {
	for _, e := range experiments {
		if err := commandAgrees(recordedCommand(e), e); err != nil {
			t.Errorf("%s: %v", e.File, err)
		}
	}
}

// recordedCommand is the command a run of e records (evalrun's
// CommandLine or TestCommandLine), with e's values and no other flag.
func recordedCommand(e experiment) string {
	if e.Test != "" {
		return evalrun.TestCommandLine(e.Program, e.Test, e.Env...)
	}
	rec := "go run ./eval/" + e.Program
	for name, v := range entryFlags(e.Args) {
		rec += " -" + name + "=" + evalrun.FlagValue(v)
	}
	return rec
}
