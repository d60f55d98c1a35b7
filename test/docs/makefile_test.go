package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestMakeFuzzRunsEveryTarget: the guide asks that every parser and codec
// be fuzzed and its targets added to `make fuzz`. Every native fuzz target
// of the repository (func FuzzX(f *testing.F)) is run by the Makefile's
// fuzz rule, in its own package's directory.
func TestMakeFuzzRunsEveryTarget(t *testing.T) {
	root := repoRoot(t)
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	rule := string(mk)
	if i := strings.Index(rule, "\nfuzz:"); i >= 0 {
		rule = rule[i:]
		if j := strings.Index(rule[1:], "\n\n"); j >= 0 {
			rule = rule[:j+1]
		}
	} else {
		t.Fatal("the Makefile has no fuzz rule")
	}
	fuzzFunc := regexp.MustCompile(`(?m)^func (Fuzz\w+)\(f \*testing\.F\)`)
	found := 0
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "work" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		dir, _ := filepath.Rel(root, filepath.Dir(p))
		for _, m := range fuzzFunc.FindAllStringSubmatch(string(src), -1) {
			found++
			// The target named in a line of the rule that names its
			// package's directory (a loop's `for target in` lines run in
			// the directory its body names).
			if !targetRun(rule, m[1], "./"+filepath.ToSlash(dir)) {
				t.Errorf("%s (%s) is not in `make fuzz`", m[1], dir)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 30 {
		t.Fatalf("only %d fuzz targets found: the search is broken", found)
	}
}

// targetRun reports whether the fuzz rule runs target in dir: a command
// naming both, or a `for target in` loop naming the target whose body
// names the directory.
func targetRun(rule, target, dir string) bool {
	for _, cmd := range strings.Split(strings.ReplaceAll(rule, "\\\n", " "), "\n") {
		words := strings.Fields(cmd)
		hasTarget, hasDir := false, false
		for _, w := range words {
			w = strings.Trim(w, "';\"")
			if w == dir {
				hasDir = true
			}
			if strings.Contains(w, target+"$$") || w == target {
				hasTarget = true
			}
		}
		if hasTarget && hasDir {
			return true
		}
	}
	return false
}
