package diskcache

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Names in the cache directory (see the package docs for the layout).
const (
	formatFile    = "FORMAT"
	formatContent = "coral-diskcache 1\n"
	lockFile      = "lock"
	lruFile       = "lru"
	lruHeader     = "coral-diskcache-lru 1"
	objectsDir    = "objects"
	tmpDir        = "tmp"
	bodySuffix    = ".body"
	metaSuffix    = ".meta"
	genDigits     = 16
)

// fileName maps a key to the base of its file names. Lowercase hex keys of
// 8 to 128 digits (the HTTP layer's SHA-1 keys) are used as they are, so an
// operator can find an object by its key; anything else becomes "x" and 40
// hex digits of its SHA-256. The two forms cannot collide ('x' is not a hex
// digit). The metadata file stores the real key, which Get checks.
func fileName(key string) string {
	if len(key) >= 8 && len(key) <= 128 && isLowerHex(key) {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "x" + hex.EncodeToString(sum[:20])
}

// validName reports whether s is something fileName can return.
func validName(s string) bool {
	if len(s) == 41 && s[0] == 'x' {
		return isLowerHex(s[1:])
	}
	return len(s) >= 8 && len(s) <= 128 && isLowerHex(s)
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// shardOf is the objects/ subdirectory (two hex digits) holding a name.
func shardOf(name string) string {
	if name[0] == 'x' {
		return name[1:3]
	}
	return name[:2]
}

// versionBase is "<name>-<gen as 16 hex digits>".
func versionBase(name string, gen uint64) string {
	var b strings.Builder
	b.Grow(len(name) + 1 + genDigits)
	b.WriteString(name)
	b.WriteByte('-')
	g := strconv.FormatUint(gen, 16)
	for i := len(g); i < genDigits; i++ {
		b.WriteByte('0')
	}
	b.WriteString(g)
	return b.String()
}

// parseObjectFile splits "<name>-<gen>.body" or "<name>-<gen>.meta".
func parseObjectFile(fn string) (name string, gen uint64, isMeta, ok bool) {
	var base string
	switch {
	case strings.HasSuffix(fn, bodySuffix):
		base = fn[:len(fn)-len(bodySuffix)]
	case strings.HasSuffix(fn, metaSuffix):
		base, isMeta = fn[:len(fn)-len(metaSuffix)], true
	default:
		return "", 0, false, false
	}
	i := len(base) - genDigits - 1
	if i < 1 || base[i] != '-' || !isLowerHex(base[i+1:]) || !validName(base[:i]) {
		return "", 0, false, false
	}
	gen, err := strconv.ParseUint(base[i+1:], 16, 64)
	if err != nil || gen == 0 {
		return "", 0, false, false
	}
	return base[:i], gen, isMeta, true
}

func (s *Store) shardDir(name string) string {
	return filepath.Join(s.dir, objectsDir, shardOf(name))
}

func (s *Store) bodyPath(name string, gen uint64) string {
	return s.versionPath(name, gen, bodySuffix)
}

func (s *Store) metaPath(name string, gen uint64) string {
	return s.versionPath(name, gen, metaSuffix)
}

// versionPath is filepath.Join(s.shardDir(name), versionBase(name,
// gen)+suffix) in one allocation (every Get builds one). s.dir is absolute
// and clean, name and suffix hold no separator, so joining is
// concatenation.
func (s *Store) versionPath(name string, gen uint64, suffix string) string {
	const hexDigits = "0123456789abcdef"
	var b strings.Builder
	b.Grow(len(s.dir) + 1 + len(objectsDir) + 1 + 2 + 1 + len(name) + 1 + genDigits + len(suffix))
	b.WriteString(s.dir)
	b.WriteByte(filepath.Separator)
	b.WriteString(objectsDir)
	b.WriteByte(filepath.Separator)
	b.WriteString(shardOf(name))
	b.WriteByte(filepath.Separator)
	b.WriteString(name)
	b.WriteByte('-')
	for shift := 4 * (genDigits - 1); shift >= 0; shift -= 4 {
		b.WriteByte(hexDigits[gen>>uint(shift)&0xf])
	}
	b.WriteString(suffix)
	return b.String()
}

// writeFileAtomic writes data to a temporary file in tmp/, fsyncs it and
// renames it to path, so path holds either its old content or all of data.
// The caller fsyncs path's directory.
func (s *Store) writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Join(s.dir, tmpDir), "meta-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil && !s.opt.NoSync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// syncDir fsyncs a directory, making renames and unlinks in it durable.
func (s *Store) syncDir(dir string) error {
	if s.opt.NoSync {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
