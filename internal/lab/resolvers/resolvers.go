//go:build linux

// Package resolvers starts real recursive resolvers (Unbound, BIND,
// Knot Resolver, PowerDNS Recursor, as packaged by Debian) as child processes
// against a fake DNS root on loopback: the harness of the resolver lab
// (test/resolverlab) and of the demo network (internal/lab/demonet).
// test/resolverlab/install-deps.sh installs them; test/resolverlab/README.md
// describes the configurations and each resolver's quirks.
//
// Each resolver gets a generated configuration in Options.Dir that keeps its
// packaged defaults except for what a lab on loopback needs: DNSSEC
// validation off (the fake root is unsigned), root hints replaced by
// Options.RootHints, querying loopback allowed, the special-use TLD test.
// resolved normally (Unbound and Knot answer it locally by default),
// listening on and sending upstream queries from Options.Addr, access for
// 127.0.0.0/8, no daemonising, chroot or privilege dropping, QNAME
// minimisation on (the resolver's default mode) or off, and logging that
// names every upstream query and server to <Dir>/<kind>.log.
//
// Authority is a small in-process authoritative server to play the fake
// root and the zones below it; it records the queries it gets.
//
// Resolvers need root (port 53; BIND also gets its address added to lo)
// and IPv4 loopback addresses.
package resolvers

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"time"

	"github.com/coralcdn/coral/internal/lab/proc"

	"github.com/miekg/dns"
)

// Kind names a resolver implementation.
type Kind string

// The supported resolvers.
const (
	Unbound  Kind = "unbound"
	BIND     Kind = "bind"
	Knot     Kind = "knot"
	PowerDNS Kind = "powerdns"
)

// Kinds lists every supported resolver.
var Kinds = []Kind{Unbound, BIND, Knot, PowerDNS}

// Binary is the name of the resolver's executable.
func (k Kind) Binary() string {
	switch k {
	case Unbound:
		return "unbound"
	case BIND:
		return "named"
	case Knot:
		return "kresd"
	case PowerDNS:
		return "pdns_recursor"
	}
	return ""
}

// controlBinary is the tool FlushCache runs, if any.
func (k Kind) controlBinary() string {
	switch k {
	case Unbound:
		return "unbound-control"
	case BIND:
		return "rndc"
	case PowerDNS:
		return "rec_control"
	}
	return "" // kresd: its control socket, spoken to directly
}

// LookPath finds an executable in $PATH or, since a test's $PATH may lack
// them, in /usr/sbin and /sbin.
func LookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in $PATH or /usr/sbin (run test/resolverlab/install-deps.sh)", name)
}

// Available reports why kind cannot run here (nil if it can): its binaries
// missing, or not running as root.
func Available(kind Kind) error {
	if kind.Binary() == "" {
		return fmt.Errorf("unknown resolver kind %q", kind)
	}
	if os.Geteuid() != 0 {
		return errors.New("resolvers need root (they bind port 53)")
	}
	for _, b := range []string{kind.Binary(), kind.controlBinary()} {
		if b == "" {
			continue
		}
		if _, err := LookPath(b); err != nil {
			return err
		}
	}
	return nil
}

// Options configures one resolver.
type Options struct {
	// Addr is the IPv4 address the resolver listens on (port 53, UDP and
	// TCP) and sends its upstream queries from. Use a distinct 127.x.y.z
	// per resolver. For BIND, which only listens on addresses it finds on
	// an interface, Start adds Addr/32 to lo and Stop removes it.
	Addr netip.Addr
	// RootHints are the fake root servers (port 53), IPv4. The i-th is
	// named RootServerName(i) in the hints.
	RootHints []netip.Addr
	// QNameMinimisation on gives each resolver's default minimisation mode
	// (all four minimise by default); off disables it.
	QNameMinimisation bool
	// Dir is a scratch directory for configs, logs, pid files, cache and
	// control sockets (t.TempDir()); created if missing.
	Dir string
	// Debug turns up logging well beyond what is needed to see upstream
	// queries: unbound verbosity 4, named -d 10 for every category, kresd
	// log_level('debug'), pdns_recursor loglevel=9.
	Debug bool
	// StartTimeout bounds Start's wait for the resolver to answer, within
	// ctx. Zero means 20 s.
	StartTimeout time.Duration

	// In a lab of separate hosts (internal/lab/netns) the resolver runs
	// inside a host: Command wraps its command line (netns.Host.Command)
	// and Dial reaches it from the caller (netns.Host.DialContext) for
	// the readiness check. Nil: the caller's own namespace.
	Command func(argv ...string) []string
	Dial    func(ctx context.Context, network, address string) (net.Conn, error)
	// Allow are the client networks besides 127.0.0.0/8 that may query
	// it (Unbound only).
	Allow []netip.Prefix
	// Quiet logs only errors and warnings instead of every query
	// (Unbound only): a lab that sends thousands of queries.
	Quiet bool
}

// Resolver is one running resolver process.
type Resolver struct {
	Kind    Kind
	Addr    netip.Addr
	Dir     string
	Config  string // path of its generated configuration file
	LogFile string // its stdout, stderr and log output

	proc *proc.Process

	flush func(ctx context.Context) error

	stopOnce sync.Once
	stopErr  error
	cleanup  []func()
}

// Start writes kind's configuration into o.Dir, starts it in the
// foreground, and returns once it answers queries on o.Addr over UDP and
// TCP. ctx bounds only the start; the process runs until Stop. On failure
// the process is stopped and the error includes its log.
func Start(ctx context.Context, kind Kind, o Options) (*Resolver, error) {
	if err := Available(kind); err != nil {
		return nil, err
	}
	if err := o.normalize(); err != nil {
		return nil, err
	}
	if (len(o.Allow) > 0 || o.Quiet) && kind != Unbound {
		return nil, fmt.Errorf("resolvers: Allow and Quiet are for Unbound only, not %s", kind)
	}

	r := &Resolver{Kind: kind, Addr: o.Addr, Dir: o.Dir}
	r.LogFile = filepath.Join(o.Dir, string(kind)+".log")
	if err := os.WriteFile(filepath.Join(o.Dir, "root.hints"), []byte(rootHintsFile(o.RootHints)), 0o644); err != nil {
		return nil, err
	}
	// Unix socket paths are limited to 107 bytes; t.TempDir() under a long
	// test name can exceed that, so fall back to a short directory.
	sockDir := o.Dir
	if len(sockDir) > 80 {
		short, err := os.MkdirTemp("", "rlab")
		if err != nil {
			return nil, err
		}
		sockDir = short
		r.cleanup = append(r.cleanup, func() { os.RemoveAll(short) })
	}

	args, err := r.configure(o, sockDir)
	if err != nil {
		r.runCleanup()
		return nil, err
	}

	bin, err := LookPath(kind.Binary())
	if err != nil {
		r.runCleanup()
		return nil, err
	}
	argv := append([]string{bin}, args...)
	if o.Command != nil {
		argv = o.Command(argv...)
	}
	r.proc, err = proc.Start(argv, proc.Options{
		Name: string(kind), Dir: o.Dir, Log: r.LogFile, Banner: "resolvers"})
	if err != nil {
		r.runCleanup()
		return nil, fmt.Errorf("start %s: %w", kind, err)
	}

	sctx, cancel := context.WithTimeout(ctx, o.StartTimeout)
	defer cancel()
	if err := r.waitReady(sctx, o.Dial); err != nil {
		r.Stop()
		return nil, fmt.Errorf("%s on %s: %w\n--- %s log ---\n%s", kind, o.Addr, err, kind, r.Log())
	}
	return r, nil
}

// normalize checks o and fills in its defaults: IPv4 addresses in their
// 4-byte form, an absolute Dir that exists, a start timeout.
func (o *Options) normalize() error {
	if !o.Addr.Is4() && !o.Addr.Is4In6() {
		return fmt.Errorf("resolvers: Addr %v: only IPv4 is supported", o.Addr)
	}
	o.Addr = o.Addr.Unmap()
	if len(o.RootHints) == 0 || len(o.RootHints) > 26 {
		return fmt.Errorf("resolvers: need 1 to 26 RootHints, got %d", len(o.RootHints))
	}
	hints := make([]netip.Addr, len(o.RootHints))
	for i, h := range o.RootHints {
		if !h.Is4() && !h.Is4In6() {
			return fmt.Errorf("resolvers: RootHints %v: only IPv4 is supported", h)
		}
		hints[i] = h.Unmap()
	}
	o.RootHints = hints
	if o.Dir == "" {
		return errors.New("resolvers: Options.Dir is required")
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return err
	}
	o.Dir = dir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 20 * time.Second
	}
	return nil
}

// configure writes the configuration of r.Kind and returns the arguments
// that start it in the foreground.
func (r *Resolver) configure(o Options, sockDir string) (args []string, err error) {
	switch r.Kind {
	case Unbound:
		args, err = r.configUnbound(o, sockDir)
	case BIND:
		args, err = r.configBIND(o)
		if err == nil {
			var remove func() error
			if remove, err = addLoopbackAddr(o.Addr); err == nil {
				r.cleanup = append(r.cleanup, func() { _ = remove() })
			}
		}
	case Knot:
		args, err = r.configKnot(o, sockDir)
	case PowerDNS:
		args, err = r.configPowerDNS(o, sockDir)
	}
	return args, err
}

// readinessProbe is a query the resolver answers by itself (no upstream
// queries), with a positive answer that a foreign server on the address
// would not give: CHAOS version.bind, or localhost. A for kresd (which
// SERVFAILs CHAOS queries).
func (r *Resolver) readinessProbe() *dns.Msg {
	probe := new(dns.Msg)
	if r.Kind == Knot {
		probe.SetQuestion("localhost.", dns.TypeA)
		return probe
	}
	probe.SetQuestion("version.bind.", dns.TypeTXT)
	probe.Question[0].Qclass = dns.ClassCHAOS
	return probe
}

// waitReady polls the readiness probe over UDP until a positive answer
// comes back, then checks TCP the same way.
func (r *Resolver) waitReady(ctx context.Context, dial func(ctx context.Context, network, address string) (net.Conn, error)) error {
	probe := r.readinessProbe()
	server := netip.AddrPortFrom(r.Addr, 53).String()
	var lastErr error
	for _, network := range []string{"udp", "tcp"} {
		c := &dns.Client{Net: network, Timeout: 250 * time.Millisecond}
		exchange := func() (*dns.Msg, error) {
			if dial == nil {
				resp, _, err := c.ExchangeContext(ctx, probe, server)
				return resp, err
			}
			qctx, cancel := context.WithTimeout(ctx, c.Timeout)
			defer cancel()
			conn, err := dial(qctx, network, server)
			if err != nil {
				return nil, err
			}
			defer conn.Close()
			resp, _, err := c.ExchangeWithConnContext(qctx, probe, &dns.Conn{Conn: conn})
			return resp, err
		}
		backoff := 10 * time.Millisecond
		for {
			resp, err := exchange()
			if err == nil {
				if resp.Rcode == dns.RcodeSuccess && len(resp.Answer) > 0 {
					break
				}
				err = fmt.Errorf("%s %s: %s with %d answers", probe.Question[0].Name,
					dns.TypeToString[probe.Question[0].Qtype], dns.RcodeToString[resp.Rcode], len(resp.Answer))
			}
			lastErr = err
			select {
			case <-r.proc.Done():
				return fmt.Errorf("exited before answering: %v", r.proc.ExitError())
			case <-ctx.Done():
				return fmt.Errorf("no %s answer before deadline: %v (last probe: %v)", network, ctx.Err(), lastErr)
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 200*time.Millisecond)
		}
	}
	if !r.Running() {
		return fmt.Errorf("exited right after answering: %v", r.proc.ExitError())
	}
	return nil
}

// Running reports whether the process is still running.
func (r *Resolver) Running() bool { return r.proc.Running() }

// Stop terminates the resolver (SIGTERM, then SIGKILL after 3 s) and waits
// for it. It reports an error if the process had already died on its own.
// Idempotent.
func (r *Resolver) Stop() error {
	r.stopOnce.Do(func() {
		if err := r.proc.Exited(); err != nil {
			r.stopErr = fmt.Errorf("%s exited unexpectedly: %w", r.Kind, r.proc.ExitError())
		}
		_ = r.proc.Stop(3 * time.Second)
		r.runCleanup()
	})
	return r.stopErr
}

func (r *Resolver) runCleanup() {
	for _, f := range r.cleanup {
		f()
	}
	r.cleanup = nil
}

// Log returns everything the resolver logged so far (stdout, stderr and
// its log output all go to LogFile).
func (r *Resolver) Log() string { return r.proc.Log() }

// LogTail returns at most the last n bytes of Log, for failure messages.
func (r *Resolver) LogTail(n int) string {
	s := r.Log()
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return "[...]\n" + s
}

// FlushCache empties the resolver's record cache (and, where cheap, its
// server-selection state) through its control channel: unbound-control,
// rndc, kresd's control socket or rec_control.
func (r *Resolver) FlushCache() error {
	if !r.Running() {
		return fmt.Errorf("%s is not running", r.Kind)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.flush(ctx); err != nil {
		return fmt.Errorf("%s flush cache: %w", r.Kind, err)
	}
	return nil
}

// control runs a control tool and returns an error with its output if it
// fails.
func control(ctx context.Context, tool string, args ...string) (string, error) {
	bin, err := LookPath(tool)
	if err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", tool, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// rootHintsFile renders a named.root-style hints file.
func rootHintsFile(roots []netip.Addr) string {
	var b strings.Builder
	b.WriteString("; fake root hints written by resolvers\n")
	for i := range roots {
		fmt.Fprintf(&b, ".\t3600000\tIN\tNS\t%s\n", RootServerName(i))
	}
	for i, a := range roots {
		fmt.Fprintf(&b, "%s\t3600000\tIN\tA\t%s\n", RootServerName(i), a)
	}
	return b.String()
}

func writeFile(path, content string) error {
	return os.WriteFile(path, []byte(content), 0o644)
}

func randomSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

// dialControl talks to kresd's control socket: sends one Lua command and
// returns the reply.
func dialControl(ctx context.Context, path, cmd string) (string, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	// "__binary" switches the socket to length-prefixed replies (kresd
	// answers it with a "> " prompt), so we know where the answer ends.
	if _, err := c.Write([]byte("__binary\n")); err != nil {
		return "", err
	}
	var prompt [2]byte
	if _, err := io.ReadFull(c, prompt[:]); err != nil {
		return "", fmt.Errorf("reading prompt: %w", err)
	}
	if string(prompt[:]) != "> " {
		return "", fmt.Errorf("unexpected reply %q to __binary", prompt[:])
	}
	if _, err := c.Write([]byte(cmd + "\n")); err != nil {
		return "", err
	}
	var hdr [4]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return "", err
	}
	n := int(hdr[0])<<24 | int(hdr[1])<<16 | int(hdr[2])<<8 | int(hdr[3])
	body := make([]byte, n)
	if _, err := io.ReadFull(c, body); err != nil {
		return "", err
	}
	return string(body), nil
}

func mkdir(path string) error { return os.MkdirAll(path, 0o755) }
