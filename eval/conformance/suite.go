package main

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/coralcdn/coral/eval/internal/evalrun"
	"github.com/coralcdn/coral/internal/lab/proc"
)

// nodeHelpers are our Node.js modules around the suite (the suite's own
// code is never copied here): origin.mjs binds its origin to loopback,
// client.mjs sends its control requests to the origin and sets Host,
// tests.mjs lists its tests.
//
//go:embed node/*.mjs
var nodeHelpers embed.FS

// suite is a checkout of github.com/http-tests/cache-tests with its
// dependencies installed, and the Node.js that runs it.
type suite struct {
	dir     string // CACHE_TESTS_DIR
	node    string // the node binary
	helpers string // where node/*.mjs were written
	commit  string // the checkout's commit, or ""
}

// openSuite checks that dir is a cache-tests checkout ready to run and
// writes our helpers to work.
func openSuite(dir, node, work string) (*suite, error) {
	if dir == "" {
		return nil, errors.New("no cache-tests checkout: set CACHE_TESTS_DIR (or -suite) to a clone of " + suiteRepo + " after `npm install --omit=dev` in it")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	for _, f := range []string{"tests/index.mjs", "test-engine/cli.mjs", "test-engine/server/server.mjs"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return nil, fmt.Errorf("%s is not a cache-tests checkout (%s missing); clone %s", dir, f, suiteRepo)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "undici")); err != nil {
		return nil, fmt.Errorf("%s: dependencies missing; run `npm install --omit=dev` there", dir)
	}
	if node, err = exec.LookPath(node); err != nil {
		return nil, fmt.Errorf("no node binary: %w (Debian package nodejs)", err)
	}
	s := &suite{dir: dir, node: node, helpers: filepath.Join(work, "node")}
	if err := os.MkdirAll(s.helpers, 0o755); err != nil {
		return nil, err
	}
	if err := fs.WalkDir(nodeHelpers, "node", func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := nodeHelpers.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(work, path), b, 0o644)
	}); err != nil {
		return nil, err
	}
	if out, err := exec.Command("git", "-C", dir, "rev-parse", "HEAD").Output(); err == nil {
		s.commit = strings.TrimSpace(string(out))
	}
	return s, nil
}

// suiteRepo is where the suite comes from.
const suiteRepo = "https://github.com/http-tests/cache-tests"

// nodeVersion is `node --version`.
func (s *suite) nodeVersion() string { return evalrun.FirstLine(exec.Command(s.node, "--version")) }

// tests lists the suite's tests.
func (s *suite) tests() ([]Test, error) {
	cmd := exec.Command(s.node, filepath.Join(s.helpers, "tests.mjs"), s.dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("listing the tests: %v\n%s", err, stderr.String())
	}
	var tests []Test
	if err := json.Unmarshal(out, &tests); err != nil {
		return nil, fmt.Errorf("listing the tests: %w", err)
	}
	if len(tests) == 0 {
		return nil, errors.New("listing the tests: none")
	}
	return tests, nil
}

// startOrigin runs the suite's origin server on addr:port, logging to
// dir/origin.log, and waits until it accepts connections.
func (s *suite) startOrigin(ctx context.Context, addr string, port int, dir string) (*proc.Process, error) {
	if err := notListening(net.JoinHostPort(addr, strconv.Itoa(port))); err != nil {
		return nil, err
	}
	env := append(os.Environ(),
		"npm_config_protocol=http", "npm_config_port="+strconv.Itoa(port),
		"npm_config_pidfile="+filepath.Join(dir, "origin.pid"),
		"CONFORMANCE_LISTEN_HOST="+addr)
	p, err := proc.Start([]string{s.node, "--import", filepath.Join(s.helpers, "origin.mjs"), "test-engine/server/server.mjs"},
		proc.Options{Name: "cache-tests origin", Dir: s.dir, Env: env, Log: filepath.Join(dir, "origin.log")})
	if err != nil {
		return nil, err
	}
	if err := waitListening(ctx, "the cache-tests origin", net.JoinHostPort(addr, strconv.Itoa(port)), p); err != nil {
		p.Stop(5 * time.Second)
		return nil, err
	}
	return p, nil
}

// notListening returns an error if something already accepts connections
// on addr (another run, a cache left over): it would answer in place of
// the one started.
func notListening(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil
	}
	c.Close()
	return fmt.Errorf("%s is already in use (another run of eval/conformance?)", addr)
}

// waitListening waits until addr accepts a TCP connection, or p dies.
func waitListening(ctx context.Context, what, addr string, p *proc.Process) error {
	return evalrun.WaitFor(ctx, what+" to listen on "+addr, 30*time.Second, p.Exited, func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	})
}

// runClient runs the suite's client against base (http://ADDR:PORT), its
// control requests sent to origin, its test requests with Host host if
// not empty, and returns its JSON output: test ID to result. Its stderr
// (a line per test that could not be set up) goes to logPath.
func (s *suite) runClient(ctx context.Context, base, origin, host, logPath string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, clientTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.node, "--no-warnings", "--import", filepath.Join(s.helpers, "client.mjs"), "test-engine/cli.mjs")
	cmd.Dir = s.dir
	// cli.mjs reads its settings as npm passes them; an empty id runs
	// every test (unset, it would run one named "undefined").
	cmd.Env = append(os.Environ(), "npm_config_base="+base, "npm_config_id=", "npm_package_config_id=",
		"CONFORMANCE_ORIGIN="+origin, "CONFORMANCE_HOST="+host)
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd.Stderr = logf
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("the cache-tests client: %v (its log: %s)", err, logPath)
	}
	return out, nil
}

// clientTimeout bounds one client run; one takes about a minute (tests
// run 25 at a time, some pause for seconds, a request times out after
// 10 s).
const clientTimeout = 10 * time.Minute
