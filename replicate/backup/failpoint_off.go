//go:build !failpoints

package backup

// Release builds have no failpoints (failpoint.go, built with -tags
// failpoints, has them for the tests).
func markFailpoint(int64, bool) {}

func nextMark() int64 { return 0 }

func ackedFailpoint(*Backup) {}
