// Package offheap allocates large arrays of pointer-free values outside
// the Go heap: anonymous private mappings (mmap) where the system has
// them, the Go heap otherwise.
//
// Why: coral_proxy's per-object table (diskcache's index) is a few large
// pointer-free arrays, tens of bytes per cached object. On the Go heap
// each byte of them costs about two of
// resident memory, because the collector lets the heap grow to twice its
// live data before it collects (GOGC=100), and a module must not change
// the process-wide GOGC or GOMEMLIMIT of the server it runs in. Mapped
// outside the heap they cost what they hold: a page becomes resident when
// it is first written, and the collector neither scans them nor counts
// them towards its next goal.
//
// The values must hold no Go pointers (Make panics otherwise): the
// collector does not see into this memory, so a pointer stored there
// would not keep its target alive. Go pointers into the memory (to an
// element) are fine; they must not be used after Free.
//
// Under the race detector (-race) Make allocates on the Go heap: the
// detector does not watch memory outside the heap, and the tables are
// exactly what -race tests must check.
package offheap
