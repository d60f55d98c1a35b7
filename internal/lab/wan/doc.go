// Package wan is an emulated wide area on one machine, on top of
// internal/lab/netns: sites are network namespaces behind router
// namespaces arranged as a topology's hierarchy (site gateway → region
// router → core), which forward with the kernel, so TTLs expire at real
// routers and traceroute (and coraldht/icmpprobe) get Time Exceeded from
// them; a share of routers stays silent, as on the Internet. Every
// wide-area link has a one-way delay, chosen so that site-to-site RTTs
// match a matrix (see plan.go), and an optional loss; a site's line to
// the world can be made thin (Throttle). This kernel has no netem, so the
// delays are held in userspace: each router's iptables rules hand what it
// sends on a wide-area link to NFQUEUE, where the lab's delayer (a child
// process at real-time priority, package nfq) accepts each packet once its
// delay has passed. The routers stay real: the delayer only decides when.
//
//	l, err := wan.New(ctx, wan.Options{Sites: sites, RTT: rtt, SilentShare: 0.15, Dir: dir})
//	defer l.Close()
//	h, _ := l.AddHost(3, "web", wan.HostAddr(3, 10))  // a host on site 3's LAN
//	rtts, _ := wan.MeasureRTT(ctx, h, other, 5)        // UDP echo, sorted
//	routers, _ := wan.Trace(h, other.Addr, 8, time.Second)
//
// Only 198.18.0.0/15 is used (plan.go has the address plan), only inside
// the lab's namespaces; Close removes them, and a run killed before Close
// leaves them to netns's reaper. Package fleet deploys Coral on a lab.
package wan
