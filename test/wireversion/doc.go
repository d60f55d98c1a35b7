// Package wireversion tests that a node of the previous recorded wire
// version (the coraldht of the commit in coraldht/testdata/previous-wire-
// version) and a node of this checkout share a network: they join through
// each other and each reads what the other put. The previous node is built
// from `git archive` of that commit, so the test needs a git checkout that
// has the commit; elsewhere it skips, saying why (under CI=true it fails).
// It uses loopback addresses 127.0.180.40–.49. A second record,
// coraldht/testdata/before-load-wire-version, is the release before the
// load extension: TestLoadToNodesBeforeIt checks that its nodes keep the
// entry unread.
//
// The package has no exported API: everything lives in its tests.
package wireversion
