package host_test

import (
	"os"
	"testing"

	"github.com/pbfs/pbfs/internal/fstest"
)

// TestMain removes the binaries the tests built once they have run.
func TestMain(m *testing.M) { os.Exit(fstest.Main(m)) }
