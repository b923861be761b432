package procs

import (
	"runtime"
	"testing"
)

// TestSet: a limit takes effect, 0 gives the runtime's default back, and
// a GOMAXPROCS in the environment is left alone.
func TestSet(t *testing.T) {
	t.Setenv("GOMAXPROCS", "") // Set reads it: unset for this test
	runtime.SetDefaultGOMAXPROCS()
	def := runtime.GOMAXPROCS(0)
	t.Cleanup(runtime.SetDefaultGOMAXPROCS)
	if got := Set(1); got != 1 || runtime.GOMAXPROCS(0) != 1 {
		t.Fatalf("Set(1) = %d, GOMAXPROCS %d", got, runtime.GOMAXPROCS(0))
	}
	if got := Set(3); got != 3 || runtime.GOMAXPROCS(0) != 3 {
		t.Fatalf("Set(3) = %d, GOMAXPROCS %d", got, runtime.GOMAXPROCS(0))
	}
	if got := Set(0); got != def || runtime.GOMAXPROCS(0) != def {
		t.Fatalf("Set(0) = %d, GOMAXPROCS %d, want the default %d", got, runtime.GOMAXPROCS(0), def)
	}
	t.Setenv("GOMAXPROCS", "5")
	if got := Set(1); got != def || runtime.GOMAXPROCS(0) != def {
		t.Fatalf("with GOMAXPROCS=5 in the environment, Set(1) = %d, GOMAXPROCS %d: want it left at %d", got, runtime.GOMAXPROCS(0), def)
	}
}
