// Package deploy holds the tests of deploy/: the systemd units (checked
// with systemd-analyze), the .deb packages (built with nfpm, installed and
// purged with dpkg), the Prometheus alert rules (promtool), the Grafana
// dashboard, and the operations guide's walk-through, which runs the
// command blocks of docs/operations.md on a lab of three nodes on
// 127.0.145.0/24. See README.md.
//
// The package has no exported API: everything lives in its tests.
package deploy
