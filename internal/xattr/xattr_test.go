package xattr

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestReadsWholeAttributes(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if names, err := List(p); err != nil || len(names) != 0 {
		t.Fatalf("no attributes: %q %v", names, err)
	}
	big := make([]byte, 3000)
	for i := range big {
		big[i] = byte(i)
	}
	for name, v := range map[string][]byte{"user.a": []byte("1"), "user.big": big, "user.empty": nil} {
		if err := unix.Setxattr(p, name, v, 0); err != nil {
			t.Skipf("no user xattrs here: %v", err)
		}
	}
	all, err := All(p)
	if err != nil || len(all) != 3 || string(all["user.a"]) != "1" || string(all["user.big"]) != string(big) || len(all["user.empty"]) != 0 {
		t.Fatalf("All: %d attributes, %v", len(all), err)
	}
	// A symlink's own attributes, not its target's.
	s := filepath.Join(dir, "s")
	if err := os.Symlink("f", s); err != nil {
		t.Fatal(err)
	}
	if names, err := List(s); err != nil || len(names) != 0 {
		t.Fatalf("a symlink listed its target's attributes: %q %v", names, err)
	}
	if _, err := Get(p, "user.none"); !errors.Is(err, unix.ENODATA) {
		t.Fatalf("a missing attribute: %v", err)
	}
}
