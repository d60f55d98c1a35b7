// Command coral-fleet makes the files of node identity mode (coraldht's
// README, "Node identities"; docs/operations.md, "Node identities"): a
// fleet key, a certificate and key per node, and revocation lists. Keep
// the fleet directory (its fleet.key above all) on the operator's
// machine, not on the nodes.
//
//	coral-fleet init DIR                    a fleet: DIR/fleet.key (mode 0600), DIR/fleet.pub
//	coral-fleet issue [-days N] DIR NAME    a node: DIR/nodes/NAME.cert and NAME.key (0600)
//	coral-fleet revoke DIR NAME|SERIAL...   DIR/revoked.list, the previous one's serials and these
//	coral-fleet show FILE                   what a fleet file holds
//
// DIR/issued records every certificate issued (serial, name, validity),
// from which issue takes the next serial and revoke finds a name's
// serials. Copy fleet.pub, the node's certificate and key, and
// revoked.list to each node; a new revoked.list takes effect on every
// node within its poll interval (default 30 s), without a reload. The
// exit status is 1 on an error, 2 on bad usage.
package main

import (
	"bufio"
	"crypto/ed25519"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coralcdn/coral/coraldht/fleet"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, time.Now())) }

const usage = `usage:
  coral-fleet init DIR
  coral-fleet issue [-days N] DIR NAME
  coral-fleet revoke DIR NAME|SERIAL...
  coral-fleet show FILE`

// errUsage marks an error of the command line.
var errUsage = errors.New("bad usage")

func run(args []string, stdout, stderr io.Writer, now time.Time) int {
	err := command(args, stdout, now)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "coral-fleet: %v\n%s\n", err, usage)
		return 2
	default:
		fmt.Fprintf(stderr, "coral-fleet: %v\n", err)
		return 1
	}
}

func command(args []string, out io.Writer, now time.Time) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: no command", errUsage)
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	days := fs.Int("days", 365, "issue: days the certificate is valid")
	if err := fs.Parse(args[1:]); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	rest := fs.Args()
	switch {
	case args[0] == "init" && len(rest) == 1:
		return initFleet(rest[0], out, now)
	case args[0] == "issue" && len(rest) == 2 && *days > 0:
		return issue(rest[0], rest[1], time.Duration(*days)*24*time.Hour, out, now)
	case args[0] == "revoke" && len(rest) >= 2:
		return revoke(rest[0], rest[1:], out, now)
	case args[0] == "show" && len(rest) == 1:
		return show(rest[0], out)
	}
	return fmt.Errorf("%w: %s", errUsage, strings.Join(args, " "))
}

// writeNew writes a file that must not exist yet.
func writeNew(path string, mode os.FileMode, b []byte) error {
	return fleet.WriteNewFile(path, mode, b)
}

// replace writes a file atomically, so that a node polling it never reads
// half of it.
func replace(path string, mode os.FileMode, b []byte) error {
	tmp := path + ".new"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func initFleet(dir string, out io.Writer, now time.Time) error {
	if err := os.MkdirAll(filepath.Join(dir, "nodes"), 0o700); err != nil {
		return err
	}
	pub, priv := fleet.GenerateKey()
	stamp := "fleet created " + now.UTC().Format(time.RFC3339)
	if err := writeNew(filepath.Join(dir, "fleet.key"), 0o600, fleet.Marshal(fleet.LabelFleetKey,
		[]string{stamp, "the fleet's private key: keep it here, never on a node"}, priv.Seed())); err != nil {
		return err
	}
	if err := writeNew(filepath.Join(dir, "fleet.pub"), 0o644, fleet.Marshal(fleet.LabelFleetPublicKey,
		[]string{stamp, "copy to every node (the fleet option)"}, pub)); err != nil {
		return err
	}
	fmt.Fprintf(out, "fleet in %s: fleet.key (keep it here), fleet.pub (for every node)\n", dir)
	return nil
}

// issued is one line of DIR/issued.
type issued struct {
	serial              uint64
	name                string
	notBefore, notAfter time.Time
}

func readIssued(dir string) ([]issued, error) {
	f, err := os.Open(filepath.Join(dir, "issued"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []issued
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) == 0 || strings.HasPrefix(fs[0], "#") {
			continue
		}
		if len(fs) != 4 {
			return nil, fmt.Errorf("%s: bad line %q", f.Name(), sc.Text())
		}
		s, err := strconv.ParseUint(fs[0], 10, 64)
		nb, err2 := time.Parse(time.RFC3339, fs[2])
		na, err3 := time.Parse(time.RFC3339, fs[3])
		if err := errors.Join(err, err2, err3); err != nil {
			return nil, fmt.Errorf("%s: bad line %q: %v", f.Name(), sc.Text(), err)
		}
		out = append(out, issued{s, fs[1], nb, na})
	}
	return out, sc.Err()
}

// openFleet reads the fleet's private key and what it issued.
func openFleet(dir string) (ed25519.PrivateKey, []issued, error) {
	key, err := fleet.LoadPrivateKey(filepath.Join(dir, "fleet.key"), fleet.LabelFleetKey)
	if err != nil {
		return nil, nil, err
	}
	done, err := readIssued(dir)
	return key, done, err
}

var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

func issue(dir, name string, valid time.Duration, out io.Writer, now time.Time) error {
	if !validName.MatchString(name) {
		return fmt.Errorf("node name %q: letters, digits, '.', '_' and '-', at most 63", name)
	}
	fleetKey, done, err := openFleet(dir)
	if err != nil {
		return err
	}
	serial := uint64(1)
	for _, d := range done {
		serial = max(serial, d.serial+1)
	}
	pub, priv := fleet.GenerateKey()
	notBefore := now.Add(-time.Hour).Truncate(time.Second) // clocks differ
	c, err := fleet.Issue(fleetKey, pub, serial, notBefore, now.Add(valid).Truncate(time.Second))
	if err != nil {
		return err
	}
	about := fmt.Sprintf("node %s, serial %d, valid %s to %s", name, serial, c.NotBefore.UTC().Format(time.RFC3339), c.NotAfter.UTC().Format(time.RFC3339))
	cert, key := filepath.Join(dir, "nodes", name+".cert"), filepath.Join(dir, "nodes", name+".key")
	if err := replace(cert, 0o644, fleet.Marshal(fleet.LabelCertificate, []string{about}, c.Raw)); err != nil {
		return err
	}
	if err := replace(key, 0o600, fleet.Marshal(fleet.LabelNodeKey, []string{about, "this node's private key: on this node only"}, priv.Seed())); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, "issued"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if len(done) == 0 {
		fmt.Fprintln(f, "# serial name not-before not-after")
	}
	fmt.Fprintf(f, "%d %s %s %s\n", serial, name, c.NotBefore.UTC().Format(time.RFC3339), c.NotAfter.UTC().Format(time.RFC3339))
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(out, "%s: %s and %s\n", about, cert, key)
	return nil
}

func revoke(dir string, what []string, out io.Writer, now time.Time) error {
	fleetKey, done, err := openFleet(dir)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, "revoked.list")
	var serials []uint64
	number := uint64(1)
	if prev, err := fleet.LoadRevocationList(path, []ed25519.PublicKey{fleetKey.Public().(ed25519.PublicKey)}); err == nil {
		serials, number = prev.Serials, prev.Number+1
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, w := range what {
		found := false
		for _, d := range done {
			if d.name == w || strconv.FormatUint(d.serial, 10) == w {
				serials, found = append(serials, d.serial), true
			}
		}
		if !found {
			return fmt.Errorf("%s: no certificate issued to that name or with that serial (see %s)", w, filepath.Join(dir, "issued"))
		}
	}
	l, err := fleet.NewRevocationList(fleetKey, number, now, serials)
	if err != nil {
		return err
	}
	comments := []string{fmt.Sprintf("revocation list %d, issued %s", l.Number, now.UTC().Format(time.RFC3339))}
	for _, s := range l.Serials {
		i := slices.IndexFunc(done, func(d issued) bool { return d.serial == s })
		name := "?"
		if i >= 0 {
			name = done[i].name
		}
		comments = append(comments, fmt.Sprintf("revoked: serial %d, node %s", s, name))
	}
	if err := replace(path, 0o644, fleet.Marshal(fleet.LabelRevocationList, comments, l.Raw)); err != nil {
		return err
	}
	fmt.Fprintf(out, "%s: list %d revokes %d certificate(s); copy it to every node\n", path, l.Number, len(l.Serials))
	return nil
}

func show(path string, out io.Writer) error {
	text, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if raw, err := fleet.Parse(text, fleet.LabelCertificate); err == nil {
		c, err := fleet.ParseCertificate(raw[0])
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "certificate serial %d, valid %s to %s, key %x\n", c.Serial,
			c.NotBefore.UTC().Format(time.RFC3339), c.NotAfter.UTC().Format(time.RFC3339), []byte(c.PublicKey))
		return nil
	}
	if keys, err := fleet.ParsePublicKeys(text); err == nil {
		for _, k := range keys {
			fmt.Fprintf(out, "fleet public key %x\n", []byte(k))
		}
		return nil
	}
	if raw, err := fleet.Parse(text, fleet.LabelRevocationList); err == nil {
		// Shown without checking whose it is: show reads any fleet's list.
		l, err := fleet.DecodeRevocationList(raw[0])
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "revocation list %d, issued %s, revokes serials %v\n", l.Number, l.Issued.UTC().Format(time.RFC3339), l.Serials)
		return nil
	}
	return fmt.Errorf("%s: not a certificate, fleet public key or revocation list file", path)
}
