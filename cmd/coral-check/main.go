// Command coral-check checks Corefiles for the coral plugin without
// starting anything or binding any port, for use before a reload (an
// ExecReload= guard) or in CI:
//
//	coral-check /etc/coral/Corefile
//
// It checks the syntax and directive names of the whole file and every
// coral block as the plugin reads it, key file included; other plugins'
// settings are checked when CoreDNS loads them. It exits 1 when a file
// has an error, 2 on bad usage. For the Caddy half, `caddy validate
// --config FILE` does the same and binds nothing either.
package main

import (
	"fmt"
	"os"

	coral "github.com/coralcdn/coral/plugin/coredns"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: coral-check COREFILE...")
		os.Exit(2)
	}
	status := 0
	for _, name := range os.Args[1:] {
		if err := check(name); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
			status = 1
		}
	}
	os.Exit(status)
}

func check(name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := coral.CheckCorefile(name, f)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("no coral block")
	}
	fmt.Printf("%s: ok (%d coral block(s))\n", name, n)
	return nil
}
