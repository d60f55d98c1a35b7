// Package archtest holds no code, only the test of the module's layering:
// which of its packages may depend on which. The rules are two tables in
// layering_test.go, layers and rules; every package of the module must fall
// in exactly one layer, so a new package fails the test until it is given
// its place.
package archtest
