//go:build !failpoints

package replicate

// Release builds have no failpoints (backupfailpoint.go, built with -tags
// failpoints, has them for the tests).
func markFailpoint(int64, bool) {}

func nextMark() int64 { return 0 }

func ackedFailpoint(*Backup) {}
