package labconf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// RepoRoot returns the repository root at or above dir: the directory with
// the go.mod of github.com/coralcdn/coral.
func RepoRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module github.com/coralcdn/coral\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the coral repository (no go.mod of github.com/coralcdn/coral above the working directory)")
		}
		dir = parent
	}
}

// Binary returns bin/NAME (coredns, caddy) of the repository around the
// working directory. The path is returned with the error when the file is
// missing, which names the make target that builds it.
func Binary(name string) (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	root, err := RepoRoot(wd)
	if err != nil {
		return "", err
	}
	path := filepath.Join(root, "bin", name)
	if _, err := os.Stat(path); err != nil {
		return path, fmt.Errorf("%s missing (run `make %s`)", path, name)
	}
	return path, nil
}

// CaddyArgv is the command line that runs bin/caddy on a Caddyfile.
func CaddyArgv(bin, caddyfile string) []string {
	return []string{bin, "run", "--config", caddyfile, "--adapter", "caddyfile"}
}

// CaddyEnv is the environment for a Caddy whose home, data and
// configuration directories (its certificates, autosaves, locks) stay in
// dir rather than the user's.
func CaddyEnv(dir string) []string {
	return append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+filepath.Join(dir, "data"),
		"XDG_CONFIG_HOME="+filepath.Join(dir, "config"))
}
