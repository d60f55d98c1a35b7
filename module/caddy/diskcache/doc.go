// Package diskcache is the on-disk object store of the coral_proxy Caddy
// module: a bounded, least-recently-used cache of HTTP responses that
// survives restarts and crashes, streams bodies of any size in constant
// memory, and lets many readers follow one download while it is being
// written (cut-through).
//
// # Use
//
//	s, err := diskcache.Open(diskcache.Options{Dir: dir, MaxBytes: 10 << 30})
//	defer s.Close()
//
//	// A hit, or a download in progress to join:
//	r, ok := s.GetContext(req.Context(), key)
//	if !ok {
//		resp := ... // the origin's response headers
//		w, err := s.Create(key, diskcache.Meta{Status: resp.StatusCode,
//			Header: resp.Header, Size: resp.ContentLength}) // -1 if unknown
//		if err != nil {
//			... // ErrInProgress: Get again; ErrFull, ErrTooLarge: serve uncached
//		}
//		go func() { // the one download: not tied to this client (give it its own timeout)
//			defer w.Close() // aborts unless committed
//			if _, err := io.Copy(w, resp.Body); err == nil {
//				w.Commit(w.Meta()) // or with trailers merged into Header
//			}
//		}()
//		r, ok = s.GetContext(req.Context(), key) // read it like everyone else
//	}
//	defer r.Close()
//	m := r.Meta() // status and header at once, even mid-download
//	... write m.Header, m.Status ...
//	r.WriteTo(rw) // the bytes on disk now, then the rest as it arrives
//
// Create returns ErrInProgress when another request is already writing the
// key: Get and read that write instead of fetching the object again.
// Coalescing the requests that arrive before the origin's response headers
// (when there is nothing to Create yet) is the caller's job, for example
// with a singleflight keyed by the cache key.
//
// # Files
//
// Everything lives under Options.Dir:
//
//	FORMAT                          "coral-diskcache 2\n"; Open refuses other layouts (ErrFormat)
//	lock                            flock(2)ed by the open Store (ErrLocked for a second one)
//	index                           the LRU order saved by Close, read and removed by Open
//	tmp/<name>-<gen>.body           bodies being written; tmp/ is emptied by Open
//	tmp/meta-*, tmp/<name>-<gen>.obj metadata and inline files being written
//	objects/<xx>/<name>-<gen>-<size>-<metalen>.obj
//	                                a small object: body, then metadata, in one file
//	objects/<xx>/<name>-<gen>.body  a larger object's body
//	objects/<xx>/<name>-<gen>.meta  its metadata: the commit record
//
// <name> is the key itself when it is 40 lowercase hex digits (the
// proxy's SHA-1 keys), otherwise "x" and 40 hex digits of the key's
// SHA-256; <xx> is the name's first two hex digits. <gen> is a
// 16-hex-digit generation, unique and increasing per version (seeded from
// the clock and the largest generation on disk), so every version has its
// own files: replacing an object never overwrites a file that a reader
// may have open, and removing one version can never hit another.
//
// A body of at most InlineMaxSize (16 KiB) is stored inline: its metadata
// follows it in the same file, and the file's name carries the body's
// length and the metadata's (hex), so a 1 KiB object takes one inode and
// one 4 KiB block (format 1 took two of each). A larger body has a file
// of its own, which a hit sends whole with sendfile (Caddy wraps the body
// it copies in a LimitedReader of its own, and sendfile sees through one,
// not two), and a metadata file, which a revalidation (UpdateMeta)
// rewrites without touching the body. Metadata is a 16-byte header (magic
// "CDCM", format version, payload length, CRC-32C) followed by a binary
// payload of length-prefixed fields (so keys and header values keep
// arbitrary bytes): the Meta fields, the key and the generation; see
// meta.go.
//
// Format 1 caches (every object in two files, any key of 8 to 128 hex
// digits as its own name, an lru file) are migrated by Open in place,
// with a log line: their objects are format 2's two-file objects and stay
// as they are (new versions of small ones take one file); the objects
// whose names format 2 does not use (hex keys of another length than 40)
// are removed as unknown files.
//
// # Crash safety
//
// An object is complete exactly when its commit record exists in objects/:
// its inline file, or its metadata file. Commit makes that true only
// after the body is complete and durable. Inline: append the metadata to
// the body in tmp/, fsync, rename into objects/, fsync the directory; so
// nothing in objects/ was ever partly written. Two files: fsync the body,
// rename it from tmp/ into objects/, write the metadata to tmp/, fsync it,
// rename it next to the body, fsync the directory. Open takes an inline
// file on its name (that is what keeps a restart with a million objects
// to a directory listing; see Restarts), and Get checks it before it
// serves anything from it: the file's length must be what its name says,
// its metadata must decode (length and checksum) and name the same key,
// generation and body length, else Get misses, counts it
// (Stats.Corrupt) and removes it. A two-file version is checked by Open:
// its metadata must decode, name the same key and generation, and its
// body must exist with exactly the recorded size. Open takes the highest
// valid generation of each name and removes everything else: tmp/, older
// generations left by a crash between a commit and the removal of the
// version it replaced, bodies without metadata, unreadable metadata. So
// after a crash at any point an object is either absent or one complete
// version, never a partial body. UpdateMeta of a two-file object replaces
// the metadata file by the same write-fsync-rename, so a crash leaves the
// old or the new one; of an inline object it writes a new version (the
// body copied, at most 16 KiB, with the new metadata) as Commit does, and
// a crash leaves the old version or the new one. Removals unlink the
// metadata first. Corrupt metadata found by Get is dropped too
// (Stats.Corrupt), when Get reads it: the metadata of objects in the hot
// set (see Memory) is not read again while the Store runs, so damage to
// their files shows at the next Get after they leave it. The Store owns
// the directory. Options.NoSync gives up durability across power failures
// (not process crashes) for speed.
//
// # Bounds and eviction
//
// MaxBytes bounds the space the objects take on disk, counted the way the
// file system allocates it: every file, inline, body or metadata, is
// charged its length rounded up to whole blocks, and one block if empty. The block
// (Stats.BlockBytes) is the file system's own on ext2/3/4, XFS, Btrfs, tmpfs
// and F2FS (statfs), between 4 and 64 KiB, and 4 KiB anywhere else: ZFS,
// NFS and FUSE report a transfer size there, not what a small file takes.
// (Counting bytes instead, a 1 MiB cache of objects of a few hundred bytes
// took 37.8 MiB.) A complete object is charged its file or files, at
// least one block; a write in progress, its body as far as written. Not
// charged: the Store's own files (FORMAT, lock, index: three blocks, the
// index about 37 bytes per object while it exists, between Close and
// Open), a metadata file
// being replaced by UpdateMeta (one block, for a moment), the empty file
// Create opens until its first Write (one block per write in progress),
// and directories:
// objects/ and its 256 shards take a block each whatever MaxBytes is (1 MiB
// with 4 KiB blocks), and their entries 2 to 3% of MaxBytes when it is
// full of the smallest objects (TestDiskUsageSmallObjects).
//
// Space is charged as the bytes arrive, never for a declared size: Create
// reserves nothing and evicts nothing; each Write first charges the body's
// new length, evicting least recently used complete objects as needed to
// stay within MaxBytes; Commit adds the metadata file; UpdateMeta charges
// the difference in blocks. A response that announces a large
// Content-Length and then trickles costs what it has sent.
//
// Writes in progress are never evicted, and together they hold at most
// MaxWritingBytes (default a quarter of MaxBytes). A Write beyond it fails
// with ErrFull, evicting nothing (a failed Write aborts its object); so
// does a Create when what they hold leaves no room for its declared size
// (at least one block), or when there are as many writes in progress as
// MaxWritingBytes has blocks. However many
// downloads run, and however slowly, the complete objects keep MaxBytes -
// MaxWritingBytes (less one object being evicted; a Commit may go a block
// or two beyond MaxWritingBytes for the metadata file rather than waste the
// download). The price: a declared size is not a reservation, so a
// download may fail midway with ErrFull when others took the room; its
// readers then get an *AbortError. One object is at most MaxObjectBytes
// (default an eighth of MaxBytes): a larger declared size fails Create
// with ErrTooLarge, a longer body fails its Write with ErrTooLarge (past a
// declared size, with ErrSizeMismatch). MaxEntries bounds the number of
// complete objects (default MaxBytes / 4 KiB: as many as fit at one 4 KiB
// block each, so it bounds the index to about 2% of MaxBytes without
// evicting sooner than the byte bound would). Open applies all of these
// to what it finds, so a cache written by an older version that counted
// bytes is evicted down to them.
//
// A version removed (replaced, deleted, evicted, aborted) stays charged
// until its files are unlinked, a moment after it leaves the index
// (Stats.UnlinkedBytes meanwhile): a Write that evicts unlinks its victims
// before it takes their room, and one that finds room only in versions
// other calls are still unlinking waits for them, so no byte lands on
// room the count calls free while an old file still takes it
// (TestRoomFreedOnlyOnceUnlinked). A version removed while Readers have
// it open stays readable, and on disk, until the last of them closes:
// its body stays charged meanwhile, and a
// complete object with open Readers is not evicted for room, which would
// free nothing. So Bytes + WritingBytes + UnlinkedBytes (Stats) never
// exceed MaxBytes, and that bounds what the disk really holds however long
// readers keep their files; when Readers hold it all, Writes fail with
// ErrFull until they close. The caller bounds how long a Reader may stall
// (coral_proxy drops a client that reads nothing for write_idle_timeout).
// Get and Commit count as use.
//
// # A full disk
//
// MaxBytes is what the caller allows; the file system may hold less (other
// files on it, a quota, a MaxBytes larger than the disk). A body write
// that fails with ENOSPC or EDQUOT lowers the bound in effect to what the
// disk holds (what the Store holds by its count plus the file system's
// free space, less two blocks; Stats.DiskLimitBytes), evicts least
// recently used objects down to it and writes again. The lowered bound is
// read again from the file system at most every 30 s while it applies, and
// at every full disk, so freed space becomes cache space again.
//
// A write the disk still refuses, or fails otherwise (EIO, a read-only
// file system, a commit whose fsync or metadata file fails), or for which
// a Write finds no room with the lowered bound in effect, is not stored,
// and is not aborted either: the Writer leaves the index (Gets miss, a
// new Create may start afresh) and relays. What reached the file stays
// there for its Readers; every later byte goes through a window in memory
// of at most 1 MiB that drops only what every Reader has read, so a Write
// waits while the slowest Reader is that far behind (Abort ends the
// wait). Commit then returns ErrNotStored, and the Readers get io.EOF
// after the last byte: every Reader opened before the relay began gets
// the whole body, never a short one. Readers of a relay that Abort ends
// get an *AbortError as for any write. Stats.DiskWriteErrors counts the
// failed writes, Stats.Relays the objects relayed.
//
// # Memory
//
// Bodies are never held in memory: writes go straight to the file, readers
// read their own file descriptor with positional reads into the caller's
// buffer, and WriteTo hands the file to the destination's ReadFrom
// (sendfile), or for the last 16 KiB or less of a complete object reads
// them into a pooled buffer and writes them at once. A 256 MiB object is
// written and read with well under 16 MiB of heap growth
// (TestLargeObjectMemory).
//
// The index (index.go) keeps per complete object one 80-byte entry: the
// object's 20-byte name (the key's bytes for a 40-hex key, else the first
// 20 bytes of its SHA-256), generation, body and metadata lengths, last
// use, LRU neighbours and hot-set slot as 32-bit entry numbers, its
// count of open Readers, and a 64-bit mark of the caller's (SetMark: the
// proxy keeps the renewal state of the object's DSHT reference there,
// instead of a table of its own as large as the index). Entries live in chunks of 4,096 that never move;
// an open-addressing table of 32-bit entry numbers, at most half full,
// finds them by name (4 to 8 bytes per object); free entries are linked
// through the LRU field. No per-object Go object, pointer, string or map
// entry: a million objects are about 250 allocations that the garbage
// collector never scans, about 90 bytes per object (TestIndexMemory;
// format 1 took about 165 with the key and a map, and the collector's
// headroom doubled that). The key is not kept: the proxy's keys are their
// names, and any other key is read back from the object's metadata when
// Walk, Range or Recent must report it. Writes in progress, few, are in a
// map of their own.
//
// The chunks and the table are mapped outside the Go heap (anonymous
// private mappings, package module/caddy/internal/offheap; the Go heap
// where the system has no mmap, and under -race so the race detector
// sees them). On the heap they cost about twice their size in resident
// memory: the collector lets the heap grow to twice its live data before
// it collects (GOGC=100), and a module running inside Caddy must not set
// the process's GOGC or GOMEMLIMIT. Off the heap a page is resident once
// written and no more, so resident memory follows the ~90 bytes per
// object (Stats.IndexBytes, caddy_coral_offheap_bytes); measured at a
// million objects by eval/scale. They are
// given back when the Store is garbage, not at Close: a Reader may
// outlive Close and still note its end in its entry.
//
// Against the caches people run: nginx's keys_zone takes about 128 bytes
// per key (an rbtree node and an LRU queue link with the key's MD5 and
// the file's validity, size and lock counts, in shared memory); Traffic
// Server's directory 10 bytes per object (a 16-bit key tag, an offset
// into a preallocated cache span and an approximate size: it can be that
// small because its objects live in a few large span files it manages
// itself, and a tag collision is settled by reading the object's header
// on disk); Varnish keeps a full object head and object structure in
// memory per object (several hundred bytes, plus its hash entry) even
// when the body is in file storage. This index sits with nginx's: it
// names files in the file system's directories (so it needs the whole
// name, 20 bytes, not a tag, to find the file without reading a
// directory), and it keeps what eviction, the byte bound and the reader
// counts need without a disk read (sizes, LRU links, readers). Going to
// Traffic Server's ten bytes would need its span storage, a bounded
// CLOCK instead of exact LRU, and a disk read for every tag match.
//
// Metadata lives on disk, and decoded in memory for the objects in the hot
// set: those read again and again, within Options.HotMetaBytes (default 16
// MiB, an estimate of the heap the decoded Meta values take;
// Stats.HotBytes). A Get of an object in the hot set opens its body and
// nothing else; a Get of any other object also reads, checks and decodes
// its metadata file. The first such read of a version only marks it; the
// second puts it in the hot set. So objects requested once, most of a
// CDN's, never take room (their one reader often comes after the commit,
// which adds nothing itself), and an object pays two metadata reads before
// its hits stop reading. Replacement is CLOCK: a Get marks its object's
// slot, and making room takes the first slot not marked since the hand
// last passed, so objects read again and again stay (one pushed out comes
// back at its next read). UpdateMeta replaces
// or adds the cached copy, and a version leaves the hot set with the
// version (replaced, deleted, evicted, found gone).
//
// Small bodies (HotBodyMaxSize, 16 KiB, or less) of objects in the hot set
// are kept in memory too, within Options.HotBodyBytes (default 16 MiB;
// Stats.HotBodyBytes): the first Get after the metadata entered the hot set
// reads the body whole from the file it opened, and later Gets open no
// file at all. For a small object, opening, reading and closing its file
// were most of a hit's work (three system calls and four allocations, two
// thirds of the handler's time for 1 KiB in coral_proxy's BenchmarkHit); a
// larger body still goes out with sendfile, whose cost does not grow with
// it. A Reader of memory holds no file, so it keeps nothing on disk and
// takes no hold on its version: the version can be replaced or evicted
// while it reads, and the body it reads stays valid (it is never
// modified). Bodies leave with their slot, or alone by a second CLOCK hand
// when the bodies need room; so like the metadata, a body in memory is
// trusted while the store runs and a change to its file behind the
// store's back goes unnoticed until the version leaves the hot set.
//
// Why not keep every object's metadata with its index entry: decoded, the
// metadata coral_proxy stores (five header fields, two Extra entries) takes
// about 1.2 KB of heap (two maps, their value slices and strings;
// TestHotMemory), seven times the rest of the index, for every object on
// disk whether requested or not: another 1.2 GB for a million objects.
// Kept encoded instead, it would still cost about 300 bytes per object and
// a decode (24 allocations) on every Get. A bounded hot set gets the
// objects that take the hits, which are what the saving is for, at a
// memory cost that depends on neither the number of objects nor their
// size.
//
// # Concurrency
//
// All Store methods are safe for concurrent use. Each Reader has its own
// file descriptor and offset; readers of a write in progress wait on a
// channel the writer closes after each write, commit or abort (a broadcast
// without busy waiting), together with the Reader's Close and its contexts.
// An HTTP handler should use GetContext(req.Context(), key) so that a
// client that goes away does not leave a goroutine waiting on a slow
// origin.
//
// # Restarts and reloads
//
// A Store takes an exclusive lock on its directory; a second Open of the
// same directory fails with ErrLocked until Close, even in the same process.
// A Caddy configuration reload provisions the new configuration before
// stopping the old one, so the Store must not be owned by the reloaded
// handler: keep it in a long-lived app or a reference-counted pool (such as
// caddy.UsagePool) keyed by directory, and Close it when the last user
// goes. Close aborts writes in progress, saves the LRU order, and releases
// the lock; Open of the same directory then finds every committed object.
package diskcache
