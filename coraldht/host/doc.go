// Package host runs a server's Coral DSHT node across configuration
// reloads. The CoreDNS plugin coral and the Caddy app coral are both thin
// adapters on it: they turn their configuration into Options, Acquire a
// Handle when a configuration starts and Release it when that
// configuration stops.
//
// # Lifecycle
//
// One node runs per listen address (Options.Listen) in a process. The first
// Acquire for an address binds its UDP socket, starts a node on it and
// starts the join loop; later Acquires for the same address share that
// node and count a reference each. Release drops a reference, and the last
// one stops the node and closes the socket at once: servers acquire the new
// configuration's handle before they release the old one (CoreDNS starts
// the new instance before it stops the old one; Caddy provisions the new
// configuration before it cleans up the old one), so no grace period is
// needed to carry the node across a reload.
//
// The join loop (coraldht's Node.JoinRetrying) bootstraps through
// Options.Bootstrap until one answers, 1 s to 30 s apart, logging each
// failure. A node without bootstrap addresses is the first of its network
// and counts as joined at once; it still bootstraps in the background once
// others have found it, which starts its clustering.
//
// Check validates options and reads the key file without binding
// anything, for configuration checks.
//
// Options.Validate holds the rules every server shares, once: among them
// that a node off loopback needs a network key file (KeyFile), since the
// key authenticates every datagram.
//
// # Configuration
//
// Both servers read the node's options from their configuration files with
// this package's parser: ParseOptions for a block of node options alone
// (Caddy's coral global option), OptionsParser one line at a time for a
// block that mixes them with a server's own properties (CoreDNS's coral
// block). It reads through a small Dispenser interface that CoreDNS's
// Controller and, with NextBlock(0), Caddy's Dispenser both provide, so the
// grammar, the checks and the messages are the same in both.
//
// Running lists the nodes running in the process, by listen address: the
// registry both servers' metrics read; state a server keeps beside a node
// across reloads is Attached to its listen address.
//
// # Reloads
//
// The policy, the same in both servers: a reload whose node settings are
// unchanged keeps the running node, its socket, routing tables, clusters
// and the values it stores for others. A reload that changes only the
// network keys (Options.KeyFile and AcceptedKeyFiles, or their contents)
// updates the running node's keyring in place, so a network rotates its
// key by reloading every node three times (see coraldht.Keyring), and
// undoes admin calls that changed the keyring since. A reload that changes
// node settings (the advertised address, the bootstrap list, whether there
// is a key file at all, the levels, the pins or the services) restarts
// the node in place: the old
// node stops, and a new one with the new settings starts on the same UDP
// socket. The socket stays bound throughout (each node reads a duplicate of
// its descriptor), so nothing else can take the port, there is no "address
// already in use", and datagrams that arrive during the restart wait in the
// socket's receive buffer for the new node. The new node starts with empty
// tables, pings the old one's contacts (handed over in memory) and rejoins
// through them and its bootstrap list; peers that knew the old one reach
// the new one at the same address, under the same ID when the advertised
// address is unchanged. Across a restart of the process the contacts are
// kept in Options.StateDir (contacts.go); Instance.Warm says when the new
// run has pinged them. What a server keeps beside the node
// (the CoreDNS plugin's resolver RTTs, known name servers, cookie secret
// and last live set) it attaches to the listen address with Attached,
// which outlives restarts and lasts until the last Release.
//
// The newest Acquire's settings win: the restart happens when the new
// configuration acquires the node, before the old configuration has
// stopped. Until it stops, the old configuration still holds the node it
// started with, now closed (operations on it return coraldht.ErrClosed);
// Handle.Node and Handle.Instance always return the running one. Servers
// acquire at the point where the new configuration is known good (CoreDNS
// in OnStartup, Caddy in the app's Start), so a configuration that fails
// to load never touches the node. Should it fail later, after acquiring
// (another app failing to start), its Release restarts the node with the
// settings of the newest remaining holder: the configuration that keeps
// running gets back the node it configured, with fresh tables.
//
// A drain (Handle.SetDraining) restarts the node in place without its
// services, so that the nodes which hand it out (CoreDNS's live sets) drop
// it, while it keeps serving; it lasts across reloads until undone. The logger (Options.Logger) is not a node setting: a
// change of logger alone does not restart the node.
//
// On platforms without descriptor duplication (not Unix) a restart closes
// the socket and binds the address again instead; datagrams that arrive in
// between are lost.
package host
