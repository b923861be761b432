//go:build race

package fstest

// raceEnabled builds the pbfs binary under test with the race detector
// when the tests themselves run with it.
const raceEnabled = true
