//go:build !race

package fstest

const raceEnabled = false
