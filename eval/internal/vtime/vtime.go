// Package vtime runs a function in virtual time outside of `go test`, so
// that experiments started with `go run ./eval/NAME` can simulate hours of
// a thousand-node network in seconds.
//
// Go provides virtual time only through testing/synctest, whose entry point
// needs a *testing.T. Main obtains one by starting the testing framework
// in-process with testing.MainStart and a minimal test-dependency value, runs
// the function inside a synctest bubble and exits. Inside the bubble time
// advances only when every goroutine of the bubble is blocked, so the
// function must create its timers, channels and goroutines itself (build the
// simulated network inside it) and leave no goroutine blocked forever.
package vtime

import (
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"testing"
	"testing/synctest"
	"time"
)

// Main runs f in a synctest bubble and exits the process: status 0 when f
// returns nil, 1 after printing its error otherwise. Call it from main after
// parsing flags. It never returns.
func Main(f func() error) {
	var err error
	tests := []testing.InternalTest{{
		Name: "virtual_time",
		F: func(t *testing.T) {
			synctest.Test(t, func(*testing.T) { err = f() })
			// Leave before the testing framework prints its summary.
			if err != nil {
				fmt.Fprintln(os.Stderr, "error:", err)
				os.Exit(1)
			}
			os.Exit(0)
		},
	}}
	m := testing.MainStart(deps{}, tests, nil, nil, nil)
	os.Exit(m.Run())
}

// corpusEntry mirrors testing's alias of the same name, so deps satisfies
// testing's unexported testDeps interface.
type corpusEntry = struct {
	Parent     string
	Path       string
	Data       []byte
	Values     []any
	Generation int
	IsSeed     bool
}

var errNoFuzz = errors.New("vtime: fuzzing is not supported")

// deps implements the hooks testing.MainStart needs; everything optional is
// a no-op.
type deps struct{}

func (deps) ImportPath() string                          { return "" }
func (deps) ModulePath() string                          { return "" }
func (deps) MatchString(_, _ string) (bool, error)       { return true, nil }
func (deps) SetPanicOnExit0(bool)                        {}
func (deps) StartCPUProfile(io.Writer) error             { return nil }
func (deps) StopCPUProfile()                             {}
func (deps) StartTestLog(io.Writer)                      {}
func (deps) StopTestLog() error                          { return nil }
func (deps) WriteProfileTo(string, io.Writer, int) error { return nil }
func (deps) CoordinateFuzzing(time.Duration, int64, time.Duration, int64, int, []corpusEntry, []reflect.Type, string, string) error {
	return errNoFuzz
}
func (deps) RunFuzzWorker(func(corpusEntry) error) error { return errNoFuzz }
func (deps) ReadCorpus(string, []reflect.Type) ([]corpusEntry, error) {
	return nil, nil
}
func (deps) CheckCorpus([]any, []reflect.Type) error { return nil }
func (deps) ResetCoverage()                          {}
func (deps) SnapshotCoverage()                       {}
func (deps) InitRuntimeCoverage() (string, func(string, string) (string, error), func() float64) {
	return "", nil, nil
}
