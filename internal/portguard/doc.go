// Package portguard keeps a second process off the addresses a Coral
// server already serves.
//
// Caddy and CoreDNS bind their listeners with SO_REUSEPORT, so that a
// configuration reload can bind the new listeners before the old ones
// close. The kernel does not know a reload from a stranger: a second
// process of the same user on the same address binds too, and from then
// on the kernel splits the connections and datagrams between the two.
// A second coral-caddy on a node's HTTP or admin address, or a second
// coral-coredns on its port 53, would quietly serve a share of the
// clients from another cache, another DSHT node, another configuration.
//
// Check closes that gap where the servers themselves cannot: it reads the
// machine's socket tables (/proc/net/tcp, tcp6, udp and udp6 on Linux:
// those of this network namespace, the same scope as the addresses) and
// this process's open files (/proc/self/fd), and reports the first of the
// given addresses on which a socket of another process listens. Sockets of this process never count, so a reload, which binds
// the new listeners beside the old ones in the same process, passes.
//
// Two addresses overlap when their transports and ports are equal and
// their IP addresses are equal or one of them is unspecified (0.0.0.0
// covers every IPv4 address, :: every address of both families, since
// Go's listeners on :: accept IPv4 too). An overlap counts even when the
// kernel would send each address's traffic to the more specific socket: a
// listener on 127.0.0.2:80 beside another process's on :80 takes that
// address from it without a word.
//
// Unix sockets are left out. They are not shared but taken: a second bind
// needs the file removed first (Caddy removes it), so a second server
// cannot split a unix socket's clients, it can only take the path, and it
// does that before any module of its configuration runs. And a path names
// a file of a mount namespace, while /proc/net/unix lists the paths of the
// whole network namespace: two servers in two containers that share the
// host's network would look alike.
//
// A reload closes listeners while the check runs (Caddy's admin API
// closes its old listener in a goroutine of its own on every
// configuration load), and a socket closed between reading the socket
// table and reading this process's files would look like another
// process's. So Check reads this process's files before and after the
// table, and reports a conflict only when the same socket shows in three
// snapshots in a row.
//
// The check reads snapshots: two processes that start at the same
// instant may both pass. It is there for the operator who starts a second
// node by hand or from a second unit, not as a lock.
//
// Both servers call it once per configuration load, before they serve:
// the Caddy module in the coral app's Start (its HTTP sites' addresses,
// and every socket the process already listens on: the admin API on TCP
// and the DSHT node), the CoreDNS plugin in an OnStartup function of its setup
// (the server block's DNS addresses and the DSHT node). Elsewhere than on
// Linux it checks nothing.
package portguard
