package deploy

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestAptInstallWaitsForLock (issue 37): `make deps` runs
// builds/apt-install.sh from every install-deps.sh, and another apt or
// dpkg (the machine's own updates, another engineer's make deps) may hold
// the package system's locks meanwhile. The script waits for them instead
// of failing at once: here the test holds both the package lists' lock
// (apt-get update) and dpkg's frontend lock (apt-get install) for 3 s, and
// the script, asked for a binary no package provides from a package that
// is installed (coreutils, which is Essential: apt may mark it installed
// by hand, and it is never removed anyway), gets past both and fails only
// for the binary. As root
// under CI=true or CORAL_DPKG_TEST=1, like the other tests that touch the
// machine's packages.
func TestAptInstallWaitsForLock(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("takes apt's locks: needs root")
	}
	if os.Getenv("CI") != "true" && os.Getenv("CORAL_DPKG_TEST") != "1" {
		t.Skip("takes apt's locks on this machine: only under CI=true or CORAL_DPKG_TEST=1")
	}
	needTool(t, "apt-get", "Debian package apt")
	var held []*os.File
	for _, lock := range []string{"/var/lib/apt/lists/lock", "/var/lib/dpkg/lock-frontend"} {
		f, err := os.OpenFile(lock, os.O_RDWR|os.O_CREATE, 0o640)
		if err != nil {
			t.Fatal(err)
		}
		// apt and dpkg lock with fcntl; wait for whoever holds it now.
		if err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLKW, &syscall.Flock_t{Type: syscall.F_WRLCK}); err != nil {
			t.Fatalf("locking %s: %v", lock, err)
		}
		held = append(held, f)
	}
	release := time.AfterFunc(3*time.Second, func() {
		for _, f := range held {
			f.Close() // closing drops its fcntl locks
		}
	})
	defer release.Stop()
	start := time.Now()
	out, err := exec.Command("bash", repoFile(t, "builds/apt-install.sh"), "locktest", "no-such-binary-of-coral", "coreutils").CombinedOutput()
	t.Logf("apt-install.sh took %v:\n%s", time.Since(start).Round(100*time.Millisecond), out)
	if time.Since(start) < 3*time.Second {
		t.Errorf("apt-install.sh returned before the locks were free")
	}
	if err == nil || !strings.Contains(string(out), "still missing after install: no-such-binary-of-coral") {
		t.Errorf("apt-install.sh did not get past the locks: %v", err)
	}
}
