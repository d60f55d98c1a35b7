package diskcache

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

const crashChildEnv = "DISKCACHE_CRASH_CHILD_DIR"

// TestCrashChild is the child half of TestCrashKill: it leaves a store in
// the middle of everything and waits to be killed.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashChildEnv)
	if dir == "" {
		t.Skip("run by TestCrashKill")
	}
	s, err := Open(Options{Dir: dir, MaxBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, "committed", "a complete object")
	put(t, s, "updated", "updated object")
	_, m, _ := get(t, s, "updated")
	m = m.Clone()
	m.Extra["revalidated"] = "yes"
	if err := s.UpdateMeta("updated", m); err != nil {
		t.Fatal(err)
	}
	put(t, s, "replaced", "version one")
	w1, _ := s.Create("replaced", testMeta("version two"))
	io.WriteString(w1, "version")
	w2, _ := s.Create("partial", testMeta("never finished"))
	io.WriteString(w2, "never")
	w3, _ := s.Create("declared", Meta{Size: 100, Extra: map[string]string{}})
	w3.Write(make([]byte, 99)) // one byte short
	os.Stdout.WriteString("READY\n")
	select {} // killed here, with no Commit, Abort or Close
}

// TestCrashKill kills a process holding a store mid-write with SIGKILL and
// reopens the directory: committed objects and metadata updates survive,
// nothing partial appears, and the leftovers are gone.
func TestCrashKill(t *testing.T) {
	if os.Getenv(crashChildEnv) != "" {
		t.Skip("in the child")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if line != "READY\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child said %q, %v", line, err)
	}
	if tmp := files(t, filepath.Join(dir, tmpDir)); len(tmp) != 3 {
		t.Fatalf("child's tmp/ holds %v, want three bodies being written", tmp)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()

	s := openStore(t, Options{Dir: dir, MaxBytes: 1 << 30})
	for key, want := range map[string]string{"committed": "a complete object", "updated": "updated object", "replaced": "version one"} {
		if b, _, ok := get(t, s, key); !ok || b != want {
			t.Errorf("%s: %q, %v", key, b, ok)
		}
	}
	if _, m, _ := get(t, s, "updated"); m.Extra["revalidated"] != "yes" {
		t.Errorf("metadata update lost: %+v", m)
	}
	for _, key := range []string{"partial", "declared"} {
		if _, ok := s.Get(key); ok {
			t.Errorf("partial object %q visible after a crash", key)
		}
	}
	if got := objectFiles(t, dir); len(got) != 3 { // one file each: small objects
		t.Errorf("files after recovery: %v", got)
	}
	if st := s.Stats(); st.Entries != 3 || st.Bytes != diskBytes(t, dir) {
		t.Errorf("stats %+v, disk %d", st, diskBytes(t, dir))
	}
}

// TestCrashPoints snapshots the directory at every step of commits,
// replacements, metadata updates and removals (a crash there leaves what
// the snapshot holds) and opens every snapshot: each must hold the old or
// the new state of the object, complete and matching its metadata, and no
// leftovers after Open.
func TestCrashPoints(t *testing.T) {
	t.Run("inline", func(t *testing.T) {
		crashPoints(t, "", 1, []string{
			"commit:synced", "commit:body-renamed", "commit:dir-synced",
			"commit:synced", "commit:body-renamed", "commit:dir-synced", "remove:meta-removed",
			"update:renamed", "remove:meta-removed", "remove:meta-removed",
		})
	})
	t.Run("two-files", func(t *testing.T) {
		crashPoints(t, strings.Repeat(".", InlineMaxSize), 2, []string{
			"commit:synced", "commit:body-renamed", "commit:meta-renamed", "commit:dir-synced",
			"commit:synced", "commit:body-renamed", "commit:meta-renamed", "commit:dir-synced", "remove:meta-removed",
			"update:renamed", "remove:meta-removed",
		})
	})
}

// crashPoints runs TestCrashPoints with bodies padded with pad, stored in
// files each, crashing at wantPoints.
func crashPoints(t *testing.T, pad string, files int, wantPoints []string) {
	o := testOptions(t, 1<<20)
	s := openStore(t, o)
	type snap struct {
		point, dir string
		want       []string // acceptable bodies; "" = absent
	}
	var snaps []snap
	var want []string
	s.hook = func(point string) { snaps = append(snaps, snap{point, copyDir(t, o.Dir), want}) }

	first, second := "first"+pad, "second version"+pad
	want = []string{"", first}
	put(t, s, key1, first)
	want = []string{first, second}
	put(t, s, key1, second)
	want = []string{second}
	_, m, _ := get(t, s, key1)
	m = m.Clone()
	m.Extra["x"] = strings.Repeat("x", 1000)
	if err := s.UpdateMeta(key1, m); err != nil {
		t.Fatal(err)
	}
	want = []string{second, ""}
	if err := s.Delete(key1); err != nil {
		t.Fatal(err)
	}
	s.hook = nil

	var points []string
	for _, sn := range snaps {
		points = append(points, sn.point)
		s2 := openStore(t, Options{Dir: sn.dir, MaxBytes: 1 << 20})
		b, m, ok := get(t, s2, key1)
		if !ok {
			b = ""
		}
		if !slices.Contains(sn.want, b) {
			t.Errorf("crash at %s: got %q, want one of %q", sn.point, b, sn.want)
		}
		if ok && sn.point == "update:renamed" && len(m.Extra["x"]) != 1000 {
			t.Errorf("crash at %s: update lost", sn.point)
		}
		if n := len(objectFiles(t, sn.dir)); (ok && n != files) || (!ok && n != 0) {
			t.Errorf("crash at %s: leftovers %v", sn.point, objectFiles(t, sn.dir))
		}
		if st := s2.Stats(); st.Corrupt != 0 || st.Bytes != diskBytes(t, sn.dir) {
			t.Errorf("crash at %s: stats %+v", sn.point, st)
		}
		s2.Close()
	}
	if !slices.Equal(points, wantPoints) {
		t.Errorf("crash points %v, want %v", points, wantPoints)
	}
}

// TestCrashCopyMidWrite copies the directory while an object is half
// written (no hooks): the copy must not show it.
func TestCrashCopyMidWrite(t *testing.T) {
	o := testOptions(t, 1<<20)
	s := openStore(t, o)
	put(t, s, "done", "done")
	w, _ := s.Create("half", testMeta("half written"))
	defer w.Close()
	io.WriteString(w, "half")
	snap := copyDir(t, o.Dir)
	os.Remove(filepath.Join(snap, lockFile))
	s2 := openStore(t, Options{Dir: snap, MaxBytes: 1 << 20})
	if _, ok := s2.Get("half"); ok {
		t.Fatal("half-written object visible in a copy")
	}
	if b, _, ok := get(t, s2, "done"); !ok || b != "done" {
		t.Fatal("complete object lost in a copy")
	}
	if tmp := files(t, filepath.Join(snap, tmpDir)); len(tmp) != 0 {
		t.Fatalf("tmp/ not emptied: %v", tmp)
	}
}

// TestOpenDiscardsDamage damages a store's files every way we can think of
// and reopens it: Open must succeed, keep the intact objects, and remove
// the damaged ones.
func TestOpenDiscardsDamage(t *testing.T) {
	o := testOptions(t, 1<<20)
	s := openStore(t, o)
	keys := []string{"intact01", "truncmeta", "flipped1", "emptymeta", "nobody01", "shortbody", "longbody",
		"badvers1", "swapped1", "swapped2", "garbage1", "metaonly"}
	// Bodies too large to be stored inline: a body file and a metadata
	// file each (TestInlineDamage damages inline files).
	pad := strings.Repeat(".", InlineMaxSize)
	for _, k := range keys {
		put(t, s, k, "body of "+k+pad)
	}
	s.Close()
	pathOf := func(key, suffix string) string {
		name := nameOf(key)
		m, _ := filepath.Glob(filepath.Join(o.Dir, objectsDir, shardOf(name), name.String()+"-*"+suffix))
		if len(m) != 1 {
			t.Fatalf("%s%s: %v", key, suffix, m)
		}
		return m[0]
	}
	edit := func(key, suffix string, f func([]byte) []byte) {
		p := pathOf(key, suffix)
		b, _ := os.ReadFile(p)
		if err := os.WriteFile(p, f(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	edit("truncmeta", metaSuffix, func(b []byte) []byte { return b[:len(b)/2] })
	edit("flipped1", metaSuffix, func(b []byte) []byte { b[len(b)-5] ^= 1; return b })
	edit("emptymeta", metaSuffix, func([]byte) []byte { return nil })
	os.Remove(pathOf("nobody01", bodySuffix))
	edit("shortbody", bodySuffix, func(b []byte) []byte { return b[:3] })
	edit("longbody", bodySuffix, func(b []byte) []byte { return append(b, '!') })
	edit("badvers1", metaSuffix, func(b []byte) []byte { b[4] = 2; return b })
	edit("garbage1", metaSuffix, func([]byte) []byte { return bytes.Repeat([]byte{0xff}, 300) })
	// A valid metadata file under another key's name.
	m1, _ := os.ReadFile(pathOf("swapped1", metaSuffix))
	m2, _ := os.ReadFile(pathOf("swapped2", metaSuffix))
	os.WriteFile(pathOf("swapped1", metaSuffix), m2, 0o600)
	os.WriteFile(pathOf("swapped2", metaSuffix), m1, 0o600)
	os.Remove(pathOf("metaonly", metaSuffix)) // a body without metadata
	// Strangers in objects/ and a stale tmp/ file.
	os.WriteFile(filepath.Join(o.Dir, objectsDir, "00", "README"), []byte("hi"), 0o600)
	os.WriteFile(filepath.Join(o.Dir, objectsDir, "00", "00000000-0000000000000001.meta"), []byte("CDCM"), 0o600) // wrong shard
	os.WriteFile(filepath.Join(o.Dir, objectsDir, "stray"), []byte("hi"), 0o600)
	os.Mkdir(filepath.Join(o.Dir, objectsDir, "zz"), 0o700)
	os.WriteFile(filepath.Join(o.Dir, tmpDir, "junk"), []byte("hi"), 0o600)
	os.WriteFile(filepath.Join(o.Dir, lruFile), []byte("not an lru file"), 0o600)

	s = openStore(t, o)
	if b, _, ok := get(t, s, "intact01"); !ok || b != "body of intact01"+pad {
		t.Fatalf("intact object: %q %v", b, ok)
	}
	for _, k := range keys[1:] {
		if _, ok := s.Get(k); ok {
			t.Errorf("damaged object %q served", k)
		}
	}
	if got := objectFiles(t, o.Dir); len(got) != 2 {
		t.Errorf("files left: %v", got)
	}
	if _, err := os.Stat(filepath.Join(o.Dir, objectsDir, "zz")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stray directory kept: %v", err)
	}
	if st := s.Stats(); st.Entries != 1 || st.Corrupt < 9 || st.Bytes != diskBytes(t, o.Dir) {
		t.Errorf("stats %+v", st)
	}
}

// TestGetDropsDamage: metadata damaged while the store runs is noticed by
// Get, which misses and removes the object.
func TestGetDropsDamage(t *testing.T) {
	o := testOptions(t, 1<<20)
	s := openStore(t, o)
	big := strings.Repeat("b", InlineMaxSize+1)
	put(t, s, "0000aaaa", big)
	put(t, s, "0000bbbb", big)
	put(t, s, "0000cccc", "body") // inline
	for _, p := range objectFiles(t, o.Dir) {
		p = filepath.Join(o.Dir, p)
		if strings.Contains(p, fileName("0000aaaa")) && strings.HasSuffix(p, metaSuffix) {
			os.WriteFile(p, []byte("CDCM junk"), 0o600)
		}
		if strings.Contains(p, fileName("0000bbbb")) {
			os.Remove(p)
		}
		if strings.Contains(p, fileName("0000cccc")) {
			b, _ := os.ReadFile(p)
			b[len(b)-1] ^= 1
			os.WriteFile(p, b, 0o600)
		}
	}
	for _, k := range []string{"0000aaaa", "0000bbbb", "0000cccc"} {
		if _, ok := s.Get(k); ok {
			t.Errorf("%s served", k)
		}
	}
	if st := s.Stats(); st.Entries != 0 || st.Bytes != 0 || st.Corrupt != 2 || len(objectFiles(t, o.Dir)) != 0 {
		t.Fatalf("stats %+v, files %v", st, objectFiles(t, o.Dir))
	}
}

func TestMetaEncoding(t *testing.T) {
	m := testMeta("x")
	m.Key, m.Size = "k", 1
	b, err := encodeMeta(m, 42)
	if err != nil {
		t.Fatal(err)
	}
	if string(b[:4]) != metaMagic || b[4] != metaVersion || int(binary.LittleEndian.Uint32(b[8:])) != len(b)-metaHeaderLen {
		t.Fatalf("header % x", b[:metaHeaderLen])
	}
	got, gen, err := decodeMeta(b)
	if err != nil || gen != 42 || got.Key != "k" || got.Extra["sha256"] != m.Extra["sha256"] ||
		!got.Expires.Equal(m.Expires) || got.Header.Get("Etag") != m.Header.Get("Etag") {
		t.Fatalf("decoded %+v %d %v", got, gen, err)
	}
	// Arbitrary bytes survive (HTTP header values need not be UTF-8).
	odd := Meta{Key: "\xff\x00key", Size: 0, Status: -1,
		Header: http.Header{"X-Latin1": {"caf\xe9", ""}, "X-Empty": {}}, Extra: map[string]string{"\xfe": "\x00"},
		Stored: time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC), Expires: time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)}
	b, _ = encodeMeta(odd, 1<<63)
	if got, gen, err := decodeMeta(b); err != nil || gen != 1<<63 || !reflect.DeepEqual(got, odd) {
		t.Fatalf("odd metadata: %+v %v\nwant %+v", got, err, odd)
	}
	for _, bad := range []Meta{{Size: 1}, {Key: "k", Size: -1}, {Key: "k", Expires: time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)}} {
		if _, err := encodeMeta(bad, 1); !errors.Is(err, ErrInvalidMeta) {
			t.Errorf("encodeMeta(%+v): %v", bad, err)
		}
	}
	m.Extra["big"] = strings.Repeat("b", MaxMetaSize)
	if _, err := encodeMeta(m, 1); !errors.Is(err, ErrInvalidMeta) {
		t.Errorf("oversized: %v", err)
	}
	for _, bad := range [][]byte{nil, b[:10], append(slices.Clone(b), ' '), b[:len(b)-1]} {
		if _, _, err := decodeMeta(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("decodeMeta(%d bytes): %v", len(bad), err)
		}
	}
}

func TestFileNames(t *testing.T) {
	for key, want := range map[string]string{
		key1:                     key1,
		"abcdef01":               "x",
		strings.Repeat("a", 42):  "x",
		"ABCDEF01":               "x",
		"abc":                    "x",
		"a/b":                    "x",
		strings.Repeat("a", 129): "x",
	} {
		name := fileName(key)
		if want == "x" && (len(name) != 41 || name[0] != 'x') || want != "x" && name != want {
			t.Errorf("fileName(%q) = %q", key, name)
		}
		if !validName(name) {
			t.Errorf("fileName(%q) = %q not valid", key, name)
		}
		n := nameOf(key)
		if k, ok := n.key(); ok != (want != "x") || ok && k != key {
			t.Errorf("nameOf(%q).key() = %q, %v", key, k, ok)
		}
		base := versionBase(n, 0x1234)
		f, ok := parseObjectFile(base + metaSuffix)
		if f.name != n || f.gen != 0x1234 || f.kind != kindMeta || !ok {
			t.Errorf("parse %q: %+v %v", base, f, ok)
		}
		in := inlineBase(n, 0x1234, 1024, 300) + objSuffix
		f, ok = parseObjectFile(in)
		if f.name != n || f.gen != 0x1234 || f.kind != kindInline || f.size != 1024 || f.metaLen != 300 || !ok {
			t.Errorf("parse %q: %+v %v", in, f, ok)
		}
	}
	k40 := "0123456789abcdef0123456789abcdef01234567"
	for _, bad := range []string{"x.body", k40 + "-0000000000000000.body", k40 + "-00000000000000001.body",
		k40 + "-000000000000000g.meta", strings.ToUpper(k40) + "-0000000000000001.meta", k40 + "-0000000000000001.tmp",
		"abcdef01-0000000000000001.meta", // format 1's short hex names
		k40 + "-0000000000000001.obj", k40 + "-0000000000000001-400.obj", k40 + "-0000000000000001-0400-12c.obj",
		k40 + "-0000000000000001-400-f.obj", k40 + "-0000000000000001-4001-12c.obj", k40 + "-0000000000000001--12c.obj"} {
		if _, ok := parseObjectFile(bad); ok {
			t.Errorf("parsed %q", bad)
		}
	}
}
