// Command sleeper is vtime's own experiment: it sleeps -hours of virtual
// time and prints how long that took, or fails with -fail.
package main

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/coralcdn/coral/eval/internal/vtime"
)

func main() {
	hours := flag.Int("hours", 1, "virtual hours to sleep")
	fail := flag.Bool("fail", false, "return an error instead")
	flag.Parse()
	vtime.Main(func() error {
		if *fail {
			return errors.New("boom")
		}
		start := time.Now()
		time.Sleep(time.Duration(*hours) * time.Hour)
		fmt.Printf("slept %v of virtual time; args %q\n", time.Since(start), flag.Args())
		return nil
	})
}
