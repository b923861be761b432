//go:build !failpoints

package journal

// Release builds have no failpoints (failpoint.go, built with -tags
// failpoints, has them for the tests).
func failAppend() error { return nil }

func appendDelay() {}
