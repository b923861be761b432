package wire

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A token file other users may read is refused, naming the remedy; one
// only its owner reads is taken, trimmed.
func TestTokenFileModes(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		mode os.FileMode
		ok   bool
	}{{0o600, true}, {0o400, true}, {0o640, false}, {0o644, false}, {0o604, false}} {
		f := filepath.Join(dir, "token")
		os.Remove(f)
		if err := os.WriteFile(f, []byte("s3cret\n"), tc.mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(f, tc.mode)
		got, err := LoadToken("", f)
		switch {
		case tc.ok && (err != nil || got != "s3cret"):
			t.Errorf("mode %04o: %q, %v", tc.mode, got, err)
		case !tc.ok && !errors.Is(err, ErrTokenExposed):
			t.Errorf("mode %04o: %v, want it refused as exposed", tc.mode, err)
		}
	}
}
