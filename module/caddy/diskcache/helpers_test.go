package diskcache

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// testOptions: fsync off unless a test is about durability (it is slow on
// ext4 and changes nothing a test can observe without pulling the plug).
func testOptions(t testing.TB, maxBytes int64) Options {
	return Options{Dir: t.TempDir(), MaxBytes: maxBytes, NoSync: true}
}

func openStore(t testing.TB, o Options) *Store {
	t.Helper()
	s, err := Open(o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// testMeta is a Meta whose Extra records a digest of body, so that readers
// can check that metadata and body belong together.
func testMeta(body string) Meta {
	sum := sha256.Sum256([]byte(body))
	return Meta{
		Status:  200,
		Header:  http.Header{"Content-Type": {"text/plain"}, "Etag": {`"` + hex.EncodeToString(sum[:4]) + `"`}},
		Expires: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC),
		Size:    -1,
		Extra:   map[string]string{"sha256": hex.EncodeToString(sum[:])},
	}
}

// put stores body under key and fails the test on error.
func put(t testing.TB, s *Store, key, body string) {
	t.Helper()
	if err := tryPut(s, key, body); err != nil {
		t.Fatalf("put %q: %v", key, err)
	}
}

func tryPut(s *Store, key, body string) error {
	w, err := s.Create(key, testMeta(body))
	if err != nil {
		return err
	}
	defer w.Close()
	if _, err := io.WriteString(w, body); err != nil {
		return err
	}
	return w.Commit(w.Meta())
}

// get reads the object under key completely; ok false on a miss.
func get(t testing.TB, s *Store, key string) (string, Meta, bool) {
	t.Helper()
	r, ok := s.Get(key)
	if !ok {
		return "", Meta{}, false
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("reading %q: %v", key, err)
	}
	m := r.Meta()
	checkBody(t, m, string(b))
	return string(b), m, true
}

// checkBody fails if body does not match the digest in m.Extra.
func checkBody(t testing.TB, m Meta, body string) {
	t.Helper()
	sum := sha256.Sum256([]byte(body))
	if want := m.Extra["sha256"]; want != hex.EncodeToString(sum[:]) {
		t.Fatalf("key %q: body of %d bytes does not match its metadata", m.Key, len(body))
	}
	if m.Size != int64(len(body)) {
		t.Fatalf("key %q: Meta.Size %d, body %d bytes", m.Key, m.Size, len(body))
	}
}

// files lists the regular files under dir, relative, sorted.
func files(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// objectFiles lists the files under objects/ and tmp/.
func objectFiles(t testing.TB, dir string) []string {
	var out []string
	for _, f := range files(t, dir) {
		if strings.HasPrefix(f, objectsDir+"/") || strings.HasPrefix(f, tmpDir+"/") {
			out = append(out, f)
		}
	}
	return out
}

// diskBytes sums what the files under objects/ and tmp/ are charged: each
// file's size in whole blocks, at least one (what Stats.Bytes should say).
func diskBytes(t testing.TB, dir string) int64 {
	block := blockSize(dir)
	var n int64
	for _, f := range objectFiles(t, dir) {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		n += max((fi.Size()+block-1)/block*block, block)
	}
	return n
}

// copyDir copies the regular files of src to a new directory: a snapshot
// of what a crash at this moment would leave (as far as the page cache is
// concerned; the fsync ordering is argued in the package docs).
func copyDir(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		b, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

func mustErr(t testing.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("got error %v, want %v", err, target)
	}
}
