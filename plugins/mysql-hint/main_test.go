package main

import (
	"io"
	"log"
	"os"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/pbfs/pbfs/internal/fstest"
)

// TestMain removes the binaries the tests built once they have run. The
// driver's complaints about connections a killed server dropped are
// expected there.
func TestMain(m *testing.M) {
	mysql.SetLogger(log.New(io.Discard, "", 0))
	os.Exit(fstest.Main(m))
}
