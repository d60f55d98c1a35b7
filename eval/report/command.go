package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/coralcdn/coral/eval/internal/evalrun"
)

// commandAgrees reports whether recorded, the command a result file's run
// recorded, is e's: the same lab test, or a run of e's program in which
// every flag e gives has e's value. A run records every flag, defaults
// too, so the flags e leaves out are not compared. -resume relies on it:
// one run can write another entry's file (hostile.json's run writes
// hostile-dns.json too), and that file is not the other entry's result
// when the flags differ.
func commandAgrees(recorded string, e experiment) error {
	if e.Program == "" {
		return nil
	}
	if e.Test != "" {
		if want := evalrun.TestCommandLine(e.Program, e.Test, e.Env...); recorded != want {
			return fmt.Errorf("its run was `%s`, not `%s`", recorded, want)
		}
		return nil
	}
	got, err := evalrun.ParseCommandLine(recorded, e.Program)
	if err != nil {
		return fmt.Errorf("its run's command: %w", err)
	}
	want := entryFlags(e.Args)
	for name, v := range want {
		if strings.HasPrefix(v, "$") {
			continue // taken from the environment: the recorded value is the machine's
		}
		rv, ok := got[name]
		if !ok {
			return fmt.Errorf("its run recorded no -%s", name)
		}
		if !sameFlagValue(rv, v) {
			return fmt.Errorf("its run had -%s=%s, the entry gives %s", name, strconv.Quote(rv), strconv.Quote(v))
		}
	}
	return nil
}

// entryFlags is the flags an entry's arguments give: -name=value, -name
// value, or a bare -name (a boolean, true) when no value follows.
func entryFlags(args []string) map[string]string {
	flags := map[string]string{}
	for i := 0; i < len(args); i++ {
		name, ok := strings.CutPrefix(args[i], "-")
		if !ok {
			continue
		}
		name = strings.TrimPrefix(name, "-")
		if n, v, ok := strings.Cut(name, "="); ok {
			flags[n] = v
			continue
		}
		if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			flags[name] = args[i+1]
			i++
			continue
		}
		flags[name] = "true"
	}
	return flags
}

// sameFlagValue compares a recorded value with an entry's, which may be
// written differently: a duration (180m, recorded 3h0m0s).
func sameFlagValue(recorded, given string) bool {
	if recorded == given {
		return true
	}
	a, errA := time.ParseDuration(recorded)
	b, errB := time.ParseDuration(given)
	return errA == nil && errB == nil && a == b
}
