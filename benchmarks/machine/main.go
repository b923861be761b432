// Command machine prints what this machine charges for the primitives a
// barrier is made of (benchproc.Calibration): a system call, a thread
// wake-up round trip on one CPU and across two, and a synced 4 KiB
// write in -dir. Every benchmark report prints the same line at its
// start and end; run this alone to watch a shared machine's slow spells
// come and go, or to compare machines (docs/PERFORMANCE.md, "A barrier
// and what its parts cost").
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
	"github.com/pbfs/pbfs/benchmarks/internal/prologue"
)

func main() {
	dir := flag.String("dir", "/var/tmp", "where the synced writes go (a real disk, not a tmpfs)")
	n := flag.Int("n", 3, "how many times to measure")
	every := flag.Duration("every", time.Second, "pause between measurements")
	flag.Parse()
	if _, err := prologue.Workdir(*dir); err != nil {
		fmt.Fprintln(os.Stderr, "machine:", err)
		os.Exit(2)
	}
	for i := range *n {
		if i > 0 {
			time.Sleep(*every)
		}
		c := benchproc.Calibrate(*dir)
		fmt.Printf("%s  %s\n", time.Now().UTC().Format("15:04:05"), c)
		if c.Err != nil {
			os.Exit(1)
		}
	}
}
