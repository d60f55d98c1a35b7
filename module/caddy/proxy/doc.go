// Package proxy is the core of Coral's cooperative HTTP proxy, apart from
// any web server: it serves Coralized URLs (http://www.example.com.nyud.net/…)
// from its disk cache, from peer proxies the DSHT names, or from the origin,
// fetching each object once however many clients wait for it. The Caddy
// module coral_proxy (package coralcaddy, module/caddy) is a thin adapter
// over it: its Provision builds a Proxy from the Caddyfile's options and
// its ServeHTTP hands the request over. Nothing here imports Caddy or the
// adapter (internal/archtest checks it), so the core can be read, tested
// and built on without either.
//
// The name is the role: the package is the proxy, the adapter is how Caddy
// runs it (as CoreDNS's forward plugin runs plugin/pkg/proxy, and Caddy's
// cache-handler runs Souin's cache).
//
// # The request path
//
// Proxy.ServeHTTP reads top to bottom, one phase after the other, each in
// its own file:
//
//	parse    target.go, targetcache.go   the Coralized host, the cache key, the origin URL
//	admit    admit.go                    refuse what is not to be served (421, 400, 403, 405,
//	                                     429, 308 to https, a redirect over budget)
//	look up  serve.go                    the stored copy, or the variant the request selects (vary.go)
//	serve    serve.go                    a fresh hit; a stale copy revalidated or served meanwhile
//	download serve.go, download.go       start or join the one download of the object; its slot
//	                                     (slots.go); what it does (fetch.go: put+get, peers.go,
//	                                     refetch.go, fetch_origin.go, revalidate.go)
//	respond  respond.go                  the stored or arriving body, or a relayed uncached one
//	slices   slices.go, rangemiss.go     big objects kept and fetched in slices (served by
//	                                     respond.go); a cold range from peers or the origin
//
// and never calls back into the server around it. What it needs of that
// server comes in through Config, once, at New: the node accessor, the
// abuse controls (Abuse), where to count (Metrics) and log fetches
// (Fetched), and who the client is (ClientAddr). A request it refuses, or
// cannot answer, comes back as an *Error with the HTTP status, which the
// server writes (the adapter makes it a caddyhttp.Error).
//
// # The node
//
// The proxy reaches its DSHT node one way only: Config.Node, a function it
// calls each time it needs the node (the put+get of a download and its
// renewals, the put of a reference, a reference's DSHT address, learning
// its own HTTP address), and References calls the same function for the
// renewals it does. It never keeps the node, because the node is not its
// own and does not outlive it the same way: in Caddy, the coral app owns
// the node (coraldht/host), and a configuration reload does not rebuild
// it. A reload with unchanged node settings keeps the running node; one
// that changes them restarts the node in place on the same socket (a new
// *coraldht.Node); a drain restarts it without its HTTP service; a
// configuration that fails after taking the node gives the previous
// settings back with one more restart. A Proxy, and the References of its
// store (which outlive configurations with the store), must use the node
// running after any of these, so Node answers "the node running now" (in
// the adapter, the newest started coral app's current node) or nil when
// there is none, and the proxy then serves from its cache and the origins
// alone. The rest of the process (the admin API, the status page, purges
// from other proxies) reaches the node through the adapter, not through
// the proxy.
//
// # Memory
//
// What a proxy keeps per cached object is one fixed-size entry outside
// the Go heap: diskcache's index entry (about 88 bytes with its share of
// the table, see that package's "Memory"). The state of the DSHT
// reference the proxy renews for the object (References, refs.go) is 8
// bytes of that entry, a diskcache mark: when to put it again, the TTL,
// requested since the last put, negative, and which of the proxy's (HTTP,
// DSHT) address pairs was put, a number into a short list, since every
// reference of a proxy names the same addresses. A reference is per URL,
// and the URL's own entry holds it: the object, or for a Vary object its
// index of variants. It goes with its object (eviction, purge), which the
// renewal pass checked anyway; the pass visits the index a chunk of 4,096
// slots at a time under the store's lock, and a hit notes its request
// under that lock, writing only the first time after a put.
//
// The references had a table of their own before, 32-byte entries keyed
// by the object's 20-byte name in 64 open-addressing shards: about 57
// bytes per object at a million objects (eval/scale at 37d58e1), and a
// sync.Map of key strings before that, about 240 bytes on the heap and
// twice that resident once the collector's headroom (GOGC=100) is
// counted. A module must not change the GOGC or GOMEMLIMIT of the Caddy
// it runs in, so the index lives outside the heap instead (package
// module/caddy/internal/offheap: anonymous mappings, resident as written,
// given back when the store is garbage).
//
// What else grows in memory is bounded, whatever the number of objects:
// the DSHT node's store (MaxKeys, MaxValues) and its per-key load counters
// (MaxTrackedKeys), the hot metadata and the memory tier (16 MiB each by
// default), the parsed-target cache.
//
// # Where what comes next goes
//
// Bounds per client or per origin on downloads and relays belong to the
// slots (slots.go) and admission (admit.go); what the proxy stores, and for
// how long, to fetch.go's keep and the policy (httpcache); how a store
// keeps objects to package diskcache behind Config.Store; what is written
// to the client, and when a body counts as complete, to respond.go.
package proxy
