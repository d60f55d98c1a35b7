// Package statuspage tests coral_status, the Caddy Coral node's status
// page, in a real browser: it runs bin/caddy (built by `make caddy`) with a
// coral app, a coral_proxy and a coral_status site on 127.0.90.10, an
// in-process origin on 127.0.90.1, and Debian's Chromium headless against
// the page. See README.md.
//
// The package has no exported API: everything lives in its tests.
package statuspage
