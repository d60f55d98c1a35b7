// Package coraldht implements a Coral node: a member of a hierarchy of
// distributed sloppy hash tables (DSHTs), the indexing layer of the Coral
// content distribution network. The Coral DNS server asks it for nearby
// proxies; the Coral HTTP proxy asks it which proxies cache a URL.
//
// # Vocabulary
//
// Key, node ID: 160-bit identifiers in one space. A node's ID is SHA-1 of
// the address it advertises ("ip:port"), so several nodes may share a host;
// an application key is SHA-1 of a name (KeyFor). The distance between two
// IDs is their XOR read as an unsigned integer; a node is close to a key
// when that distance is small.
//
// Level, cluster: every node belongs to one cluster per level. Level 0 is
// the global cluster (ID all zeros); higher levels have RTT thresholds
// (default 60 ms and 20 ms) and random cluster IDs, and their clusters hold
// nodes that are close to each other in the network. Each cluster is a DSHT
// of its own, with its own routing table and storage at each member. A node
// serves put and get requests for a level only from nodes in the same
// cluster at that level.
//
// Routing table: Kademlia k-buckets, one table per level. A contact heard
// from recently is good; one silent for QuestionableAfter is pinged before
// a newcomer may take its slot; one that misses MaxFailures RPCs in a row is
// replaced from the bucket's replacement cache.
//
// Lookup: an iterative walk toward a key. With splice(k, t, i) = the top b·i
// bits of k followed by the rest of t, the walk starts with t = this node's
// ID and repeatedly sets t = splice(k, t, i) for the smallest i that changes
// t; the next hop is the known node closest to t. Correcting only b bits per
// step (default 1) keeps requests for a popular key from all converging on
// the node closest to it (tree saturation). Up to Alpha RPCs are in flight:
// a hop that exceeds its adaptive timeout is treated as slow and the walk
// continues with the next best node (a hedge), still accepting the slow
// reply. Once t equals the key, the walk ends when the Replicas live nodes
// nearest the key have answered.
//
// Full: a node is full for key k and a new value with lifetime T when it
// holds l (FullValues, default 4) values for k that all expire no sooner
// than T/2 from now. A node keeps at most l values per key; a store into a
// node that is not full evicts the key's soonest-expiring value if needed.
//
// Loaded: a node is loaded for k when it has seen more than β (Leak, default
// 12) get or put requests for k in the last minute. A loaded node still
// reports "not loaded" once every minute/β (the leak), so the nodes nearest a
// hot key keep receiving fresh values at a bounded rate.
//
// Put (sloppy insertion): the forward phase walks toward the key; every
// contacted node — this one first — reports whether it is loaded and how many
// values it holds with their minimum expiry. The walk stops at the nodes
// nearest the key or at the first node both full and loaded. The contacted
// nodes that were not both full and loaded form the stack, nearest the key
// on top. The reverse phase stores at the top of the stack and moves down
// when a node refuses (it filled up meanwhile), until Replicas nodes hold
// the value. A store of a value a node already holds refreshes it: a longer
// TTL replaces a shorter one.
//
// Get: the walk returns at the first node holding values for the key.
//
// Put+get: a put that also returns the first values found in either
// direction — the values forward-phase nodes hold, or the values a store
// finds already present. Because stores serialize at each node, when many
// nodes put+get a fresh key at once exactly one of them sees no values: it
// fetches the object from the origin and the others fetch from peers.
//
// Hierarchical operations: gets and puts run on the highest (fastest) level
// first and continue on the next lower level from the point in the ID space
// where the previous level stopped, so the whole operation crosses the ID
// space about once. A put stops descending at a node that is full and
// loaded. A put+get runs one level at a time, fastest first, and goes on to
// the next level only if its level showed no values, so racing callers are
// pointed at a copy in their own cluster when there is one and never wait
// on each other; a plain put stores from the lowest level reached upward.
//
// Clustering: every ClusterInterval a node reconsiders its cluster at each
// level above 0 from the cluster lists and RTTs its RPCs gathered. It joins
// a cluster when at least 80 % of the members it sampled are under the
// level's threshold and leaves when at least 50 % of the members it measured
// are over; between acceptable clusters it prefers the larger when their
// log2 sizes differ by more than δ (0 in even hours of their age, 2 in odd
// ones), else the lower ID. A cluster that is no longer acceptable splits
// around its center, the member nearest SHA-1(cluster ID). At start a node
// publishes itself under locality hints (its /24 and those of nearby
// routers) to meet its neighbours at once. Operators may pin a level's
// cluster by name (Config.Pins).
//
// Network key: all nodes of one Coral network share a secret; every datagram
// carries a truncated HMAC-SHA256 tag made with it, a timestamp and a sender
// identity. Datagrams that fail authentication, are stale or replayed are
// dropped without a reply and counted in Stats. A node without a key works
// only on loopback. PROTOCOL.md specifies the wire format.
//
// Member: any holder of the network key. Proven address: an address a
// peer has shown it receives at, by answering there or by echoing an
// address cookie sent there; a member can claim any address, so only
// proven contacts enter routing tables, and replies larger than their
// requests go only to proven sources. Suspect: a source prefix that did
// what honest nodes do not (Suspects). Node identity: a node's own key
// pair and a certificate from the operator's fleet key (Config.Identity);
// with identities, one node is removed by a revocation list instead of a
// new network key. README, Security, has the rules and their bounds.
//
// Transport: a node sends datagrams through a Transport: UDPTransport for
// real sockets, a coraldht/memnet Network for tests and simulations with
// per-pair latency, jitter, loss, partitions and crashes. A memnet Network
// built inside a testing/synctest bubble runs in virtual time.
//
// # Using it
//
// Create a node with NewNode(DefaultConfig() plus your changes, transport),
// join with Bootstrap, then call Put, Get (GetAll for every node's values),
// PutGet, Nodes and Levels. Stats returns plain counters for export to any
// metrics system.
//
// # Layout
//
// node.go is a node's lifecycle (NewNode, Close, maintenance); dispatch.go
// receives datagrams and dispatches them; rpc.go is the table of calls in
// flight; lookup.go and lookup_hop.go walk a level toward a key; ops.go,
// put.go and join.go are the operations; store.go holds values; cluster.go
// and cluster_join.go are clustering; hints.go locality hints; app.go
// application messages; auth.go the network key and replay filter; cookies.go,
// verify.go, abuse.go and identity.go what bounds a member; bounded.go the
// tables a peer can fill; introspect.go and stats.go what a node tells about
// itself. Beside the package:
// coraldht/internal/wire is the codec PROTOCOL.md specifies (ID, Contact,
// ClusterInfo and Services are defined there and aliased here);
// coraldht/memnet the in-memory network for tests and simulations;
// coraldht/icmpprobe the ICMP traces (hints) and RTT probes the DNS plugin
// also uses; coraldht/host runs a server's node across reloads and reads
// its options; coraldht/acmetxt keeps ACME DNS-01 values in the DSHT;
// coraldht/fleet holds node identity mode's certificates and revocation
// lists.
package coraldht
