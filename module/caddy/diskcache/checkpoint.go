package diskcache

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"iter"
)

// The checkpoint ("index"): the LRU order and last-use times Close saves
// for the next Open, which reads and removes it. It only orders what the
// scan of objects/ finds (a record whose name and generation the scan did
// not find is skipped), so a stale or damaged checkpoint can cost the
// order, never an object:
//
//	offset  size  field
//	0       4     magic "CDCX"
//	4       1     format version (1)
//	5       3     reserved, zero
//	8       8     number of records n, little endian
//	16      37n   records, most recently used first:
//	              1 byte flags (bit 0: hashed name, others zero),
//	              20 bytes name, 8 bytes generation, 8 bytes last use
//	              (Unix nanoseconds), little endian
//	16+37n  4     CRC-32C (Castagnoli) of everything before it
//
// Nothing may follow.
const (
	checkpointMagic   = "CDCX"
	checkpointVersion = 1
	checkpointHeader  = 16
	checkpointRecLen  = 1 + nameLen + 8 + 8
)

// checkpointRecord is one object in the saved order.
type checkpointRecord struct {
	name objName
	gen  uint64
	used int64
}

// writeCheckpointTo writes n records.
func writeCheckpointTo(w io.Writer, n int, recs iter.Seq[checkpointRecord]) error {
	crc := crc32.New(castagnoli)
	bw := bufio.NewWriterSize(io.MultiWriter(w, crc), 64<<10)
	var h [checkpointHeader]byte
	copy(h[:], checkpointMagic)
	h[4] = checkpointVersion
	binary.LittleEndian.PutUint64(h[8:], uint64(n))
	bw.Write(h[:])
	written := 0
	for r := range recs {
		var b [checkpointRecLen]byte
		if r.name.hashed {
			b[0] = 1
		}
		copy(b[1:], r.name.b[:])
		binary.LittleEndian.PutUint64(b[1+nameLen:], r.gen)
		binary.LittleEndian.PutUint64(b[1+nameLen+8:], uint64(r.used))
		bw.Write(b[:])
		written++
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if written != n {
		return fmt.Errorf("diskcache: checkpoint of %d records, %d given", n, written)
	}
	_, err := w.Write(binary.LittleEndian.AppendUint32(nil, crc.Sum32()))
	return err
}

// readCheckpoint checks a checkpoint and, when fn is not nil, calls it
// with each record as it reads it (so a caller that must not act on a
// damaged file reads it twice: first with fn nil). Every error wraps
// ErrCorrupt, except the reader's own.
func readCheckpoint(r io.Reader, fn func(checkpointRecord)) error {
	crc := crc32.New(castagnoli)
	br := bufio.NewReaderSize(r, 64<<10)
	tr := io.TeeReader(br, crc)
	var h [checkpointHeader]byte
	if _, err := io.ReadFull(tr, h[:]); err != nil {
		return fmt.Errorf("%w: checkpoint header: %w", ErrCorrupt, err)
	}
	if string(h[:4]) != checkpointMagic || h[4] != checkpointVersion || h[5] != 0 || h[6] != 0 || h[7] != 0 {
		return fmt.Errorf("%w: not a checkpoint of version %d: % x", ErrCorrupt, checkpointVersion, h[:8])
	}
	n := binary.LittleEndian.Uint64(h[8:])
	var b [checkpointRecLen]byte
	for i := uint64(0); i < n; i++ {
		if _, err := io.ReadFull(tr, b[:]); err != nil {
			return fmt.Errorf("%w: checkpoint record %d of %d: %w", ErrCorrupt, i, n, err)
		}
		if b[0]&^1 != 0 {
			return fmt.Errorf("%w: checkpoint record %d: flags %#x", ErrCorrupt, i, b[0])
		}
		rec := checkpointRecord{
			gen:  binary.LittleEndian.Uint64(b[1+nameLen:]),
			used: int64(binary.LittleEndian.Uint64(b[1+nameLen+8:])),
		}
		rec.name.hashed = b[0] == 1
		copy(rec.name.b[:], b[1:])
		if fn != nil {
			fn(rec)
		}
	}
	sum := crc.Sum32()
	var t [5]byte
	if k, _ := io.ReadFull(br, t[:]); k != 4 {
		return fmt.Errorf("%w: checkpoint of %d records: %d bytes after them, want 4", ErrCorrupt, n, k)
	}
	if binary.LittleEndian.Uint32(t[:]) != sum {
		return fmt.Errorf("%w: checkpoint checksum mismatch", ErrCorrupt)
	}
	return nil
}
