package diskcache

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Names in the cache directory (see the package docs for the layout).
const (
	formatFile     = "FORMAT"
	formatContent  = "coral-diskcache 2\n"
	formatContent1 = "coral-diskcache 1\n" // two files per object; migrated by Open
	lockFile       = "lock"
	lruFile        = "lru" // format 1's LRU order; removed by Open
	checkpointFile = "index"
	objectsDir     = "objects"
	tmpDir         = "tmp"
	bodySuffix     = ".body"
	metaSuffix     = ".meta"
	objSuffix      = ".obj"
	genDigits      = 16
)

// InlineMaxSize is the largest body stored in one file with its metadata
// ("<name>-<gen>-<size>-<metalen>.obj"); a larger one has a body file and
// a metadata file, so that a hit sends the body file whole (sendfile), and
// a revalidation rewrites the metadata without copying the body. A body
// this small is sent from a buffer (Reader.WriteTo), never with sendfile,
// so the metadata after it costs a hit nothing.
const InlineMaxSize = smallWrite

// fileName maps a key to the base of its file names (objName.String).
func fileName(key string) string { return nameOf(key).String() }

// validName reports whether s is something fileName can return.
func validName(s string) bool {
	_, ok := parseName(s)
	return ok
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
func shardOf(name objName) string { return shardNames[name.b[0]] }

// shardNames are the 256 shards' names.
var shardNames = func() (t [256]string) {
	for i := range t {
		t[i] = fmt.Sprintf("%02x", i)
	}
	return t
}()

// versionBase is "<name>-<gen as 16 hex digits>".
func versionBase(name objName, gen uint64) string {
	var b strings.Builder
	b.Grow(1 + 2*nameLen + 1 + genDigits)
	appendVersionBase(&b, name, gen)
	return b.String()
}

func appendVersionBase(b *strings.Builder, name objName, gen uint64) {
	const hexDigits = "0123456789abcdef"
	if name.hashed {
		b.WriteByte('x')
	}
	for _, c := range name.b {
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&0xf])
	}
	b.WriteByte('-')
	for shift := 4 * (genDigits - 1); shift >= 0; shift -= 4 {
		b.WriteByte(hexDigits[gen>>uint(shift)&0xf])
	}
}

// inlineBase is "<name>-<gen>-<size>-<metalen>" (hex, no leading zeros):
// the file name says what the file must hold, so Open indexes it from
// the directory listing alone, and Get checks the file against it.
func inlineBase(name objName, gen uint64, size int64, metaLen int32) string {
	var b strings.Builder
	b.Grow(1 + 2*nameLen + 1 + genDigits + 2 + 16 + 8 + len(objSuffix))
	appendInlineBase(&b, name, gen, size, metaLen)
	return b.String()
}

func appendInlineBase(b *strings.Builder, name objName, gen uint64, size int64, metaLen int32) {
	appendVersionBase(b, name, gen)
	var num [20]byte
	b.WriteByte('-')
	b.Write(strconv.AppendInt(num[:0], size, 16))
	b.WriteByte('-')
	b.Write(strconv.AppendInt(num[:0], int64(metaLen), 16))
}

// fileKind is what parseObjectFile found.
type fileKind uint8

const (
	kindBody fileKind = iota
	kindMeta
	kindInline
)

// objectFile is what a file name in objects/ says.
type objectFile struct {
	name    objName
	gen     uint64
	kind    fileKind
	size    int64 // inline: the body's length
	metaLen int32 // inline: the metadata's length
}

// parseObjectFile parses "<name>-<gen>.body", "<name>-<gen>.meta" or
// "<name>-<gen>-<size>-<metalen>.obj", accepting only what the Store
// writes (canonical numbers: no leading zeros, and sizes within the
// bounds an inline object has).
func parseObjectFile(fn string) (objectFile, bool) {
	var f objectFile
	var base string
	switch {
	case strings.HasSuffix(fn, bodySuffix):
		base, f.kind = fn[:len(fn)-len(bodySuffix)], kindBody
	case strings.HasSuffix(fn, metaSuffix):
		base, f.kind = fn[:len(fn)-len(metaSuffix)], kindMeta
	case strings.HasSuffix(fn, objSuffix):
		base, f.kind = fn[:len(fn)-len(objSuffix)], kindInline
	default:
		return f, false
	}
	if f.kind == kindInline {
		i := strings.LastIndexByte(base, '-')
		if i < 0 {
			return f, false
		}
		metaLen, ok := parseHex(base[i+1:], metaHeaderLen+MaxMetaSize)
		base = base[:i]
		if i = strings.LastIndexByte(base, '-'); !ok || i < 0 {
			return f, false
		}
		size, ok := parseHex(base[i+1:], InlineMaxSize)
		if !ok || metaLen < metaHeaderLen {
			return f, false
		}
		base = base[:i]
		f.size, f.metaLen = size, int32(metaLen)
	}
	i := len(base) - genDigits - 1
	if i < 1 || base[i] != '-' || !isLowerHex(base[i+1:]) {
		return f, false
	}
	name, ok := parseName(base[:i])
	if !ok {
		return f, false
	}
	gen, err := strconv.ParseUint(base[i+1:], 16, 64)
	if err != nil || gen == 0 {
		return f, false
	}
	f.name, f.gen = name, gen
	return f, true
}

// parseHex parses a canonical lowercase hex number of at most limit.
func parseHex(s string, limit int64) (int64, bool) {
	if s == "" || len(s) > 8 || (len(s) > 1 && s[0] == '0') || !isLowerHex(s) {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 16, 64)
	return v, err == nil && v <= limit
}

func (s *Store) shardDir(name objName) string {
	return filepath.Join(s.dir, objectsDir, shardOf(name))
}

func (s *Store) bodyPath(name objName, gen uint64) string {
	return s.versionPath(name, gen, bodySuffix)
}

func (s *Store) metaPath(name objName, gen uint64) string {
	return s.versionPath(name, gen, metaSuffix)
}

// inlinePath is the file of an inline version, in one allocation (as
// versionPath).
func (s *Store) inlinePath(name objName, gen uint64, size int64, metaLen int32) string {
	var b strings.Builder
	s.startShardPath(&b, name, 2+16+8+len(objSuffix))
	appendInlineBase(&b, name, gen, size, metaLen)
	b.WriteString(objSuffix)
	return b.String()
}

// entryPath is the file Get opens for e's version: the inline file or
// the body.
func (s *Store) entryPath(e *entry) string { return s.versionFile(e.version()) }

// versionFile is the file Get opens for version v.
func (s *Store) versionFile(v version) string {
	if v.inline {
		return s.inlinePath(v.name, v.gen, v.size, v.metaLen)
	}
	return s.bodyPath(v.name, v.gen)
}

// versionPath is filepath.Join(s.shardDir(name), versionBase(name,
// gen)+suffix) in one allocation (every Get builds one). s.dir is absolute
// and clean, name and suffix hold no separator, so joining is
// concatenation.
func (s *Store) versionPath(name objName, gen uint64, suffix string) string {
	var b strings.Builder
	s.startShardPath(&b, name, len(suffix))
	appendVersionBase(&b, name, gen)
	b.WriteString(suffix)
	return b.String()
}

// startShardPath grows b for a version file's path of name with more
// bytes after the version's base name, and writes its directory:
// s.dir/objects/SHARD/.
func (s *Store) startShardPath(b *strings.Builder, name objName, more int) {
	b.Grow(len(s.dir) + 1 + len(objectsDir) + 1 + 2 + 1 + 1 + 2*nameLen + 1 + genDigits + more)
	b.WriteString(s.dir)
	b.WriteByte(filepath.Separator)
	b.WriteString(objectsDir)
	b.WriteByte(filepath.Separator)
	b.WriteString(shardOf(name))
	b.WriteByte(filepath.Separator)
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
	err = s.finishFile(f, data)
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// writeFile creates path (which must not exist) with data, synced.
func (s *Store) writeFile(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	return s.finishFile(f, data)
}

// finishFile writes data to f, syncs and closes it.
func (s *Store) finishFile(f *os.File, data []byte) error {
	_, err := f.Write(data)
	if err == nil && !s.opt.NoSync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
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
