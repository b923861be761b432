// Package fs is the thin bazil.org/fuse binding of pbfs: it mounts the
// capture core (package capture) at a directory, runs its own request loop
// (a pool of goroutines that each read and handle their own request, grown
// while all are busy), translates requests into capture calls, and maps
// errors to errnos in one place (errno.go).
package fs
