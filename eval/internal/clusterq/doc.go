// Package clusterq judges a clustering of nodes placed on an RTT matrix
// (eval/internal/topology) the way the paper's Figure 7 is read: how many
// clusters at each level, how large, how many obey Coral's 80 % rule, how
// many nodes that could be clustered are, against an offline greedy
// clustering of the same matrix; and draws the clusters on a map.
// eval/clusters judges the virtual-time network with it, eval/wan the real
// servers on the emulated wide area.
package clusterq
