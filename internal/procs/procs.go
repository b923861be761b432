// Package procs sets, for the role a process serves, how many threads may
// run its Go code at once (GOMAXPROCS) and, when the operator asks, the
// CPUs its threads may run on (affinity.go).
//
// A backup computes little and waits much: each small batch is a read
// from the network, a checksum, a synced append and an ack. With a P per
// CPU, every goroutine the batch readies (the store loop, the applier,
// the ack) wakes another thread on another CPU, and on a virtual machine
// each of those wake-ups is two costly context switches. With one P the
// goroutine runs on the thread already awake. On two vCPUs, per 4 KiB
// batch, one P took a backup's CPU from 0.33 to 0.27 ms and its context
// switches from 10 to 7.7, at the same latency and the same 16 MiB batch
// throughput, and MariaDB's commits through two such backups ran 12-15 %
// faster (docs/PERFORMANCE.md). A primary serves a FUSE mount whose
// callers run in parallel: one P cost it a quarter of its barrier rate.
package procs

import (
	"os"
	"runtime"
)

// Set limits the process to n threads running Go code at once; n <= 0
// restores the runtime's default (one per CPU the process may use, kept
// up to date as that limit changes). It changes nothing when the
// GOMAXPROCS environment variable is set: the operator chose. It returns
// the setting now in effect.
func Set(n int) int {
	if os.Getenv("GOMAXPROCS") != "" {
		return runtime.GOMAXPROCS(0)
	}
	if n <= 0 {
		runtime.SetDefaultGOMAXPROCS()
	} else {
		runtime.GOMAXPROCS(n)
	}
	return runtime.GOMAXPROCS(0)
}
