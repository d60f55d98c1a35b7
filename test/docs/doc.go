// Package docs holds the tests of the repository's documentation as a
// reader uses it: the example configurations (Caddyfile.example,
// Corefile.example, deploy/examples) and every fenced block of every
// README and guide, each checked as the marker above it says (a
// configuration adapted and validated, commands pasted one by one into a
// terminal against the real bin/caddy and bin/coredns, a file shown as
// it is). A block without a marker fails the build, so a new document is
// covered the day it is written. See README.md.
//
// The package has no exported API: everything lives in its tests. Its
// servers listen on 127.0.147.0/24, and the examples on 127.0.0.2 and
// 127.0.0.3 as they are written.
package docs
