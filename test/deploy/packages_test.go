package deploy

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coralcdn/coral/internal/lab/labconf"
)

// packageNames are the packages deploy/build-packages.sh builds.
var packageNames = []string{"coral-dns", "coral-proxy"}

// built holds the packages built once for the tests that install them, in
// a directory TestMain removes.
var built struct {
	once sync.Once
	dir  string
	debs []string
	err  string
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// sharedPackages returns the packages, building them on first use.
func sharedPackages(t *testing.T) []string {
	t.Helper()
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "coral-packages-")
		if err != nil {
			built.err = err.Error()
			return
		}
		built.dir = dir
		built.debs, built.err = runBuild(dir)
	})
	if built.err != "" {
		t.Fatal(built.err)
	}
	return built.debs
}

// buildPackages runs deploy/build-packages.sh into a new directory and
// returns the .deb files, coral-dns's first; shared, the packages every
// test of the package gets.
func buildPackages(t *testing.T, shared bool) []string {
	t.Helper()
	for _, b := range []string{"coredns", "caddy", "coral-check"} {
		if _, err := labconf.Binary(b); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatal(err)
			}
			t.Skip(err)
		}
	}
	if shared {
		return sharedPackages(t)
	}
	debs, err := runBuild(t.TempDir())
	if err != "" {
		t.Fatal(err)
	}
	return debs
}

// runBuild runs deploy/build-packages.sh into out.
func runBuild(out string) (debs []string, problem string) {
	root, err := labconf.RepoRoot(".")
	if err != nil {
		return nil, err.Error()
	}
	cmd := exec.Command("bash", filepath.Join(root, "deploy/build-packages.sh"), out)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		return nil, fmt.Sprintf("build-packages.sh: %v\n%s", err, stderr.String())
	}
	debs = strings.Fields(string(stdout))
	if len(debs) != len(packageNames) {
		return nil, fmt.Sprintf("build-packages.sh printed %q, want %d packages", debs, len(packageNames))
	}
	for i, d := range debs {
		if !strings.HasPrefix(filepath.Base(d), packageNames[i]+"_") {
			return nil, fmt.Sprintf("package %d is %s, want %s", i, d, packageNames[i])
		}
	}
	return debs, ""
}

// dpkgAllowed says why this machine's packages may not be changed, or "":
// the install test runs as root under CI=true (a throwaway machine) or
// with CORAL_DPKG_TEST=1, and only where neither package nor the coral
// user exists yet, since purging removes them.
func dpkgAllowed() string {
	if os.Geteuid() != 0 {
		return "not root"
	}
	if os.Getenv("CI") != "true" && os.Getenv("CORAL_DPKG_TEST") != "1" {
		return "installs packages on this machine: only under CI=true or CORAL_DPKG_TEST=1"
	}
	if _, err := exec.LookPath("dpkg"); err != nil {
		return "no dpkg"
	}
	for _, p := range packageNames {
		if out, _ := exec.Command("dpkg-query", "-W", "-f=${db:Status-Status}", p).Output(); len(out) > 0 && string(out) != "not-installed" {
			return p + " is already on this machine (" + string(out) + ")"
		}
	}
	if _, err := user.Lookup("coral"); err == nil {
		return "a user coral already exists on this machine"
	}
	return ""
}

// TestPackages builds the packages twice and compares the bytes, checks
// what they hold, and installs, removes and purges them where allowed.
func TestPackages(t *testing.T) {
	needTool(t, "dpkg-deb", "Debian package dpkg")
	first := buildPackages(t, true)
	second := buildPackages(t, false)
	for i := range first {
		a, b := fileSum(t, first[i]), fileSum(t, second[i])
		if a != b {
			t.Errorf("%s: two builds differ: %x, %x", filepath.Base(first[i]), a, b)
		}
	}
	// What is inside: the programs, the unit, the example configuration
	// and the copyright file.
	want := map[string][]string{
		"coral-dns": {"./usr/bin/coral-coredns", "./usr/bin/coral-check", "./lib/systemd/system/coral-dns.service",
			"./usr/share/coral-dns/Corefile.example", "./usr/share/doc/coral-dns/copyright"},
		"coral-proxy": {"./usr/bin/coral-caddy", "./lib/systemd/system/coral-proxy.service",
			"./usr/share/coral-proxy/Caddyfile.example", "./usr/share/doc/coral-proxy/copyright"},
	}
	for i, deb := range first {
		list := runOut(t, "", "dpkg-deb", "--contents", deb)
		for _, f := range want[packageNames[i]] {
			if !strings.Contains(list, " "+f+"\n") {
				t.Errorf("%s lacks %s:\n%s", filepath.Base(deb), f, list)
			}
		}
		info := runOut(t, "", "dpkg-deb", "--info", deb)
		for _, s := range []string{"postinst", "prerm", "postrm", "Package: " + packageNames[i]} {
			if !strings.Contains(info, s) {
				t.Errorf("%s: no %q in its control data:\n%s", filepath.Base(deb), s, info)
			}
		}
	}
	if t.Failed() {
		return
	}
	t.Run("Copyright", func(t *testing.T) { testCopyright(t, first) })
	t.Run("InstallRemovePurge", func(t *testing.T) { testInstallRemovePurge(t, first) })
}

// testCopyright reads each package's copyright file: Debian's
// machine-readable format, Coral's licence, and a named licence for Go and
// for every module compiled into the package's programs (go version -m).
func testCopyright(t *testing.T, debs []string) {
	programs := map[string][]string{"coral-dns": {"coredns", "coral-check"}, "coral-proxy": {"caddy"}}
	for i, deb := range debs {
		pkg := packageNames[i]
		dir := t.TempDir()
		runOut(t, "", "dpkg-deb", "-x", deb, dir)
		text, err := os.ReadFile(filepath.Join(dir, "usr/share/doc", pkg, "copyright"))
		if err != nil {
			t.Fatal(err)
		}
		c := string(text)
		for _, want := range []string{"Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/",
			"Files: *\nCopyright: Coral developers\nLicense: Apache-2.0", "Comment: Go go1."} {
			if !strings.Contains(c, want) {
				t.Errorf("%s's copyright lacks %q", pkg, want)
			}
		}
		if strings.Contains(c, "License: unknown") {
			t.Errorf("%s's copyright has a licence it cannot name", pkg)
		}
		for _, p := range programs[pkg] {
			bin, _ := labconf.Binary(p)
			for _, line := range strings.Split(runOut(t, "", "go", "version", "-m", bin), "\n") {
				f := strings.Fields(line)
				if len(f) >= 3 && f[0] == "dep" && f[1] != "github.com/coralcdn/coral" {
					if !strings.Contains(c, "Comment: Go module "+f[1]+" ") {
						t.Errorf("%s's copyright does not name %s, compiled into %s", pkg, f[1], p)
					}
				}
			}
		}
	}
}

// errDpkgLocked is a dpkg run that found another dpkg or apt at work.
var errDpkgLocked = errors.New("dpkg lock held by another process")

// lockError returns errDpkgLocked when a command failed only because dpkg's
// lock was taken, else err.
func lockError(err error, out []byte) error {
	if err != nil && bytes.Contains(out, []byte("dpkg frontend lock was locked")) {
		return errDpkgLocked
	}
	return err
}

// retryDpkgLock runs f again while it fails on dpkg's lock (an apt-get of
// the machine's own, or of a test's deps), for up to 10 minutes.
func retryDpkgLock(f func() error) error {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		err := f()
		if !errors.Is(err, errDpkgLocked) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(2 * time.Second)
	}
}

// dpkg runs dpkg with args, waiting out another holder of its lock, and
// fails the test if it fails.
func dpkg(t *testing.T, args ...string) {
	t.Helper()
	var out []byte
	err := retryDpkgLock(func() error {
		var err error
		out, err = exec.Command("dpkg", args...).CombinedOutput()
		return lockError(err, out)
	})
	if err != nil {
		t.Fatalf("dpkg %q: %v\n%s", args, err, out)
	}
}

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// ownerMode is "user:group mode" of a file, like `stat -c '%U:%G %a'`.
func ownerMode(t *testing.T, path string) string {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	name := func(id uint32, lookup func(string) (string, error)) string {
		if n, err := lookup(strconv.Itoa(int(id))); err == nil {
			return n
		}
		return strconv.Itoa(int(id))
	}
	u := name(st.Uid, func(s string) (string, error) { x, err := user.LookupId(s); return usernameOf(x), err })
	g := name(st.Gid, func(s string) (string, error) { x, err := user.LookupGroupId(s); return groupnameOf(x), err })
	return fmt.Sprintf("%s:%s %o", u, g, fi.Mode().Perm())
}

func usernameOf(u *user.User) string {
	if u == nil {
		return ""
	}
	return u.Username
}

func groupnameOf(g *user.Group) string {
	if g == nil {
		return ""
	}
	return g.Name
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// testInstallRemovePurge installs both packages with dpkg -i on a
// machine where root wrote the network key with umask 077, as the guide
// says, and checks the files, the user, that the user can read the key,
// and the binaries' versions; then purging coral-dns alone keeps what
// coral-proxy needs, dpkg -r keeps the configuration, and purging the last
// package leaves nothing behind.
func testInstallRemovePurge(t *testing.T, debs []string) {
	if why := dpkgAllowed(); why != "" {
		t.Skip("dpkg -i: " + why)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("dpkg", "--purge", "coral-dns", "coral-proxy").CombinedOutput(); err != nil {
			t.Logf("cleanup: dpkg --purge: %v\n%s", err, out)
		}
	})

	// A key made before the packages, by root, as the guide says.
	if err := os.MkdirAll("/etc/coral", 0o700); err != nil {
		t.Fatal(err)
	}
	key := "/etc/coral/network.key"
	if err := os.WriteFile(key, []byte("bGFiIGtleSBmb3IgdGVzdC9kZXBsb3kgLS0tLS0tLS0tLS0K\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	dpkg(t, "-i", debs[0], debs[1])

	for _, f := range []string{"/usr/bin/coral-coredns", "/usr/bin/coral-caddy",
		"/lib/systemd/system/coral-dns.service", "/lib/systemd/system/coral-proxy.service",
		"/usr/share/coral-dns/Corefile.example", "/usr/share/coral-proxy/Caddyfile.example"} {
		if !exists(f) {
			t.Errorf("%s not installed", f)
		}
	}
	u, err := user.Lookup("coral")
	if err != nil {
		t.Fatalf("no coral user after install: %v", err)
	}
	if uid, _ := strconv.Atoi(u.Uid); uid >= 1000 || u.HomeDir != "/nonexistent" {
		t.Errorf("coral user: uid %s home %s, want a system user (uid < 1000) without a home", u.Uid, u.HomeDir)
	}
	passwd := runOut(t, "", "getent", "passwd", "coral")
	if !strings.HasSuffix(strings.TrimSpace(passwd), ":/usr/sbin/nologin") {
		t.Errorf("coral's shell: %s", passwd)
	}
	for path, want := range map[string]string{
		"/etc/coral":           "root:coral 750",
		key:                    "root:coral 640",
		"/etc/coral/blacklist": "root:coral 644",
	} {
		if got := ownerMode(t, path); got != want {
			t.Errorf("%s: %s, want %s", path, got, want)
		}
	}
	// The service user reads the key, as the units run the servers.
	if out, err := exec.Command("setpriv", "--reuid=coral", "--regid=coral", "--init-groups", "cat", key).CombinedOutput(); err != nil {
		t.Errorf("the coral user cannot read %s: %v\n%s", key, err, out)
	}
	if out := runOut(t, "", "/usr/bin/coral-coredns", "-version"); !strings.Contains(out, "CoreDNS-1.15.0") {
		t.Errorf("coral-coredns -version: %s", out)
	}
	if out := runOut(t, "", "/usr/bin/coral-caddy", "version"); !strings.Contains(out, "v2.11.9") {
		t.Errorf("coral-caddy version: %s", out)
	}
	if out := runOut(t, "", "/usr/bin/coral-caddy", "list-modules"); !strings.Contains(out, "http.handlers.coral_proxy") {
		t.Errorf("coral-caddy has no coral_proxy:\n%s", out)
	}

	// What systemd would have made, and an operator's files.
	for _, d := range []string{"/var/lib/coral-proxy/caddy", "/var/cache/coral-proxy/objects", "/var/lib/coral-dns"} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		runOut(t, "", "chown", "-R", "coral:coral", d)
	}
	for _, f := range []string{"/etc/coral/Corefile", "/etc/coral/Caddyfile"} {
		if err := os.WriteFile(f, []byte("# test/deploy\n"), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	// The second key of a rotation, as the guide has operators install it
	// (docs/operations.md, "Rotating the key").
	next := "/etc/coral/network-next.key"
	if err := os.WriteFile(next, []byte("bmV4dCBsYWIga2V5IGZvciB0ZXN0L2RlcGxveSAtLS0tLS0K\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	runOut(t, "", "chown", "root:coral", next)
	// coral-check, from the package, checks the packaged example with the
	// keys in place.
	if out := runOut(t, "", "/usr/bin/coral-check", "/usr/share/coral-dns/Corefile.example"); !strings.Contains(out, "ok") {
		t.Errorf("coral-check of the packaged Corefile: %s", out)
	}

	// Purging one package takes its own files; what both use (the key,
	// /etc/coral, the user) stays while the other is installed.
	dpkg(t, "--purge", "coral-dns")
	for _, f := range []string{"/usr/bin/coral-coredns", "/lib/systemd/system/coral-dns.service", "/etc/coral/Corefile", "/var/lib/coral-dns"} {
		if exists(f) {
			t.Errorf("%s still there after dpkg --purge coral-dns", f)
		}
	}
	for _, f := range []string{key, next, "/etc/coral/Caddyfile", "/usr/bin/coral-caddy", "/var/cache/coral-proxy/objects"} {
		if !exists(f) {
			t.Errorf("dpkg --purge coral-dns removed %s, which coral-proxy uses", f)
		}
	}
	if _, err := user.Lookup("coral"); err != nil {
		t.Errorf("dpkg --purge coral-dns removed the coral user, which coral-proxy runs as: %v", err)
	}

	dpkg(t, "-r", "coral-proxy")
	for _, f := range []string{"/usr/bin/coral-caddy", "/lib/systemd/system/coral-proxy.service"} {
		if exists(f) {
			t.Errorf("%s still there after dpkg -r", f)
		}
	}
	for _, f := range []string{key, "/etc/coral/Caddyfile", "/etc/coral/blacklist", "/var/cache/coral-proxy/objects"} {
		if !exists(f) {
			t.Errorf("dpkg -r removed %s; only --purge should", f)
		}
	}
	if _, err := user.Lookup("coral"); err != nil {
		t.Errorf("dpkg -r removed the coral user: %v", err)
	}

	dpkg(t, "--purge", "coral-proxy")
	for _, f := range []string{next, key, "/etc/coral", "/var/lib/coral-proxy", "/var/cache/coral-proxy", "/var/lib/coral-dns",
		"/usr/share/coral-dns", "/usr/share/coral-proxy", "/usr/share/doc/coral-dns", "/usr/share/doc/coral-proxy"} {
		if exists(f) {
			t.Errorf("%s still there after dpkg --purge", f)
		}
	}
	if _, err := user.Lookup("coral"); err == nil {
		t.Error("the coral user is still there after dpkg --purge")
	}
	if _, err := user.LookupGroup("coral"); err == nil {
		t.Error("the coral group is still there after dpkg --purge")
	}
	for _, p := range packageNames {
		if out, _ := exec.Command("dpkg-query", "-W", "-f=${db:Status-Status}", p).Output(); len(out) > 0 && string(out) != "not-installed" {
			t.Errorf("%s: dpkg status %q after --purge", p, out)
		}
	}
}
