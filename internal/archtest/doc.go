// Package archtest holds no code, only tests of the module's architecture.
// layering_test.go checks which of its packages may depend on which: the
// rules are tables there (layers, rules, and externalRules for packages
// outside the module); every package of the module must fall in exactly
// one layer, so a new package fails the test until it is given its place.
// requestpath_test.go checks that the proxy's request path reads top to
// bottom: from the Caddy adapter into the core, and rarely back to a file
// it has left.
package archtest
