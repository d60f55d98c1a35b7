package main

import (
	"bufio"
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"text/template"

	"github.com/coralcdn/coral/eval/internal/evalrun"
	"github.com/coralcdn/coral/internal/lab/labconf"
)

// configs are the committed configuration files of the caches, templates
// filled in with a run's addresses and directory (confData).
//
//go:embed configs
var configs embed.FS

// confData is what the configuration templates refer to.
type confData struct {
	Dir        string // the cache's directory in this run
	Addr       string // the loopback address it listens on
	Port       int    // its HTTP port
	DHTPort    int    // coral_proxy's DSHT node (UDP, on Addr)
	OriginAddr string // the suite's origin
	OriginPort int
	User       string // who the cache runs as (nginx, Traffic Server), "" for the default
}

// cache is one implementation under test: how to find it, configure it
// and start it. All listen on loopback addresses of their own, one port.
type cache struct {
	name  string // coral, trafficserver, squid, nginx: the flag's and the result file's name
	label string // for the table; the version is added
	addr  netip.Addr
	// coralHost: requests carry Host ORIGINADDR.ORIGINPORT.nyud.test.
	coralHost bool
	// find returns the binary, or an error saying why the cache is skipped.
	find func() (string, error)
	// version is the implementation's version string.
	version func(bin string) string
	// setup writes the configuration under d.Dir and returns the command
	// line and environment that run the cache in the foreground.
	setup func(bin string, d confData) (argv, env []string, err error)
}

const (
	originPort = 8000
	cachePort  = 8080
	dhtPort    = 4000
	zone       = "nyud.test"
)

// The brief's loopback range: 127.0.160.0/24.
var (
	originAddr = netip.MustParseAddr("127.0.160.1")
	caches     = []cache{
		{name: "coral", label: "coral_proxy, strict", addr: netip.MustParseAddr("127.0.160.2"), coralHost: true,
			find: func() (string, error) { return labconf.Binary("caddy") },
			version: func(bin string) string {
				// "coral-COMMIT v2.11.9 h1:...": the build and Caddy's version.
				f := strings.Fields(evalrun.FirstLine(exec.Command(bin, "version")))
				return strings.Join(f[:min(2, len(f))], " ")
			},
			setup: setupCoral},
		{name: "trafficserver", label: "Apache Traffic Server", addr: netip.MustParseAddr("127.0.160.3"),
			find: lookPath("traffic_server", "trafficserver"),
			version: func(bin string) string {
				// "Traffic Server 9.2.9 Apr  4 2026 14:52:39 HOST"
				f := strings.Fields(strings.TrimPrefix(evalrun.FirstLine(exec.Command(bin, "-V")), "Traffic Server "))
				return strings.Join(f[:min(1, len(f))], "")
			},
			setup: setupTrafficServer},
		{name: "squid", label: "Squid", addr: netip.MustParseAddr("127.0.160.4"),
			find: lookPath("squid", "squid"),
			version: func(bin string) string {
				return strings.TrimPrefix(evalrun.FirstLine(exec.Command(bin, "-v")), "Squid Cache: Version ")
			},
			setup: setupSquid},
		{name: "nginx", label: "nginx", addr: netip.MustParseAddr("127.0.160.5"),
			find: lookPath("nginx", "nginx"),
			version: func(bin string) string {
				return strings.TrimPrefix(evalrun.FirstLine(exec.Command(bin, "-v")), "nginx version: nginx/")
			},
			setup: setupNginx},
	}
)

// lookPath finds a program in PATH and the sbin directories, or says
// which Debian package has it.
func lookPath(prog, pkg string) func() (string, error) {
	return func() (string, error) {
		if p, err := exec.LookPath(prog); err == nil {
			return p, nil
		}
		for _, d := range []string{"/usr/sbin", "/usr/bin", "/sbin"} {
			p := filepath.Join(d, prog)
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
				return p, nil
			}
		}
		return "", fmt.Errorf("%s not installed (Debian package %s)", prog, pkg)
	}
}

// render fills in the template configs/NAME and writes it to path.
func render(name, path string, d confData) error {
	text, err := fs.ReadFile(configs, "configs/"+name)
	if err != nil {
		return err
	}
	t, err := template.New(name).Option("missingkey=error").Parse(string(text))
	if err != nil {
		return fmt.Errorf("configs/%s: %w", name, err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, d); err != nil {
		return fmt.Errorf("configs/%s: %w", name, err)
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

func setupCoral(bin string, d confData) ([]string, []string, error) {
	conf := filepath.Join(d.Dir, "Caddyfile")
	if err := render("coral.Caddyfile", conf, d); err != nil {
		return nil, nil, err
	}
	return labconf.CaddyArgv(bin, conf), labconf.CaddyEnv(d.Dir), nil
}

func setupNginx(bin string, d confData) ([]string, []string, error) {
	for _, sub := range []string{"tmp", "cache"} {
		if err := os.MkdirAll(filepath.Join(d.Dir, sub), 0o755); err != nil {
			return nil, nil, err
		}
	}
	if os.Geteuid() == 0 {
		// Workers would otherwise run as nobody, who cannot use the
		// run's directory.
		d.User = "root root"
	}
	conf := filepath.Join(d.Dir, "nginx.conf")
	if err := render("nginx.conf", conf, d); err != nil {
		return nil, nil, err
	}
	return []string{bin, "-p", d.Dir, "-c", conf, "-e", filepath.Join(d.Dir, "error.log"), "-g", "daemon off;"}, nil, nil
}

func setupSquid(bin string, d confData) ([]string, []string, error) {
	// Squid started as root runs as the proxy user, who must write its
	// logs and pid file here.
	if err := os.Chmod(d.Dir, 0o777); err != nil {
		return nil, nil, err
	}
	conf := filepath.Join(d.Dir, "squid.conf")
	if err := render("squid.conf", conf, d); err != nil {
		return nil, nil, err
	}
	return []string{bin, "-N", "-f", conf}, nil, nil
}

// debianTrafficServer is where Debian's trafficserver package keeps its
// configuration: every file is copied, records.config with this run's
// settings appended, and the files of configs/trafficserver replace
// Debian's.
const debianTrafficServer = "/etc/trafficserver"

func setupTrafficServer(bin string, d confData) ([]string, []string, error) {
	etc := filepath.Join(d.Dir, "etc")
	for _, sub := range []string{"etc", "run", "log", "cache"} {
		if err := os.MkdirAll(filepath.Join(d.Dir, sub), 0o755); err != nil {
			return nil, nil, err
		}
	}
	if err := os.CopyFS(etc, os.DirFS(debianTrafficServer)); err != nil {
		return nil, nil, fmt.Errorf("copying Debian's configuration: %w", err)
	}
	// Traffic Server refuses to run as root: then it runs as Debian's
	// trafficserver user, who must own its directory.
	u, err := user.Current()
	if err != nil {
		return nil, nil, err
	}
	if u.Uid == "0" {
		if u, err = user.Lookup(trafficServerUser); err != nil {
			return nil, nil, fmt.Errorf("running as root needs the %s user (Debian's trafficserver package): %w", trafficServerUser, err)
		}
	}
	d.User = u.Username
	for _, f := range []string{"remap.config", "storage.config", "ip_allow.yaml"} {
		if err := render("trafficserver/"+f, filepath.Join(etc, f), d); err != nil {
			return nil, nil, err
		}
	}
	ours := filepath.Join(d.Dir, "records.ours")
	if err := render("trafficserver/records.config", ours, d); err != nil {
		return nil, nil, err
	}
	if err := mergeRecords(filepath.Join(etc, "records.config"), ours); err != nil {
		return nil, nil, err
	}
	runroot := filepath.Join(d.Dir, "runroot.yaml")
	if err := render("trafficserver/runroot.yaml", runroot, d); err != nil {
		return nil, nil, err
	}
	if u.Uid != strconv.Itoa(os.Geteuid()) {
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := chownTree(d.Dir, uid, gid); err != nil {
			return nil, nil, err
		}
	}
	return []string{bin, "--run-root=" + runroot}, nil, nil
}

// trafficServerUser is who Traffic Server runs as when started as root.
const trafficServerUser = "trafficserver"

func chownTree(dir string, uid, gid int) error {
	return filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
}

// mergeRecords appends the CONFIG lines of ours to the records.config at
// path, leaving out the lines of path that set the same variables.
func mergeRecords(path, ours string) error {
	base, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	add, err := os.ReadFile(ours)
	if err != nil {
		return err
	}
	set := map[string]bool{}
	for _, l := range strings.Split(string(add), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "CONFIG" {
			set[f[1]] = true
		}
	}
	if len(set) == 0 {
		return errors.New("records.config: nothing to set")
	}
	var out bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(base))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == "CONFIG" && set[f[1]] {
			continue
		}
		out.WriteString(sc.Text() + "\n")
	}
	if err := sc.Err(); err != nil {
		return err
	}
	out.Write(add)
	return os.WriteFile(path, out.Bytes(), 0o644)
}
